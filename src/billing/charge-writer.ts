/**
 * Group commit for charges (DESIGN.md §4, durability): settled charges queue here and are written to the store
 * in ONE transaction per batch. The first charge of a batch schedules the flush with setImmediate, so every
 * charge settled in the same event-loop turn shares one durable commit; a full batch flushes at once. Each
 * charge's callback runs after the commit returned (SQLite: WAL, synchronous=FULL, so the charge is on disk),
 * and that callback is what releases the response's last byte.
 *
 * One batch is in flight at a time unless the store's transactions run beside one another (`concurrency`);
 * `quiesce` waits for none to be, a moment when the store's totals and this queue together account for every
 * settled charge exactly once.
 */
import type { Charge, JournalEntry, LedgerStore } from '../store/store.js'
import { ledgerCommit } from '../telemetry/events.js'

/** The journal entry of the charge, or why it was not written. */
export type ChargeDone = (outcome: JournalEntry | Error) => void

export interface ChargeWriterOptions {
  /** Charges per transaction at most; a full batch is written without waiting for the end of the turn. */
  readonly maxBatch?: number
  /**
   * Batches in flight at most (default 1). A store whose batches are transactions of their own on separate
   * connections, which lock what they bill in one order (PostgreSQL), may take 2: the next batch waits at the
   * server, not here, for the first's account locks. The router keeps one on PostgreSQL too: measured on issue
   * 45's replica rows, two batches halve each batch, and a batch's cost at the server is mostly per batch, not
   * per charge, so a replica ran 9,700 req/s with two against 11,400 with one at 0 ms from its database, and
   * no faster with two at 1 ms (7,900-9,750 against 9,400-9,650).
   */
  readonly concurrency?: number
}

export const DEFAULT_MAX_BATCH = 256

/**
 * The queue while nothing is queued, shared and never written: the first charge of a batch starts its arrays
 * as literals of one. An empty array that charges are pushed onto grows its store to 17 slots at the first
 * push, so a batch of one (every batch at one connection) cost two arrays of 17 slots and two empty ones.
 */
const NOTHING_QUEUED: never[] = []

type Ended = (slot: InFlight, outcomes: (JournalEntry | Error)[] | null, failure: Error | null) => void

/** A batch in flight: one per slot, made once, so a commit costs no closures of its own. */
class InFlight {
  charges: readonly Charge[] = NOTHING_QUEUED
  done: readonly ChargeDone[] = NOTHING_QUEUED
  started = 0
  readonly committed: (outcomes: (JournalEntry | Error)[]) => void
  readonly failed: (err: unknown) => void

  constructor(ended: Ended) {
    this.committed = (outcomes) => ended(this, outcomes, null)
    this.failed = (err) => ended(this, null, err instanceof Error ? err : new Error(String(err)))
  }
}

export class ChargeWriter {
  readonly #store: LedgerStore
  readonly #maxBatch: number
  #queue: Charge[] = NOTHING_QUEUED
  #done: ChargeDone[] = NOTHING_QUEUED
  /** The batches that may be in flight; `#writing` of them are. */
  readonly #slots: InFlight[]
  #writing = 0
  #scheduled = false
  #holds = 0
  #idle: (() => void)[] = []
  #closed = false
  /** Transactions committed and charges in them, for the benchmark and the logs. */
  batches = 0
  written = 0

