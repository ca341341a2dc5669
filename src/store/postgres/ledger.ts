/**
 * The LedgerStore on PostgreSQL: the append-only `journal` (a charge is one row carrying its usage), each
 * account's running totals (columns of `accounts`) and the `usage_daily` roll-up, all written in the charge's
 * own transaction, so every reader sees totals equal to the journal with no fold to wait for. Money is
 * NUMERIC(78,0), passed as decimal strings; the database adds it only as NUMERIC (exact), never as float.
 *
 * A batch of charges (recordCharges, the group commit) is one prepared statement run in autocommit, the
 * function svc_charge_batch (charge-batch.ts): it locks the accounts the batch bills in id order (so two
 * replicas' batches over the same accounts queue, never deadlock), pays the leased charges, appends every
 * charge (unnest(): one multi-row INSERT) and adds them into the totals, the roll-up and what this replica
 * served each chain provider. One round trip; its commit, flushed by PostgreSQL (synchronous_commit on), makes
 * the whole batch durable before it answers.
 */
import { utcDay } from '../days.js'
import {
  chargeEntry,
  invalidCharge,
  toJournal,
  toUsageRow,
  type AccountTotals,
  type Charge,
  type JournalEntry,
  type JournalRow,
  type LeasedTotals,
  type LedgerStore,
  type UsageDailyRow,
  type UsageFilter,
  type UsageRow,
} from '../ledger.js'
import { StoreConflictError } from '../store.js'
import { LeaseLostError } from '../leases.js'
import { ACCOUNT_SQL } from './accounts.js'
import type { PgConnection } from './connection.js'
import { CHARGE_BATCH_SQL } from './charge-batch.js'

const JOURNAL_COLUMNS = 'seq, account_id, kind, amount, request_id, key_id, memo, created_at, neuron::text'

export const FUNDS_SQL = {
  /**
   * Adds a deposit or credit to the account's totals (NUMERIC + NUMERIC: exact), appends its journal entry and
   * records a 'funds' change, in one statement: the entry exists exactly when the totals include it.
   */
  add: `WITH funded AS (
      UPDATE accounts SET deposited = deposited + $2::numeric, credited = credited + $3::numeric WHERE id = $1 RETURNING id
    ), entry AS (
      INSERT INTO journal (account_id, kind, amount, memo, created_at)
      SELECT id, $4, $5::numeric, $6, $7 FROM funded RETURNING ${JOURNAL_COLUMNS}
    ), changed AS (
      INSERT INTO changes (kind, account_id, origin) SELECT 'funds', id, $8 FROM funded RETURNING seq
    )
    SELECT ${JOURNAL_COLUMNS}, (SELECT seq FROM changed) AS change_seq FROM entry`,
  totals: 'SELECT deposited, credited, spent FROM accounts WHERE id = $1',
  /** `leased`: what replicas hold in budget leases (store/leases.ts), read in the same row as the rest. */
  totalsWithLeases: 'SELECT deposited, credited, spent, leased FROM accounts WHERE id = $1',
  journal: `SELECT ${JOURNAL_COLUMNS} FROM journal WHERE account_id = $1 ORDER BY seq`,
  /** sum() over NUMERIC is NUMERIC: exact. */
  spendSince: 'SELECT key_id, sum(cost) AS cost FROM usage_daily WHERE account_id = $1 AND day >= $2 GROUP BY key_id',
  /** Ordered byte-wise (COLLATE "C"), whatever the database's collation: the same order as the SQLite store's. */
  usage: `SELECT day, model, key_id, requests, prompt_tokens, completion_tokens, images, audio_ms, cost
    FROM usage_daily WHERE account_id = $1 AND day >= $2 AND day <= $3
      AND ($4::text IS NULL OR key_id = $4) AND ($5::text IS NULL OR model = $5)
    ORDER BY day COLLATE "C", model COLLATE "C", key_id COLLATE "C"`,
} as const

