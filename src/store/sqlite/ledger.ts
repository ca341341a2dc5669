/**
 * The LedgerStore on SQLite: the append-only `journal` (a charge is one row carrying its usage), each
 * account's running totals (columns of `accounts`) and the `usage_daily` roll-up, both folded in from the
 * journal behind a watermark (fold()). Money is TEXT holding integer atto-USD, added up here with BigInt,
 * never by SQL.
 */
import type { Transaction } from 'better-sqlite3'
import { log } from '../../log.js'
import { MAX_USAGE_COUNT } from '../../billing/usage-bound.js'
import { utcDay } from '../days.js'
import {
  chargeEntry,
  invalidCharge,
  MAX_STORED_COUNT,
  toJournal,
  toUsageRow,
  type AccountTotals,
  type Charge,
  type JournalEntry,
  type JournalKind,
  type JournalRow,
  type LedgerStore,
  type UsageDailyRow,
  type UsageFilter,
  type UsageRow,
} from '../ledger.js'
import { StoreConflictError } from '../store.js'
import { ACCOUNT_BY_ID, INSERT_ACCOUNT, type AccountRow } from './accounts.js'
import { isUniqueViolation, type SqliteConnection } from './connection.js'

/** A row that names a missing parent (a charge of an account that does not exist: the journal's foreign key). */
function isForeignKeyViolation(err: unknown): boolean {
  return (err as { code?: string }).code === 'SQLITE_CONSTRAINT_FOREIGNKEY'
}

/**
 * Every statement a batch of charges runs: one journal append per charge. The account's existence is the
 * journal's foreign key (foreign_keys is on), checked by the insert itself: a separate SELECT per batch would
 * probe the same index again. None may start a trigger (the change triggers of migration 2 stay off this
 * path); test/store/sqlite.test.ts checks each one's plan. The totals and the daily roll-up are not on this
 * path: fold() adds charges into them later.
 */
export const CHARGE_SQL = {
  insertCharge: `INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at,
      model, provider, prompt_tokens, completion_tokens, images, audio_ms, neuron)
      VALUES (?, 'charge', ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?)`,
  /** A chain provider's served total (neuron, TEXT), and the same total raised by a batch's charges. */
  servedOf: 'SELECT served FROM provider_settlement WHERE provider = ?',
  addServed: `INSERT INTO provider_settlement (provider, served) VALUES (?, ?) ON CONFLICT (provider) DO UPDATE SET served = excluded.served`,
} as const