  constructor(store: LedgerStore, options: ChargeWriterOptions = {}) {
    this.#store = store
    this.#maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH
    const concurrency = options.concurrency ?? 1
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`concurrency must be a whole number >= 1, not ${concurrency}`)
    this.#slots = Array.from({ length: concurrency }, () => new InFlight(this.#ended))
  }

  /** Queues a charge; `done` runs once, after the transaction holding it committed or failed. */
  enqueue(charge: Charge, done: ChargeDone): void {
    if (this.#closed) {
      queueMicrotask(() => done(new Error('the charge writer is closed')))
      return
    }
    if (this.#queue.length === 0) {
      this.#queue = [charge]
      this.#done = [done]
    } else {
      this.#queue.push(charge)
      this.#done.push(done)
    }
    if (this.#queue.length >= this.#maxBatch) this.#flush()
    else this.#schedule()
  }

  /** Every charge handed over and not committed yet (queued or in a transaction under way). */
  *pending(): IterableIterator<Charge> {
    for (const slot of this.#slots) yield* slot.charges
    yield* this.#queue
  }

  get queued(): number {
    let n = this.#queue.length
    for (const slot of this.#slots) n += slot.charges.length
    return n
  }

  /**
   * Runs `fn` while no batch commits: at any point inside it, what the store holds plus `pending()` is every
   * settled charge exactly once, whatever the store's latency. Charges keep queueing meanwhile.
   */
  async quiesce<T>(fn: () => Promise<T>): Promise<T> {
    this.#holds++
    try {
      while (this.#writing > 0) await new Promise<void>((resolve) => this.#idle.push(resolve))
      return await fn()
    } finally {
      this.#holds--
      if (this.#holds === 0 && this.#queue.length > 0) this.#schedule()
    }
  }

  /** Resolves when everything queued so far is committed (or failed). */
  async drain(): Promise<void> {
    while (this.#queue.length > 0 || this.#writing > 0) {
      this.#flush()
      // Held by quiesce: look again on the next turn rather than wait for a batch that has not started.
      if (this.#writing === 0) await new Promise<void>((resolve) => setImmediate(resolve))
      else await new Promise<void>((resolve) => this.#idle.push(resolve))
    }
  }

  /** Writes what is queued, then refuses new charges. */
  async close(): Promise<void> {
    await this.drain()
    this.#closed = true
  }

  #schedule(): void {
    if (this.#scheduled) return
    this.#scheduled = true
    setImmediate(this.#scheduledFlush)
  }

  /** The end of the turn's flush, made once: a batch costs its Immediate, not a closure as well. */
  readonly #scheduledFlush = (): void => {
    this.#scheduled = false
    this.#flush()
  }

  #flush(): void {
    if (this.#holds > 0 || this.#queue.length === 0 || this.#writing === this.#slots.length) return
    let slot = this.#slots[0]!
    for (let i = 1; slot.charges.length > 0; i++) slot = this.#slots[i]!
    const batch = this.#queue.length <= this.#maxBatch ? this.#queue : this.#queue.slice(0, this.#maxBatch)
    const done = this.#done.length <= this.#maxBatch ? this.#done : this.#done.slice(0, this.#maxBatch)
    this.#queue = batch === this.#queue ? NOTHING_QUEUED : this.#queue.slice(batch.length)
    this.#done = done === this.#done ? NOTHING_QUEUED : this.#done.slice(done.length)
    this.#writing++
    slot.charges = batch
    slot.done = done
    slot.started = performance.now()
    let written: Promise<(JournalEntry | Error)[]>
    try {
      written = this.#store.recordCharges(batch)
    } catch (err) {
      written = Promise.reject(err as Error)
    }
    written.then(slot.committed, slot.failed)
  }

  /**
   * A batch's transaction ended: its slot is freed and the next batch started before the callbacks run (it
   * holds the charges settled while this one committed); then each charge learns its outcome.
   */
  readonly #ended: Ended = (slot, outcomes, failure) => {
    const n = slot.charges.length
    const done = slot.done
    if (ledgerCommit.hasSubscribers) ledgerCommit.publish({ charges: n, durationMs: performance.now() - slot.started, ok: failure === null })
    if (failure === null) {
      this.batches++
      this.written += n
    }
    slot.charges = NOTHING_QUEUED
    slot.done = NOTHING_QUEUED
    this.#writing--
    if (this.#queue.length >= this.#maxBatch) this.#flush()
    else if (this.#queue.length > 0 && this.#holds === 0) this.#schedule()
    if (failure !== null) for (let i = 0; i < done.length; i++) done[i]!(failure)
    else for (let i = 0; i < done.length; i++) done[i]!(outcomes![i] ?? new Error('the store returned no outcome for this charge'))
    if (this.#writing === 0) this.#wakeIdle()
  }

  /** Whoever waited for no batch to be in flight (quiesce, drain). */
  #wakeIdle(): void {
    if (this.#idle.length === 0) return
    const idle = this.#idle
    this.#idle = []
    for (const resolve of idle) resolve()
  }
}