/** A text element of a PostgreSQL array literal: quoted, its backslashes and double quotes escaped. */
function quoted(text: string): string {
  return text.indexOf('"') < 0 && text.indexOf('\\') < 0 ? '"' + text + '"' : '"' + text.replace(/[\\"]/g, '\\$&') + '"'
}

/** The request a batch's lease payment could not pay (svc_lease_pay_all's 'svc: lease lost'), or null. */
function lostLease(err: unknown): string | null {
  const e = err as { code?: string; message?: string; detail?: string } | null
  return e?.code === 'P0001' && e.message === 'svc: lease lost' && typeof e.detail === 'string' ? e.detail : null
}

/** What the transaction of a batch learnt: the accounts that exist, and the seq of each charge appended. */
interface Appended {
  readonly known: ReadonlySet<string>
  readonly seqs: ReadonlyMap<string, number>
}

export class PgLedger implements LedgerStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  async addFunds(wallet: string, kind: 'deposit' | 'credit', amount: bigint, memo: string, now: number): Promise<JournalEntry> {
    this.#conn.check()
    if (amount <= 0n) throw new RangeError(`a ${kind} must be positive (got ${amount})`)
    const origin = this.#conn.origin
    const add = (kind === 'deposit' ? [amount, 0n] : [0n, amount]).map(String)
    const { entry, seqs } = await this.#conn.transaction(async (client) => {
      // The account first (its 'account' change, when it is new, comes before the 'funds' one).
      const created = await client.query<{ change_seq: number | null }>(ACCOUNT_SQL.ensure, [wallet, now, origin])
      const { rows } = await client.query<JournalRow & { change_seq: number | null }>(FUNDS_SQL.add, [
        wallet, add[0], add[1], kind, amount.toString(), memo, now, origin,
      ])
      if (rows[0] === undefined) throw new Error(`account ${wallet} could not be created`)
      return { entry: rows[0], seqs: [created.rows[0]?.change_seq ?? null, rows[0].change_seq] }
    })
    for (const seq of seqs) this.#conn.noteOwnChange(seq)
    return toJournal(entry)
  }

  async recordCharge(c: Charge): Promise<JournalEntry> {
    const [outcome] = await this.recordCharges([c])
    if (outcome instanceof Error) throw outcome
    return outcome!
  }

  async recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]> {
    this.#conn.check()
    const out: (JournalEntry | Error)[] = new Array<JournalEntry | Error>(charges.length)
    // Checked here, before the database: a malformed charge, or a request named twice in the batch (the
    // first is billed, as it would be in a run of recordCharge calls), fails alone.
    const valid: Charge[] = []
    const requests = new Set<string>()
    const accounts = new Set<string>()
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]!
      const invalid = invalidCharge(c)
      if (invalid !== null) out[i] = invalid
      else if (requests.has(c.requestId)) out[i] = new StoreConflictError(`request ${c.requestId} is already billed`)
      else {
        requests.add(c.requestId)
        accounts.add(c.accountId)
        valid.push(c)
      }
    }
    if (valid.length === 0) return out
    // A leased charge nothing can pay fails the batch's transaction naming it: written again without it.
    const unpaid = new Set<string>()
    let batch: readonly Charge[] = valid
    let appended: Appended | null = null
    while (appended === null) {
      try {
        appended = batch.length === 0 ? { known: new Set(accounts), seqs: new Map() } : await this.#append([...accounts].sort(), batch)
      } catch (err) {
        const lost = lostLease(err)
        if (lost === null || unpaid.has(lost)) throw err
        unpaid.add(lost)
        batch = batch.filter((c) => c.requestId !== lost)
      }
    }
    const { known, seqs } = appended
    for (let i = 0; i < charges.length; i++) {
      if (out[i] !== undefined) continue
      const c = charges[i]!
      const seq = seqs.get(c.requestId)
      if (unpaid.has(c.requestId)) out[i] = new LeaseLostError(`request ${c.requestId}: its budget lease was released and the account or key has no room left for it`)
      else if (seq !== undefined) {
        out[i] = chargeEntry(seq, c)
      } else if (!known.has(c.accountId)) out[i] = new Error(`no account ${c.accountId}`)
      else out[i] = new StoreConflictError(`request ${c.requestId} is already billed`)
    }
    return out
  }

  /**
   * The batch's transaction: one statement (svc_charge_batch), its leased charges paid by this replica's leases.
   * Its array parameters are written here as PostgreSQL array literals, one string per column in one pass over
   * the charges: pg would build one JavaScript array per column and then escape every element with two regular
   * expressions (pg/lib/utils.js arrayString), ~1.5 us a charge of the replica's main thread at 64 connections.
   */
  async #append(ids: string[], valid: readonly Charge[]): Promise<Appended> {
    let account = '', amount = '', request = '', key = '', at = '', model = '', provider = ''
    let prompt = '', completion = '', images = '', audio = '', day = '', neuron = ''
    let lRequest = '', lAccount = '', lKey = '', lPeriod = '', lCost = ''
    let leased = 0
    for (let i = 0; i < valid.length; i++) {
      const c = valid[i]!
      const sep = i === 0 ? '' : ','
      const cost = c.cost.toString()
      account += sep + quoted(c.accountId)
      amount += sep + cost
      request += sep + quoted(c.requestId)
      key += sep + quoted(c.keyId)
      at += sep + c.at
      model += sep + quoted(c.model)
      provider += sep + quoted(c.provider)
      prompt += sep + c.promptTokens
      completion += sep + c.completionTokens
      images += sep + c.images
      audio += sep + c.audioMs
      day += sep + quoted(utcDay(c.at))
      neuron += sep + (c.neuron === null || c.neuron === undefined ? 'NULL' : c.neuron.toString())
      if (c.leased !== true) continue
      const lsep = leased === 0 ? '' : ','
      lRequest += lsep + quoted(c.requestId)
      lAccount += lsep + quoted(c.accountId)
      lKey += lsep + quoted(c.keyId)
      lPeriod += lsep + (c.periodStart ?? 0)
      lCost += lsep + cost
      leased++
    }
    const replica = this.#conn.options.replicaId
    if (leased > 0 && replica === null) throw new Error('a leased charge needs the replica whose lease pays it (a store opened with a replica id)')
    const values: unknown[] = [
      replica ?? '', ids,
      `{${account}}`, `{${amount}}`, `{${request}}`, `{${key}}`, `{${at}}`, `{${model}}`, `{${provider}}`,
      `{${prompt}}`, `{${completion}}`, `{${images}}`, `{${audio}}`, `{${day}}`, `{${neuron}}`,
      ...(leased > 0 ? [`{${lRequest}}`, `{${lAccount}}`, `{${lKey}}`, `{${lPeriod}}`, `{${lCost}}`] : [null, null, null, null, null]),
    ]
    const { rows } = await this.#conn.statement<{ o_known: string[]; o_seqs: (number | string)[]; o_requests: string[] }>({
      name: 'svc_charge_batch',
      text: CHARGE_BATCH_SQL,
      values,
    })
    const row = rows[0]!
    const seqs = new Map<string, number>()
    for (let i = 0; i < row.o_requests.length; i++) seqs.set(row.o_requests[i]!, Number(row.o_seqs[i]))
    return { known: new Set(row.o_known), seqs }
  }

  async totals(accountId: string): Promise<AccountTotals> {
    const { rows } = await this.#conn.query<{ deposited: string; credited: string; spent: string }>(FUNDS_SQL.totals, [accountId])
    const row = rows[0]
    if (row === undefined) return { deposited: 0n, credited: 0n, spent: 0n }
    return { deposited: BigInt(row.deposited), credited: BigInt(row.credited), spent: BigInt(row.spent) }
  }

  async totalsWithLeases(accountId: string): Promise<LeasedTotals> {
    const { rows } = await this.#conn.query<{ deposited: string; credited: string; spent: string; leased: string }>(FUNDS_SQL.totalsWithLeases, [accountId])
    const row = rows[0]
    if (row === undefined) return { deposited: 0n, credited: 0n, spent: 0n, leased: 0n }
    return { deposited: BigInt(row.deposited), credited: BigInt(row.credited), spent: BigInt(row.spent), leased: BigInt(row.leased) }
  }

  async journal(accountId: string): Promise<JournalEntry[]> {
    const { rows } = await this.#conn.query<JournalRow>(FUNDS_SQL.journal, [accountId])
    return rows.map(toJournal)
  }

  async spendByKey(accountId: string, sinceDay: string | null): Promise<Map<string, bigint>> {
    const { rows } = await this.#conn.query<{ key_id: string; cost: string }>(FUNDS_SQL.spendSince, [accountId, sinceDay ?? ''])
    return new Map(rows.map((r) => [r.key_id, BigInt(r.cost)]))
  }

  async usage(accountId: string, filter: UsageFilter): Promise<UsageRow[]> {
    const { rows } = await this.#conn.query<UsageDailyRow>(FUNDS_SQL.usage, [accountId, filter.fromDay, filter.toDay, filter.keyId ?? null, filter.model ?? null])
    return rows.map(toUsageRow)
  }
}
