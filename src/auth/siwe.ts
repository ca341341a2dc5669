/**
 * Sign-In with Ethereum (EIP-4361) for the console: a signed message is checked with viem's SIWE utilities
 * (parse, then validate domain, nonce and time window), then its EIP-191 signer is recovered in the signature
 * worker (tee/signer-recovery.ts: off the event loop; local, no RPC, so externally owned accounts only; a contract
 * wallet's EIP-1271 signature is refused) and must be the message's address.
 *
 * Every refusal is 401 invalid_siwe_message with a message saying which check failed; the nonce is spent by
 * the attempt whatever its outcome (session.ts).
 */
import type { SiweMessage } from 'viem/siwe'
import { RouterError } from '../errors.js'
import type { ConsoleOrigins } from './console-origins.js'
import type { SessionBook } from './session.js'

/** EIP-155 chain id the console signs in on by default (Ethereum mainnet; it only scopes the message). */
export const DEFAULT_CHAIN_ID = 1
/** Longest sign-in message accepted (a SIWE message with a few resources is well under 2 KiB). */
export const MAX_MESSAGE_CHARS = 8192

export interface SiweExpectations {
  /**
   * Where the console is reached: the message's domain must be one of these authorities and its URI on that
   * authority's origin. Not the request's Host, which the sender writes.
   */
  readonly origins: ConsoleOrigins
  readonly chainId: number
  readonly now: number
  /** The lower-case EIP-191 signer of a text, '' when the signature does not recover (tee/signer-recovery.ts). */
  readonly recover: (input: { text: string; signature: `0x${string}` }) => Promise<string>
}

export interface SignedIn {
  /** Lower-case wallet address: the account id. */
  readonly wallet: string
  /** Epoch ms of the message's expiration time, Infinity when it has none. */
  readonly expiresAt: number
}

function refused(why: string): RouterError {
  return new RouterError('invalid_siwe_message', `sign-in refused: ${why}`)
}

/** Checks a signed SIWE message; spends its nonce. */
export async function verifySignIn(book: SessionBook, message: unknown, signature: unknown, expect: SiweExpectations): Promise<SignedIn> {
  if (typeof message !== 'string' || message.length === 0 || message.length > MAX_MESSAGE_CHARS) {
    throw new RouterError('invalid_request', `message must be the EIP-4361 message text, at most ${MAX_MESSAGE_CHARS} characters`)
  }
  if (typeof signature !== 'string' || !/^0x[0-9a-fA-F]{130}$/.test(signature)) {
    throw new RouterError('invalid_request', 'signature must be a 65-byte hex signature (0x followed by 130 hex digits)')
  }
  // viem is loaded on the first sign-in, not at start: it is about 29 MiB of the router's memory otherwise.
  const { parseSiweMessage, validateSiweMessage } = await import('viem/siwe')
  let fields: Partial<SiweMessage>
  try {
    fields = parseSiweMessage(message)
  } catch {
    throw refused('the message is not an EIP-4361 message')
  }
  const { address, domain, uri, version, chainId, nonce, issuedAt } = fields
  if (address === undefined || domain === undefined || uri === undefined || chainId === undefined || nonce === undefined || issuedAt === undefined) {
    throw refused('the message lacks one of address, domain, URI, chain ID, nonce and issued-at')
  }
  if (version !== '1') throw refused(`version ${JSON.stringify(version)} is not 1`)
  // Spent before anything else can fail: a nonce is good for one attempt.
  if (!book.consumeNonce(nonce)) throw refused('the nonce is unknown, already used or expired: ask /v1/auth/nonce for a new one')
  if (!expect.origins.hasAuthority(domain)) throw refused(`the message is for ${JSON.stringify(domain)}, this console is reached at ${expect.origins}`)
  let url: URL
  try {
    url = new URL(uri)
  } catch {
    throw refused('the message URI is not a URL')
  }
  if (expect.origins.origin(url.protocol.slice(0, -1), domain) !== url.origin) {
    throw refused(`the message URI ${JSON.stringify(uri)} is not on the origin of its domain ${JSON.stringify(domain)}`)
  }
  if (chainId !== expect.chainId) throw refused(`chain ID ${chainId} is not ${expect.chainId}`)
  const time = new Date(expect.now)
  if (!validateSiweMessage({ message: fields, domain, nonce, time })) {
    throw refused('the message has expired or is not valid yet')
  }
  // Issued-at in the future beyond a small clock skew: a message prepared for later use.
  if (issuedAt.getTime() > expect.now + 60_000) throw refused('the message is issued in the future')
  let signer: string
  try {
    signer = await expect.recover({ text: message, signature: signature as `0x${string}` })
  } catch (err) {
    if ((err as Error)?.name === 'SignerRecoveryBusy') throw new RouterError('rate_limit_exceeded', 'too many sign-ins are being checked: try again shortly', { 'Retry-After': '5' })
    throw err
  }
  if (signer !== address.toLowerCase()) throw refused(`the signature is not ${address}'s signature of this message`)
  return { wallet: address.toLowerCase(), expiresAt: fields.expirationTime?.getTime() ?? Infinity }
}
