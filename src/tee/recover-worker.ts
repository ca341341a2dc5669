/**
 * Piscina worker: recovers the EIP-191 signer of a TEE provider's signed text off the event loop. The
 * recovery is pure-JS secp256k1 (noble, through viem), 3–5 ms of CPU a signature on a busy 2-core machine: on
 * the event loop it would stall every other request for that long.
 */
import { recoverMessageAddress } from 'viem'

export interface RecoverInput {
  readonly text: string
  readonly signature: `0x${string}`
}

/** The lower-case signer address, or '' when the signature does not recover. */
export default async function recoverSigner(input: RecoverInput): Promise<string> {
  try {
    return (await recoverMessageAddress({ message: input.text, signature: input.signature })).toLowerCase()
  } catch {
    return ''
  }
}
