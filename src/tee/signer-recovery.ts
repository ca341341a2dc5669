/**
 * EIP-191 signer recovery off the event loop, in one piscina pool shared by everything that checks a signature:
 * TEE providers' signed answers (tee/verify.ts) and console sign-ins (auth/siwe.ts). Pure-JS secp256k1 costs
 * milliseconds of CPU a signature: on the event loop a flood of sign-ins would stall every other request.
 * Started on the first use (an idle thread is about 10 MB); its queue is bounded, so a flood is refused
 * (`SignerRecoveryBusy`) instead of queued without end.
 */
import { Piscina } from 'piscina'
import type { RecoverInput } from './recover-worker.js'

/** Signatures waiting for the worker at most; past it `recover` rejects with SignerRecoveryBusy. */
export const MAX_QUEUED_RECOVERIES = 256

export class SignerRecoveryBusy extends Error {
  constructor() {
    super('too many signatures are waiting to be checked')
    this.name = 'SignerRecoveryBusy'
  }
}

export class SignerRecovery {
  #pool: Piscina<RecoverInput, string> | null = null
  readonly #maxQueue: number

  constructor(maxQueue = MAX_QUEUED_RECOVERIES) {
    this.#maxQueue = maxQueue
  }

  /** The lower-case signer of `text`, '' when the signature does not recover. */
  recover(input: RecoverInput): Promise<string> {
    this.#pool ??= new Piscina({
      filename: new URL('./recover-worker.js', import.meta.url).href,
      minThreads: 0,
      maxThreads: 1,
      idleTimeout: 60_000,
      maxQueue: this.#maxQueue,
    })
    if (this.#pool.queueSize >= this.#maxQueue) return Promise.reject(new SignerRecoveryBusy())
    return this.#pool.run(input)
  }

  /** Signatures the worker has checked so far. */
  get completed(): number {
    return this.#pool?.completed ?? 0
  }

  async close(): Promise<void> {
    await this.#pool?.close({ force: true })
    this.#pool = null
  }
}
