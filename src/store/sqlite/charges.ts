/**
 * Writing a batch of charges: one transaction (BEGIN IMMEDIATE) per batch, a journal entry and a usage record
 * per charge, and the account's `spent` and the daily roll-up rows added up with BigInt and written once per
 * batch. The charge thread (charge-thread.ts) runs this on its own connection; the store's connection runs it
 * only for an in-memory database, which no second connection can open. Both write exactly the same rows.
 *
 * Only `spent` is written on the account, never `deposited`/`credited`: the external-change triggers
 * (migrations.ts) watch those, and a charge is not a change the router needs to be told about.
 */
import type Database from 'better-sqlite3'
import { utcDay } from '../days.js'
import { StoreConflictError, type Charge, type JournalEntry } from '../store.js'

/** The statements the journal INSERT shares with the store's own deposits and credits. */
export const INSERT_JOURNAL_SQL = 'INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)'
export const ACCOUNT_SQL = 'SELECT * FROM accounts WHERE id = ?'

export function prepareChargeStatements(db: Database.Database) {
  return {
    account: db.prepare<[string], { spent: string }>(ACCOUNT_SQL),
    setSpent: db.prepare('UPDATE accounts SET spent = ? WHERE id = ?'),
    insertJournal: db.prepare(INSERT_JOURNAL_SQL),
    insertUsage: db.prepare(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, day, created_at,
      prompt_tokens, completion_tokens, images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    dailyRow: db.prepare<[string, string, string, string], { cost: string }>(
      'SELECT cost FROM usage_daily WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?',
    ),
    insertDailySum: db.prepare(`INSERT INTO usage_daily (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens,
      images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    addDailySum: db.prepare(`UPDATE usage_daily SET requests = requests + ?, prompt_tokens = prompt_tokens + ?,
      completion_tokens = completion_tokens + ?, images = images + ?, audio_ms = audio_ms + ?, cost = ?
      WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?`),
  }
}

export type ChargeStatements = ReturnType<typeof prepareChargeStatements>

export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: string }).code
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
}

/** The error a malformed charge gets before the database is touched, or null. */
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

/**
 * Writes `charges` in one transaction and returns, per charge, its journal entry or why it was refused (a
 * malformed charge, an unknown account, a request already billed). A refused charge undoes only itself; an
 * error of the database itself (disk full, I/O) throws and rolls back the whole batch.
 */
export function writeCharges(db: Database.Database, q: ChargeStatements, charges: readonly Charge[]): (JournalEntry | Error)[] {
  const out: (JournalEntry | Error)[] = new Array<JournalEntry | Error>(charges.length)
  const write = db.transaction((): void => {
    const accounts = new Map<string, bigint>()
    const daily = new Map<string, DailySum>()
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]!
      const invalid = invalidCharge(c)
      if (invalid !== null) {
        out[i] = invalid
        continue
      }
      let spent = accounts.get(c.accountId)
      if (spent === undefined) {
        const row = q.account.get(c.accountId)
        if (row === undefined) {
          out[i] = new Error(`no account ${c.accountId}`)
          continue
        }
        spent = BigInt(row.spent)
      }
      const day = utcDay(c.at)
      const cost = c.cost.toString()
      let seq: number | bigint
      try {
        // A failed statement undoes only itself, not the transaction: the rest of the batch goes on.
        seq = q.insertJournal.run(c.accountId, 'charge', cost, c.requestId, c.keyId, '', c.at).lastInsertRowid
      } catch (err) {
        if (!isUniqueViolation(err)) throw err
        out[i] = new StoreConflictError(`request ${c.requestId} is already billed`)
        continue
      }
      q.insertUsage.run(c.requestId, c.accountId, c.keyId, c.model, c.provider, day, c.at, c.promptTokens, c.completionTokens, c.images, c.audioMs, cost)
      accounts.set(c.accountId, spent + c.cost)
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
      const row = q.dailyRow.get(d.accountId, d.day, d.model, d.keyId)
      if (row === undefined) {
        q.insertDailySum.run(d.accountId, d.day, d.model, d.keyId, d.requests, d.prompt, d.completion, d.images, d.audioMs, d.cost.toString())
      } else {
        const cost = (BigInt(row.cost) + d.cost).toString()
        q.addDailySum.run(d.requests, d.prompt, d.completion, d.images, d.audioMs, cost, d.accountId, d.day, d.model, d.keyId)
      }
    }
    for (const [id, spent] of accounts) q.setSpent.run(spent.toString(), id)
  })
  write.immediate()
  return out
}