/** Statements of fold(), which moves charges past the watermark into accounts.spent and usage_daily. */
export const FOLD_SQL = {
  watermark: 'SELECT folded_seq FROM ledger_fold WHERE id = 1',
  charges: `SELECT seq, account_id, key_id, model, created_at, prompt_tokens, completion_tokens, images, audio_ms,
      amount FROM journal WHERE seq > ? AND kind = 'charge' ORDER BY seq LIMIT ?`,
  spent: 'SELECT spent FROM accounts WHERE id = ?',
  setSpent: 'UPDATE accounts SET spent = ? WHERE id = ?',
  dailyRow: 'SELECT * FROM usage_daily WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?',
  insertDailySum: `INSERT INTO usage_daily (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens,
      images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  // Saturating at MAX_STORED_COUNT: the columns hold at most that, so the addition stays within 64 bits (and a
  // row written past it behind the router's back overflows to REAL, which min() brings back to the cap).
  addDailySum: `UPDATE usage_daily SET requests = min(requests + ?, ${MAX_STORED_COUNT}),
      prompt_tokens = min(prompt_tokens + ?, ${MAX_STORED_COUNT}), completion_tokens = min(completion_tokens + ?, ${MAX_STORED_COUNT}),
      images = min(images + ?, ${MAX_STORED_COUNT}), audio_ms = min(audio_ms + ?, ${MAX_STORED_COUNT}), cost = ?
      WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?`,
  setWatermark: 'UPDATE ledger_fold SET folded_seq = ? WHERE id = 1',
  quarantine: 'INSERT OR IGNORE INTO ledger_quarantine (seq, part, reason, at) VALUES (?, ?, ?, ?)',
} as const

/** The latest instant a Date can hold (epoch ms): a charge's created_at past it names no day. */
const MAX_DATE_MS = 8.64e15

/** A charge the fold stepped over, or added without its counts (migration 6, ledger_quarantine). */
export interface Quarantined {
  readonly seq: number
  readonly part: 'row' | 'counts'
  readonly reason: string
}

/** A usage count of a journal row: NULL (a charge of before migration 3 without usage) is 0; -1: not one. */
function rowCount(n: number | null): number {
  if (n === null) return 0
  return Number.isInteger(n) && n >= 0 && n <= MAX_USAGE_COUNT ? n : -1
}

/**
 * Charges appended since the last fold that make the writer ask for one (on the upkeep thread, with the WAL
 * checkpoint; inline when there is no thread) right after its batch. A fold reads these rows back and writes a
 * few roll-up pages, and the checkpoint copies each page the charges dirtied once: the fewer upkeeps, the fewer
 * times a journal or index page that many charges share is copied. 1,024 rather than 256 (2026-11-26) halved
 * the upkeep thread's CPU per request at 64 connections (2.5-2.6 against 4.6-5.0 µs, 2 interleaved rounds of
 * bench/e2e/perf-cpu.ts), for a WAL of at most a few MiB between checkpoints.
 */
export const FOLD_EVERY = 1024

/**
 * The most charges a read of the totals folds itself, on the event loop, before it reads (#foldForRead): a
 * longer tail is folded by the upkeep thread while the read waits, so a read never stalls the loop for long.
 */
export const READ_FOLD_MAX = 256

/** A row of FOLD_SQL.charges, read raw (an array: no object with ten named properties per charge). */
type ChargeRow = [
  seq: number,
  accountId: string,
  keyId: string | null,
  model: string,
  createdAt: number,
  promptTokens: number | null,
  completionTokens: number | null,
  images: number | null,
  audioMs: number | null,
  amount: string,
]

/** One (account, day, model, key) roll-up row's share of a batch. */
interface DailySum {
  readonly accountId: string
  readonly day: string
  readonly model: string
  readonly keyId: string
  requests: number
  prompt: number
  completion: number
  images: number
  audioMs: number
  cost: bigint
}

/** What a fold adds: the sums of the charges after the watermark `from`, up to and including seq `to`. */
export interface FoldPlan {
  readonly from: number
  readonly to: number
  readonly charges: number
  readonly spent: ReadonlyMap<string, bigint>
  readonly daily: ReadonlyMap<string, DailySum>
  /** Rows of the range left out of the totals, whole or for their counts. */
  readonly quarantined: readonly Quarantined[]
}

function prepareStatements(conn: SqliteConnection) {
  const db = conn.db
  return {
    insertAccount: db.prepare<[string, number]>(INSERT_ACCOUNT),
    accountRow: db.prepare<[string], AccountRow>(ACCOUNT_BY_ID),
    // Deposits and credits name these two columns, which is what reports them as funds changes (migration 2).
    setFunds: db.prepare<[string, string, string]>('UPDATE accounts SET deposited = ?, credited = ? WHERE id = ?'),
    insertFunds: db.prepare<[string, JournalKind, string, string, number]>(
      'INSERT INTO journal (account_id, kind, amount, memo, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    insertCharge: db.prepare(CHARGE_SQL.insertCharge),
    servedOf: db.prepare<[string], string>(CHARGE_SQL.servedOf).pluck(),
    addServed: db.prepare<[string, string]>(CHARGE_SQL.addServed),
    journalEntry: db.prepare<[number | bigint], JournalRow>(
      'SELECT seq, account_id, kind, amount, request_id, key_id, memo, created_at, neuron FROM journal WHERE seq = ?',
    ),
    journal: db.prepare<[string], JournalRow>(
      'SELECT seq, account_id, kind, amount, request_id, key_id, memo, created_at, neuron FROM journal WHERE account_id = ? ORDER BY seq',
    ),
    watermark: db.prepare<[], number>(FOLD_SQL.watermark).pluck(),
    unfolded: db.prepare<[number, number], ChargeRow>(FOLD_SQL.charges).raw(),
    /** A row when more than READ_FOLD_MAX charges lie past the watermark. */
    longTail: db.prepare<[number], number>(`SELECT seq FROM journal WHERE seq > ? AND kind = 'charge' LIMIT 1 OFFSET ${READ_FOLD_MAX}`).pluck(),
    spent: db.prepare<[string], string>(FOLD_SQL.spent).pluck(),
    quarantine: db.prepare<[number, string, string, number]>(FOLD_SQL.quarantine),
    quarantineSince: db.prepare<[number], Quarantined>('SELECT seq, part, reason FROM ledger_quarantine WHERE seq > ? ORDER BY seq LIMIT 100'),
    quarantineCount: db.prepare<[], { n: number; last: number | null }>('SELECT count(*) AS n, max(seq) AS last FROM ledger_quarantine'),
    /** A row when a charge lies past the watermark. */
    unfoldedAny: db.prepare<[number], number>(`SELECT seq FROM journal WHERE seq > ? AND kind = 'charge' LIMIT 1`).pluck(),
    setSpent: db.prepare<[string, string]>(FOLD_SQL.setSpent),
    dailyRow: db.prepare<[string, string, string, string], UsageDailyRow>(FOLD_SQL.dailyRow),
    insertDailySum: db.prepare(FOLD_SQL.insertDailySum),
    addDailySum: db.prepare(FOLD_SQL.addDailySum),
    setWatermark: db.prepare<[number]>(FOLD_SQL.setWatermark),
    spendSince: db.prepare<[string, string], { key_id: string; cost: string }>(
      'SELECT key_id, cost FROM usage_daily WHERE account_id = ? AND day >= ?',
    ),
    usage: db.prepare<[{ account: string; from: string; to: string; key: string | null; model: string | null }], UsageDailyRow>(
      `SELECT * FROM usage_daily WHERE account_id = @account AND day >= @from AND day <= @to
        AND (@key IS NULL OR key_id = @key) AND (@model IS NULL OR model = @model)
      ORDER BY day, model, key_id`,
    ),
  }
}

export class SqliteLedger implements LedgerStore {
  readonly #conn: SqliteConnection
  readonly #q: ReturnType<typeof prepareStatements>
  /** Charges this connection appended since its last fold (other writers' are found by the fold itself). */
  #unfolded = 0
  readonly #foldBatch: Transaction<() => number>
  readonly #applyPlan: Transaction<(plan: FoldPlan) => boolean>
  /** The charge transaction, built once (better-sqlite3 wraps a function in four variants per transaction()). */
  readonly #appendCharges: Transaction<(charges: readonly Charge[], out: (JournalEntry | Error)[]) => number>

  /** Rows in ledger_quarantine, and the highest seq among them this handle has reported (logged). */
  #quarantined = 0
  #reportedSeq = 0
  readonly #report: boolean

  /**
   * `report`: this handle logs the rows the fold quarantines (its own folds' and the upkeep thread's) and counts
   * them for /metrics; the upkeep thread's own handle does not (it has no logger of the process's settings).
   */
  constructor(conn: SqliteConnection, report = true) {
    this.#conn = conn
    this.#q = prepareStatements(conn)
    this.#report = report
    if (report) {
      const { n, last } = this.#q.quarantineCount.get()!
      this.#quarantined = n
      this.#reportedSeq = last ?? 0
      if (n > 0) log.warn('ledger: journal rows are quarantined (left out of the totals, whole or for their counts); see the table ledger_quarantine', { rows: n })
      conn.onUpkept(() => this.#reportQuarantine())
    }
    this.#foldBatch = conn.db.transaction((): number => this.#foldRows(FOLD_EVERY * 4))
    this.#applyPlan = conn.db.transaction((plan: FoldPlan): boolean => {
      if (this.#q.watermark.get() !== plan.from) return false
      this.#applyFold(plan)
      return true
    })
    this.#appendCharges = conn.db.transaction((charges: readonly Charge[], out: (JournalEntry | Error)[]): number => this.#append(charges, out))
  }

  async addFunds(wallet: string, kind: 'deposit' | 'credit', amount: bigint, memo: string, now: number): Promise<JournalEntry> {
    await this.#conn.writable()
    if (amount <= 0n) throw new RangeError(`a ${kind} must be positive (got ${amount})`)
    const add = this.#conn.db.transaction((): JournalEntry => {
      this.#q.insertAccount.run(wallet, now)
      const row = this.#q.accountRow.get(wallet)!
      const deposited = BigInt(row.deposited) + (kind === 'deposit' ? amount : 0n)
      const credited = BigInt(row.credited) + (kind === 'credit' ? amount : 0n)
      this.#q.setFunds.run(deposited.toString(), credited.toString(), wallet)
      const { lastInsertRowid } = this.#q.insertFunds.run(wallet, kind, amount.toString(), memo, now)
      return toJournal(this.#q.journalEntry.get(lastInsertRowid)!)
    })
    return this.#conn.flushed(add.immediate())
  }

  async recordCharge(c: Charge): Promise<JournalEntry> {
    const [outcome] = await this.recordCharges([c])
    if (outcome instanceof Error) throw outcome
    return outcome!
  }

  /**
   * Not an async function: when no upkeep holds writes back (nearly always), the batch is written in this call
   * and the promise is the flush's (or an already resolved one in 'normal' mode), without the microtask hops
   * and promises of awaiting writable() and flushed() on the charge path.
   */
  recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]> {
    // Held back while the upkeep thread ends its checkpoint and writes its fold (connection.ts writable()).
    if (this.#conn.holdingWrites) return this.#conn.writable().then(() => this.recordCharges(charges))
    try {
      this.#conn.check()
      const out = this.#record(charges)
      // The transaction ran on the event loop without a disk flush; the flush, when 'full', runs on the thread
      // pool, and the batch's charges are acknowledged (their responses' last bytes released) only after it.
      const flushing = this.#conn.durable()
      return flushing === null ? Promise.resolve(out) : flushing.then(() => out)
    } catch (err) {
      return Promise.reject(err as Error)
    }
  }

  /** The batch's transaction, and the fold it makes due. */
  #record(charges: readonly Charge[]): (JournalEntry | Error)[] {
    const out: (JournalEntry | Error)[] = new Array<JournalEntry | Error>(charges.length)
    const appended = this.#appendCharges.immediate(charges, out)
    this.#unfolded += appended
    // The fold rides the same flush as this batch (it runs before durable() is asked for): nothing waits longer.
    // The batch is committed whatever the fold does: a fold that fails (the write lock held by another process
    // past busy_timeout) must not report these charges as failed. The next fold, or the next reader, redoes it.
    if (this.#unfolded >= FOLD_EVERY) {
      try {
        // On the upkeep thread when there is one (it folds whatever is past the watermark); else here.
        if (this.#conn.upkeep()) this.#unfolded = 0
        else this.fold()
      } catch (err) {
        this.#unfolded = FOLD_EVERY - 1
        log.warn('ledger: folding charges into the totals failed; the next charge or read retries', { err: String(err) })
      }
    }
    return out
  }

  /** Appends each valid charge of the batch, filling `out`; returns how many were appended. In a transaction. */
  #append(charges: readonly Charge[], out: (JournalEntry | Error)[]): number {
    let appended = 0
    let served: Map<string, bigint> | null = null
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]!
      const invalid = invalidCharge(c)
      if (invalid !== null) {
        out[i] = invalid
        continue
      }
      const cost = c.cost.toString()
      let seq: number | bigint
      try {
        // A failed statement undoes only itself, not the transaction: the rest of the batch goes on.
        seq = this.#q.insertCharge.run(
          c.accountId, cost, c.requestId, c.keyId, c.at, c.model, c.provider, c.promptTokens, c.completionTokens, c.images, c.audioMs,
          c.neuron === null || c.neuron === undefined ? null : c.neuron.toString(),
        ).lastInsertRowid
      } catch (err) {
        if (isForeignKeyViolation(err)) out[i] = new Error(`no account ${c.accountId}`)
        else if (isUniqueViolation(err)) out[i] = new StoreConflictError(`request ${c.requestId} is already billed`)
        else throw err
        continue
      }
      appended++
      out[i] = chargeEntry(Number(seq), c)
      if (c.neuron !== null && c.neuron !== undefined && c.neuron > 0n) (served ??= new Map()).set(c.provider, (served.get(c.provider) ?? 0n) + c.neuron)
    }
    // What each chain provider was served, in the charges' own transaction (store/settlement.ts): a crash can
    // lose no part of it. Nothing to do (no map, no statement) for a batch of providers without chain prices.
    if (served !== null) {
      for (const [provider, neuron] of served) {
        const before = this.#q.servedOf.get(provider)
        this.#q.addServed.run(provider, (BigInt(before ?? '0') + neuron).toString())
      }
    }
    return appended
  }

  /**
   * Adds every charge past the watermark into accounts.spent and usage_daily and moves the watermark, in
   * transactions of at most 1,024 charges, so the totals equal the journal. Idempotent and safe with other
   * processes writing (each step re-reads the watermark under the write lock). Readers have it done first
   * (#foldForRead); the writer has it done every FOLD_EVERY charges, by the upkeep thread when there is one.
   * Never needs its own flush: a fold lost in a crash is redone. Returns how many charges it folded.
   */
  fold(): number {
    this.#conn.check()
    this.#unfolded = 0
    let folded = 0
    let step: number
    try {
      do {
        step = this.#foldBatch.immediate()
        folded += step
      } while (step === FOLD_EVERY * 4)
    } finally {
      if (folded > 0) this.#reportQuarantine()
    }
    return folded
  }

  /** Logs each row quarantined since the last report, once, and counts them (after a fold, here or upkept). */
  #reportQuarantine(): void {
    if (!this.#report || this.#conn.closed) return
    let rows: Quarantined[]
    try {
      rows = this.#q.quarantineSince.all(this.#reportedSeq)
    } catch {
      return
    }
    for (const q of rows) {
      log.error('ledger: a journal row cannot be folded into the totals as it stands; quarantined (kept, listed in ledger_quarantine)', {
        seq: q.seq,
        part: q.part,
        reason: q.reason,
      })
      this.#quarantined++
      this.#reportedSeq = q.seq
    }
    if (rows.length === 100) this.#reportQuarantine()
  }

  quarantinedRows(): number {
    return this.#quarantined
  }

  /**
   * Null when nothing waits past the watermark or a fold of it succeeds now (as a read would fold it); else why
   * it fails. A row that cannot be folded does not make it fail (it is quarantined): this is the whole fold
   * failing, e.g. on a full disk or a schema changed behind the router's back.
   */
  async foldStuck(): Promise<string | null> {
    try {
      if (this.#q.unfoldedAny.get(this.#q.watermark.get()!) === undefined) return null
      await this.#foldForRead()
      return null
    } catch (err) {
      return (err as Error)?.message ?? String(err)
    }
  }

  /**
   * Before a read of the totals, everything past the watermark folded without the event loop waiting on a lock
   * or on a long fold. An upkeep that holds writes back takes the write lock for its fold: the reader waits for
   * the hold's end rather than for the lock, in SQLite's busy handler on the loop. A tail longer than FOLD_EVERY
   * charges (another process's, or the thread's folds failing) is folded by the thread too, and waited for
   * whole; what is left, at most FOLD_EVERY charges and usually none, is folded here (under a millisecond).
   */
  async #foldForRead(): Promise<void> {
    await this.#conn.writable()
    if (this.backlogged()) {
      // Folded by the thread, waited for whole; with no thread, by fold() below.
      this.#conn.upkeep()
      await this.#conn.upkept()
      await this.#conn.writable()
    }
    this.fold()
  }

  /** More than READ_FOLD_MAX charges lie past the watermark. */
  backlogged(): boolean {
    return this.#q.longTail.get(this.#q.watermark.get()!) !== undefined
  }

  /** One step of fold(): up to `limit` charges; returns how many it folded. Runs inside a transaction. */
  #foldRows(limit: number): number {
    const plan = this.planFold(limit)
    if (plan === null) return 0
    this.#applyFold(plan)
    return plan.charges
  }

  /**
   * The sums of up to `limit` charges past the watermark, read without a write lock (a read of the WAL snapshot:
   * commits go on meanwhile); null when there is none. The upkeep thread plans while the event loop's charges
   * still commit, and applies the plan (applyFold) in the short window they are held.
   */
  planFold(limit: number): FoldPlan | null {
    const from = this.#q.watermark.get()!
    const rows = this.#q.unfolded.all(from, limit)
    if (rows.length === 0) return null
    const spent = new Map<string, bigint>()
    const daily = new Map<string, DailySum>()
    const quarantined: Quarantined[] = []
    // Runs of charges mostly share one (account, day, model, key): such a row adds to the last sum without a
    // key string and a map lookup.
    let sum: DailySum | null = null
    for (const row of rows) {
      const [seq, accountId, keyId, model, createdAt, promptRaw, completionRaw, imagesRaw, audioRaw, amount] = row
      // A row no sum can take is stepped over whole, listed; the rest of the journal goes on (issue 43).
      const unfit = this.#unfit(row, spent)
      if (unfit !== null) {
        quarantined.push({ seq, part: 'row', reason: unfit })
        continue
      }
      const cost = BigInt(amount)
      spent.set(accountId, spent.get(accountId)! + cost)
      let prompt = rowCount(promptRaw)
      let completion = rowCount(completionRaw)
      let images = rowCount(imagesRaw)
      let audioMs = rowCount(audioRaw)
      if (prompt < 0 || completion < 0 || images < 0 || audioMs < 0) {
        // Billed, so its amount counts; its usage is no count a provider may report (billing/usage-bound.ts).
        quarantined.push({
          seq,
          part: 'counts',
          reason: `usage counts out of range (prompt_tokens ${promptRaw}, completion_tokens ${completionRaw}, images ${imagesRaw}, audio_ms ${audioRaw})`,
        })
        prompt = completion = images = audioMs = 0
      }
      const day = utcDay(createdAt)
      const key = keyId!
      if (sum === null || sum.accountId !== accountId || sum.day !== day || sum.model !== model || sum.keyId !== key) {
        const dk: string = `${accountId}\u0000${day}\u0000${model}\u0000${key}`
        sum = daily.get(dk) ?? null
        if (sum === null) {
          sum = { accountId, day, model, keyId: key, requests: 0, prompt: 0, completion: 0, images: 0, audioMs: 0, cost: 0n }
          daily.set(dk, sum)
        }
      }
      sum.requests++
      sum.prompt += prompt
      sum.completion += completion
      sum.images += images
      sum.audioMs += audioMs
      sum.cost += cost
    }
    return { from, to: rows[rows.length - 1]![0], charges: rows.length, spent, daily, quarantined }
  }

  /**
   * Why a journal charge cannot be added into the totals at all, or null; notes its account in `spent` (at 0n)
   * once it is known to exist. Checks what the schema does not (a row written with foreign keys off, or by hand).
   */
  #unfit(row: ChargeRow, spent: Map<string, bigint>): string | null {
    const [, accountId, keyId, model, createdAt] = row
    if (typeof keyId !== 'string') return 'no key_id'
    if (typeof model !== 'string') return 'no model'
    if (!Number.isSafeInteger(createdAt) || createdAt < 0 || createdAt > MAX_DATE_MS) return `created_at ${createdAt} is no instant`
    if (!spent.has(accountId)) {
      if (this.#q.spent.get(accountId) === undefined) return `account ${accountId} does not exist`
      spent.set(accountId, 0n)
    }
    return null
  }

  /**
   * Adds a plan into the totals and moves the watermark past it, in one transaction; false (nothing written)
   * when the watermark moved since the plan was read (another connection folded meanwhile: the plan would count
   * some charges twice). Returns whether it was applied.
   */
  applyFold(plan: FoldPlan): boolean {
    this.#conn.check()
    return this.#applyPlan.immediate(plan)
  }

  #applyFold(plan: FoldPlan): void {
    const at = this.#conn.now()
    for (const q of plan.quarantined) this.#q.quarantine.run(q.seq, q.part, q.reason, at)
    for (const d of plan.daily.values()) {
      const row = this.#q.dailyRow.get(d.accountId, d.day, d.model, d.keyId)
      if (row === undefined) {
        // A plan's sums stay far below MAX_STORED_COUNT: at most FOLD_EVERY * 4 rows of at most MAX_USAGE_COUNT.
        this.#q.insertDailySum.run(d.accountId, d.day, d.model, d.keyId, d.requests, d.prompt, d.completion, d.images, d.audioMs, d.cost.toString())
      } else {
        const cost = (BigInt(row.cost) + d.cost).toString()
        this.#q.addDailySum.run(d.requests, d.prompt, d.completion, d.images, d.audioMs, cost, d.accountId, d.day, d.model, d.keyId)
      }
    }
    for (const [id, add] of plan.spent) this.#q.setSpent.run((BigInt(this.#q.spent.get(id)!) + add).toString(), id)
    this.#q.setWatermark.run(plan.to)
  }

  async totals(accountId: string): Promise<AccountTotals> {
    await this.#foldForRead()
    const row = this.#q.accountRow.get(accountId)
    if (row === undefined) return { deposited: 0n, credited: 0n, spent: 0n }
    return { deposited: BigInt(row.deposited), credited: BigInt(row.credited), spent: BigInt(row.spent) }
  }

  async journal(accountId: string): Promise<JournalEntry[]> {
    this.#conn.check()
    return this.#q.journal.all(accountId).map(toJournal)
  }

  async spendByKey(accountId: string, sinceDay: string | null): Promise<Map<string, bigint>> {
    await this.#foldForRead()
    const out = new Map<string, bigint>()
    for (const row of this.#q.spendSince.all(accountId, sinceDay ?? '')) {
      out.set(row.key_id, (out.get(row.key_id) ?? 0n) + BigInt(row.cost))
    }
    return out
  }

  async usage(accountId: string, filter: UsageFilter): Promise<UsageRow[]> {
    await this.#foldForRead()
    const params = { account: accountId, from: filter.fromDay, to: filter.toDay, key: filter.keyId ?? null, model: filter.model ?? null }
    return this.#q.usage.all(params).map(toUsageRow)
  }
}
