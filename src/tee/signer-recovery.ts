/**
 * EIP-191 signer recovery off the event loop, in one piscina pool shared by everything that checks a signature:
 * TEE providers' signed answers (tee/verify.ts) and console sign-ins (auth/siwe.ts). Pure-JS secp256k1 costs
 * milliseconds of CPU a signature: on the event loop a flood of sign-ins would stall every other request.
 * Started on the first use (an idle thread is about 10 MB) and kept from then on: a worker that exited when idle
 * made the next check pay its start again. Its queue is bounded, so a flood is refused (`SignerRecoveryBusy`)
 * instead of queued without end.
 */
import { Piscina } from 'piscina'
import type { RecoverInput } from './recover-worker.js'

/** How long `ready()` waits, at most, for the worker to start. */
const WORKER_START_MS = 30_000

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
  /** The worker started and ran once (viem loaded): what `ready()` resolves with. */
  #warm: Promise<void> | null = null
  readonly #maxQueue: number

  constructor(maxQueue = MAX_QUEUED_RECOVERIES) {
    this.#maxQueue = maxQueue
  }

  /** The lower-case signer of `text`, '' when the signature does not recover. */
  recover(input: RecoverInput): Promise<string> {
    const pool = this.#workers()
    if (pool.queueSize >= this.#maxQueue) return Promise.reject(new SignerRecoveryBusy())
    return pool.run(input)
  }

  /** Resolves once the worker is up and has run once (started now if it was not), or after WORKER_START_MS. */
  ready(): Promise<void> {
    if (this.#warm === null) {
      const warm = this.#workers()
        .run({ text: '', signature: `0x${'11'.repeat(65)}` })
        .then(
          () => undefined,
          () => undefined,
        )
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, WORKER_START_MS)
      })
      this.#warm = Promise.race([warm, late]).finally(() => clearTimeout(timer))
    }
    return this.#warm
  }

  #workers(): Piscina<RecoverInput, string> {
    this.#pool ??= new Piscina({
      filename: new URL('./recover-worker.js', import.meta.url).href,
      minThreads: 1,
      maxThreads: 1,
      maxQueue: this.#maxQueue,
    })
    return this.#pool
  }

  /** Signatures the worker has checked so far. */
  get completed(): number {
    return this.#pool?.completed ?? 0
  }

  async close(): Promise<void> {
    await this.#pool?.close({ force: true })
    this.#pool = null
    this.#warm = null
  }
}
