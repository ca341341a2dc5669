/**
 * The LedgerStore on SQLite: the append-only `journal`, each account's running totals (columns of
 * `accounts`), `usage_records` and the `usage_daily` roll-up. Money is TEXT holding integer atto-USD, added up
 * here with BigInt, never by SQL.
 */
import { utcDay } from '../days.js'
import type { AccountTotals, Charge, JournalEntry, JournalKind, LedgerStore, UsageFilter, UsageRow } from '../ledger.js'
import { StoreConflictError } from '../store.js'
import { ACCOUNT_BY_ID, INSERT_ACCOUNT, type AccountRow } from './accounts.js'
import { isUniqueViolation, type SqliteConnection } from './connection.js'

interface JournalRow {
  seq: number
  account_id: string
  kind: string
  amount: string
  request_id: string | null
  key_id: string | null
  memo: string
  created_at: number
}

interface UsageDailyRow {
  day: string
  model: string
  key_id: string
  requests: number
  prompt_tokens: number
  completion_tokens: number
  images: number
  audio_ms: number
  cost: string
}

/**
 * Every statement a batch of charges runs. None may start a trigger (the change triggers of migration 2 stay
 * off this path): the totals update names `spent` only, and test/store/sqlite.test.ts checks each one's plan.
 */
export const CHARGE_SQL = {
  account: ACCOUNT_BY_ID,
  insertJournal: 'INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
  insertUsage: `INSERT INTO usage_records (request_id, account_id, key_id, model, provider, day, created_at,
      prompt_tokens, completion_tokens, images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  dailyRow: 'SELECT * FROM usage_daily WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?',
  insertDailySum: `INSERT INTO usage_daily (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens,
      images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  addDailySum: `UPDATE usage_daily SET requests = requests + ?, prompt_tokens = prompt_tokens + ?,
      completion_tokens = completion_tokens + ?, images = images + ?, audio_ms = audio_ms + ?, cost = ?
      WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?`,
  setSpent: 'UPDATE accounts SET spent = ? WHERE id = ?',
} as const

function toJournal(row: JournalRow): JournalEntry {
  return {
    seq: row.seq,
    accountId: row.account_id,
    kind: row.kind as JournalKind,
    amount: BigInt(row.amount),
    requestId: row.request_id,
    keyId: row.key_id,
    memo: row.memo,
    createdAt: row.created_at,
  }
}

/** The error recordCharge gives a malformed charge before touching the database, or null. */
function invalidCharge(c: Charge): RangeError | null {
  if (c.cost < 0n) return new RangeError(`a charge cannot be negative (got ${c.cost})`)
  if (c.requestId.length === 0) return new RangeError('a charge must name its request')
  for (const [n, what] of [
    [c.promptTokens, 'promptTokens'],
    [c.completionTokens, 'completionTokens'],
    [c.images, 'images'],
    [c.audioMs, 'audioMs'],
  ] as const) {
    if (!Number.isSafeInteger(n) || n < 0) return new RangeError(`${what} must be a non-negative integer (got ${n})`)
  }
  return null
}

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

function prepareStatements(conn: SqliteConnection) {
  const db = conn.db
  return {
    insertAccount: db.prepare<[string, number]>(INSERT_ACCOUNT),
    account: db.prepare<[string], AccountRow>(CHARGE_SQL.account),
    // Deposits and credits name these two columns, which is what reports them as funds changes (migration 2).
    setFunds: db.prepare<[string, string, string]>('UPDATE accounts SET deposited = ?, credited = ? WHERE id = ?'),
    setSpent: db.prepare<[string, string]>(CHARGE_SQL.setSpent),
    insertJournal: db.prepare<[string, JournalKind, string, string | null, string | null, string, number]>(CHARGE_SQL.insertJournal),
    journalEntry: db.prepare<[number | bigint], JournalRow>('SELECT * FROM journal WHERE seq = ?'),
    journal: db.prepare<[string], JournalRow>('SELECT * FROM journal WHERE account_id = ? ORDER BY seq'),
    insertUsage: db.prepare(CHARGE_SQL.insertUsage),
    dailyRow: db.prepare<[string, string, string, string], UsageDailyRow>(CHARGE_SQL.dailyRow),
    insertDailySum: db.prepare(CHARGE_SQL.insertDailySum),
    addDailySum: db.prepare(CHARGE_SQL.addDailySum),
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

  constructor(conn: SqliteConnection) {
    this.#conn = conn
    this.#q = prepareStatements(conn)
  }

  async addFunds(wallet: string, kind: 'deposit' | 'credit', amount: bigint, memo: string, now: number): Promise<JournalEntry> {
    this.#conn.check()
    if (amount <= 0n) throw new RangeError(`a ${kind} must be positive (got ${amount})`)
    const add = this.#conn.db.transaction((): JournalEntry => {
      this.#q.insertAccount.run(wallet, now)
      const row = this.#q.account.get(wallet)!
      const deposited = BigInt(row.deposited) + (kind === 'deposit' ? amount : 0n)
      const credited = BigInt(row.credited) + (kind === 'credit' ? amount : 0n)
      this.#q.setFunds.run(deposited.toString(), credited.toString(), wallet)
      const { lastInsertRowid } = this.#q.insertJournal.run(wallet, kind, amount.toString(), null, null, memo, now)
      return toJournal(this.#q.journalEntry.get(lastInsertRowid)!)
    })
    return this.#conn.flushed(add.immediate())
  }

  async recordCharge(c: Charge): Promise<JournalEntry> {
    const [outcome] = await this.recordCharges([c])
    if (outcome instanceof Error) throw outcome
    return outcome!
  }

  async recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]> {
    this.#conn.check()
    const out: (JournalEntry | Error)[] = new Array<JournalEntry | Error>(charges.length)
    const write = this.#conn.db.transaction((): void => {
      // Totals and roll-up rows are added up here with BigInt and written once per batch: a batch of 256
      // charges on one account is one accounts UPDATE, not 256.
      const accounts = new Map<string, { spent: bigint }>()
      const daily = new Map<string, DailySum>()
      for (let i = 0; i < charges.length; i++) {
        const c = charges[i]!
        const invalid = invalidCharge(c)
        if (invalid !== null) {
          out[i] = invalid
          continue
        }
        let account = accounts.get(c.accountId)
        if (account === undefined) {
          const row = this.#q.account.get(c.accountId)
          if (row === undefined) {
            out[i] = new Error(`no account ${c.accountId}`)
            continue
          }
          account = { spent: BigInt(row.spent) }
          accounts.set(c.accountId, account)
        }
        const day = utcDay(c.at)
        const cost = c.cost.toString()
        let seq: number | bigint
        try {
          // A failed statement undoes only itself, not the transaction: the rest of the batch goes on.
          seq = this.#q.insertJournal.run(c.accountId, 'charge', cost, c.requestId, c.keyId, '', c.at).lastInsertRowid
        } catch (err) {
          if (!isUniqueViolation(err)) throw err
          out[i] = new StoreConflictError(`request ${c.requestId} is already billed`)
          continue
        }
        this.#q.insertUsage.run(c.requestId, c.accountId, c.keyId, c.model, c.provider, day, c.at, c.promptTokens, c.completionTokens, c.images, c.audioMs, cost)
        account.spent += c.cost
        const dk = `${c.accountId}\u0000${day}\u0000${c.model}\u0000${c.keyId}`
        let sum = daily.get(dk)
        if (sum === undefined) {
          sum = { accountId: c.accountId, day, model: c.model, keyId: c.keyId, requests: 0, prompt: 0, completion: 0, images: 0, audioMs: 0, cost: 0n }
          daily.set(dk, sum)
        }
        sum.requests++
        sum.prompt += c.promptTokens
        sum.completion += c.completionTokens
        sum.images += c.images
        sum.audioMs += c.audioMs
        sum.cost += c.cost
        out[i] = { seq: Number(seq), accountId: c.accountId, kind: 'charge', amount: c.cost, requestId: c.requestId, keyId: c.keyId, memo: '', createdAt: c.at }
      }
      for (const d of daily.values()) {
        const row = this.#q.dailyRow.get(d.accountId, d.day, d.model, d.keyId)
        if (row === undefined) {
          this.#q.insertDailySum.run(d.accountId, d.day, d.model, d.keyId, d.requests, d.prompt, d.completion, d.images, d.audioMs, d.cost.toString())
        } else {
          const cost = (BigInt(row.cost) + d.cost).toString()
          this.#q.addDailySum.run(d.requests, d.prompt, d.completion, d.images, d.audioMs, cost, d.accountId, d.day, d.model, d.keyId)
        }
      }
      for (const [id, a] of accounts) this.#q.setSpent.run(a.spent.toString(), id)
    })
    write.immediate()
    // The transaction ran on the event loop without a disk flush; the flush, when 'full', runs on the thread
    // pool, and the batch's charges are acknowledged (their responses' last bytes released) only after it.
    return this.#conn.flushed(out)
  }

  async totals(accountId: string): Promise<AccountTotals> {
    this.#conn.check()
    const row = this.#q.account.get(accountId)
    if (row === undefined) return { deposited: 0n, credited: 0n, spent: 0n }
    return { deposited: BigInt(row.deposited), credited: BigInt(row.credited), spent: BigInt(row.spent) }
  }

  async journal(accountId: string): Promise<JournalEntry[]> {
    this.#conn.check()
    return this.#q.journal.all(accountId).map(toJournal)
  }

  async spendByKey(accountId: string, sinceDay: string | null): Promise<Map<string, bigint>> {
    this.#conn.check()
    const out = new Map<string, bigint>()
    for (const row of this.#q.spendSince.all(accountId, sinceDay ?? '')) {
      out.set(row.key_id, (out.get(row.key_id) ?? 0n) + BigInt(row.cost))
    }
    return out
  }

  async usage(accountId: string, filter: UsageFilter): Promise<UsageRow[]> {
    this.#conn.check()
    const params = { account: accountId, from: filter.fromDay, to: filter.toDay, key: filter.keyId ?? null, model: filter.model ?? null }
    return this.#q.usage.all(params).map((r) => ({
      day: r.day,
      model: r.model,
      keyId: r.key_id,
      requests: r.requests,
      promptTokens: r.prompt_tokens,
      completionTokens: r.completion_tokens,
      images: r.images,
      audioMs: r.audio_ms,
      cost: BigInt(r.cost),
    }))
  }
}
