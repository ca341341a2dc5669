/**
 * The charge thread: the store's charge batches are committed by a worker thread on its own SQLite connection,
 * so the event loop never waits for a commit. With `synchronous=FULL` a commit is an fsync (hundreds of
 * microseconds on the machines we measure on), and on the main thread every open stream and every new request
 * waited behind it. Here the main thread posts the batch and goes on; the reply resolves the batch's promise,
 * and that is what releases each response's last byte (charge-writer.ts), so durability before the last byte
 * is unchanged.
 *
 * Both sides are in this file: the worker runs this same module (`isMainThread` false). Charges cross the
 * thread boundary by structured clone (BigInt included); refusals come back as a name and a message and are
 * rebuilt as the same error classes the in-process path gives.
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import Database from 'better-sqlite3'
import { StoreConflictError, type Charge, type JournalEntry } from '../store.js'
import { prepareChargeStatements, writeCharges } from './charges.js'

export interface ChargeThreadOptions {
  readonly path: string
  readonly synchronous: 'full' | 'normal'
}

type Outcome = { readonly entry: JournalEntry } | { readonly refused: string; readonly name: string }
type Request = { readonly id: number; readonly charges: readonly Charge[] } | { readonly id: 0; readonly close: true }
/** id 0 with no outcomes: the thread has opened its connection. */
type Reply = { readonly id: number; readonly outcomes: readonly Outcome[] } | { readonly id: number; readonly failed: string }

function refusal(name: string, message: string): Error {
  if (name === 'StoreConflictError') return new StoreConflictError(message)
  if (name === 'RangeError') return new RangeError(message)
  return new Error(message)
}

interface Waiting {
  resolve(outcomes: (JournalEntry | Error)[]): void
  reject(err: Error): void
}

/** Main-thread side: one worker, started at once (opening a connection takes a while), again if it ever dies. */
export class ChargeThread {
  readonly #options: ChargeThreadOptions
  #worker: Worker | null = null
  #ready: Promise<void> = Promise.resolve()
  #nextId = 1
  readonly #waiting = new Map<number, Waiting>()

  constructor(options: ChargeThreadOptions) {
    this.#options = options
    this.#start()
  }

  /** Commits `charges` in one transaction on the thread; per charge, its journal entry or why it was refused. */
  write(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]> {
    const worker = this.#worker ?? this.#start()
    const id = this.#nextId++
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject })
      // Held only while a batch is out: an idle thread must not keep a finished process alive.
      if (this.#waiting.size === 1) worker.ref()
      worker.postMessage({ id, charges } satisfies Request)
    })
  }

  /** Resolves when the thread started last has its connection open; rejects if it failed to start. */
  ready(): Promise<void> {
    return this.#ready
  }

  /** Lets the batches under way finish, then stops the thread and closes its connection. */
  async close(): Promise<void> {
    const worker = this.#worker
    if (worker === null) return
    this.#worker = null
    const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()))
    worker.ref()
    worker.postMessage({ id: 0, close: true } satisfies Request)
    await exited
  }

  #start(): Worker {
    // execArgv []: the thread runs this file and better-sqlite3, nothing else; inheriting the parent's
    // --import hooks (a test runner's TypeScript loader) would make it take seconds to start.
    const worker = new Worker(new URL(import.meta.url), { workerData: { ...this.#options, chargeThread: true }, execArgv: [] })
    worker.unref()
    let opened!: () => void
    let failed!: (err: Error) => void
    this.#ready = new Promise<void>((resolve, reject) => {
      opened = resolve
      failed = reject
    })
    // Nobody may be waiting for it (a store opened without serving); a failed start still rejects every write.
    this.#ready.catch(() => {})
    worker.on('message', (reply: Reply) => {
      if (reply.id === 0) return opened()
      const waiting = this.#waiting.get(reply.id)
      if (waiting === undefined) return
      this.#waiting.delete(reply.id)
      if (this.#waiting.size === 0) worker.unref()
      if ('failed' in reply) waiting.reject(new Error(reply.failed))
      else waiting.resolve(reply.outcomes.map((o) => ('entry' in o ? o.entry : refusal(o.name, o.refused))))
    })
    const lost = (err: Error): void => {
      failed(err)
      if (this.#worker === worker) this.#worker = null
      for (const waiting of this.#waiting.values()) waiting.reject(err)
      this.#waiting.clear()
    }
    worker.on('error', lost)
    worker.on('exit', (code) => lost(new Error(`the charge thread exited (code ${code}) before answering`)))
    this.#worker = worker
    return worker
  }
}

/** Worker side: its own connection, the same pragmas as the store's, one transaction per message. */
function serveCharges(options: ChargeThreadOptions): void {
  const port = parentPort!
  const db = new Database(options.path)
  db.pragma(options.synchronous === 'normal' ? 'synchronous = NORMAL' : 'synchronous = FULL')
  db.pragma('foreign_keys = ON')
  db.pragma('busy_timeout = 5000')
  const q = prepareChargeStatements(db)
  port.postMessage({ id: 0, outcomes: [] } satisfies Reply)
  port.on('message', (request: Request) => {
    if ('close' in request) {
      db.close()
      port.close()
      return
    }
    let reply: Reply
    try {
      const outcomes = writeCharges(db, q, request.charges).map((o): Outcome => (o instanceof Error ? { refused: o.message, name: o.name } : { entry: o }))
      reply = { id: request.id, outcomes }
    } catch (err) {
      reply = { id: request.id, failed: err instanceof Error ? err.message : String(err) }
    }
    port.postMessage(reply)
  })
}

if (!isMainThread && (workerData as { chargeThread?: boolean } | null)?.chargeThread === true) serveCharges(workerData as ChargeThreadOptions)
