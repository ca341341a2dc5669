/**
 * The journals of the billed floor (floor-relay.ts `--bill`): where its charges go, each the cheapest correct
 * way on this stack, so that svc-router's store is set against the same durability it promises.
 *
 * - SQLite, `normal`: one transaction per turn of the loop (the charges settled in that turn share it), WAL,
 *   synchronous=NORMAL: an answer is released once its row is on the OS (survives a crash of the process).
 * - SQLite, `full`: the same transaction, then an fdatasync of the WAL file on libuv's thread pool before the
 *   answers it covers are released (survives a crash of the machine). Group-committed: transactions committed
 *   while a flush runs wait for the next one, which then covers them all; one flush at a time.
 * - PostgreSQL: one INSERT of the batch (arrays unnested, a prepared statement), its own transaction, with
 *   `synchronous_commit on`: durable once PostgreSQL answers. One batch in flight at a time; the charges
 *   settled meanwhile make the next batch, as svc-router's ChargeWriter batches them.
 */
import { fdatasync, openSync } from 'node:fs'
import pg from 'pg'
import { Database } from '../../src/store/sqlite/driver.js'

/** One charge as the floor records it; `committed` runs once it is as durable as its journal makes it. */
export interface JournalCharge {
  readonly requestId: string
  readonly model: string
  readonly cost: bigint
  readonly prompt: number
  readonly completion: number
  committed(failure: Error | null): void
}

export interface Journal {
  enqueue(charge: JournalCharge): void
}

function settle(rows: readonly JournalCharge[], failure: Error | null): void {
  for (const c of rows) c.committed(failure)
}

export class SqliteJournal implements Journal {
  readonly #append: (rows: readonly JournalCharge[]) => void
  readonly #walFd: number
  #queue: JournalCharge[] = []
  /** `full`: committed rows waiting for the next flush, and whether one runs now. */
  #unflushed: JournalCharge[] = []
  #flushing = false
  /** fdatasync calls made, and charges they covered (reported on SIGTERM, for the group commit's width). */
  flushes = 0
  flushed = 0

  constructor(path: string, sync: 'normal' | 'full') {
    const db = new Database(path)
    db.pragma('journal_mode = WAL')
    db.pragma('synchronous = NORMAL')
    db.exec(`CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY, request_id TEXT NOT NULL UNIQUE,
      model TEXT NOT NULL, amount TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
      created_at INTEGER NOT NULL) STRICT`)
    const insert = db.prepare<[string, string, string, number, number, number]>(
      'INSERT INTO journal (request_id, model, amount, prompt_tokens, completion_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    )
    this.#append = db.transaction((rows: readonly JournalCharge[]) => {
      const now = Date.now()
      for (const c of rows) insert.run(c.requestId, c.model, c.cost.toString(), c.prompt, c.completion, now)
    })
    // The WAL exists once the table is written. Its descriptor is never closed while the database is open:
    // closing any descriptor of a file drops the process's POSIX locks on it (SQLite's, on the other files, are
    // not at risk, but the rule is kept). In WAL mode a commit is complete once its frames are in the WAL, so an
    // fdatasync of it after the commit is what synchronous=FULL does at the commit; checkpoints sync themselves.
    this.#walFd = sync === 'full' ? openSync(path + '-wal', 'r') : -1
  }

  enqueue(charge: JournalCharge): void {
    if (this.#queue.push(charge) === 1) setImmediate(this.#commit)
  }

  readonly #commit = (): void => {
    const rows = this.#queue
    this.#queue = []
    try {
      this.#append(rows)
    } catch (err) {
      return settle(rows, err as Error)
    }
    if (this.#walFd === -1) return settle(rows, null)
    for (const c of rows) this.#unflushed.push(c)
    if (!this.#flushing) this.#flush()
  }

  /** One fdatasync on the thread pool for every row committed before it starts. */
  #flush(): void {
    const rows = this.#unflushed
    this.#unflushed = []
    this.#flushing = true
    this.flushes++
    this.flushed += rows.length
    fdatasync(this.#walFd, (err) => {
      this.#flushing = false
      settle(rows, err)
      if (this.#unflushed.length > 0) this.#flush()
    })
  }
}

/** The billed floor's journal on PostgreSQL: one narrow row per charge, its request id unique. */
export const FLOOR_JOURNAL_TABLE = `CREATE TABLE IF NOT EXISTS floor_journal (seq BIGSERIAL PRIMARY KEY, request_id TEXT NOT NULL UNIQUE,
  model TEXT NOT NULL, amount NUMERIC NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
  created_at BIGINT NOT NULL)`

/** The billed floor's batch on PostgreSQL: every charge of the batch in one INSERT over unnested arrays. */
export const APPEND = `INSERT INTO floor_journal (request_id, model, amount, prompt_tokens, completion_tokens, created_at)
  SELECT r, m, a, p, c, $6 FROM unnest($1::text[], $2::text[], $3::numeric[], $4::int[], $5::int[]) AS u(r, m, a, p, c)`

export class PgJournal implements Journal {
  readonly #client: pg.Client
  readonly #ready: Promise<void>
  #queue: JournalCharge[] = []
  #inFlight = false
  /** Set once the connection failed: every charge after it fails (the floor answers 502, as it does for SQLite). */
  #broken: Error | null = null
  batches = 0

  constructor(url: string) {
    const client = new pg.Client({ connectionString: url })
    this.#client = client
    client.on('error', (err: Error) => {
      this.#broken = err
    })
    this.#ready = (async () => {
      await client.connect()
      await client.query('SET synchronous_commit = on')
      try {
        await client.query(FLOOR_JOURNAL_TABLE)
      } catch (err) {
        // The floors of the three simulators share one database and start together: IF NOT EXISTS does not stop two
        // CREATEs racing in PostgreSQL (one fails on pg_type's unique index, 23505, or 42P07). The other made it.
        const code = (err as { code?: string }).code
        if (code !== '23505' && code !== '42P07') throw err
      }
    })()
  }

  /** Resolves once connected and the table exists (the relay listens only then). */
  ready(): Promise<void> {
    return this.#ready
  }

  enqueue(charge: JournalCharge): void {
    this.#queue.push(charge)
    if (!this.#inFlight) this.#send()
  }

  #send(): void {
    const rows = this.#queue
    this.#queue = []
    if (this.#broken !== null) return settle(rows, this.#broken)
    this.#inFlight = true
    this.batches++
    const values = [
      rows.map((c) => c.requestId),
      rows.map((c) => c.model),
      rows.map((c) => c.cost.toString()),
      rows.map((c) => c.prompt),
      rows.map((c) => c.completion),
      Date.now(),
    ]
    this.#client.query({ name: 'floor-append', text: APPEND, values }).then(
      () => this.#done(rows, null),
      (err: unknown) => this.#done(rows, err as Error),
    )
  }

  #done(rows: readonly JournalCharge[], failure: Error | null): void {
    this.#inFlight = false
    settle(rows, failure)
    if (this.#queue.length > 0) this.#send()
  }
}
