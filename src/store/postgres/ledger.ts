/**
 * The LedgerStore on PostgreSQL: the append-only `journal` (a charge is one row carrying its usage), each
 * account's running totals (columns of `accounts`) and the `usage_daily` roll-up, all written in the charge's
 * own transaction, so every reader sees totals equal to the journal with no fold to wait for. Money is
 * NUMERIC(78,0), passed as decimal strings; the database adds it only as NUMERIC (exact), never as float.
 *
 * A batch of charges (recordCharges, the group commit) is one transaction of two statements: the accounts it
 * bills are locked in id order (so two replicas' batches over the same accounts queue, never deadlock), then
 * one statement appends every charge (unnest(): one multi-row INSERT), adds them into the totals and the
 * roll-up. BEGIN, both statements and COMMIT are written at once (pipelined: one round trip), and the COMMIT,
 * flushed by PostgreSQL (synchronous_commit on), makes the whole batch durable.
 */
import type pg from 'pg'
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
import { LEASE_SQL } from './leases.js'

const JOURNAL_COLUMNS = 'seq, account_id, kind, amount, request_id, key_id, memo, created_at, neuron::text'

/**
 * A roll-up count added in NUMERIC and saturated at MAX_STORED_COUNT before it is a bigint again: no sum can
 * overflow the column and abort the batch, with every other account's charges in it (issue 43), even past a
 * row written near the bigint limit behind the router's back.
 */
const cap = (numeric: string): string => `LEAST(${numeric}, ${MAX_STORED_COUNT})::bigint`

/** Every statement of a batch of charges, in the order the transaction runs them. No trigger fires on any. */
export const CHARGE_SQL = {
  /**
   * The accounts the batch bills, locked in id order until COMMIT: every batch takes its account locks in the
   * same order, so concurrent batches (other replicas) over the same accounts wait in turn instead of
   * deadlocking, and the totals' read-add-write below can never lose an update. Accounts missing from the
   * answer do not exist: their charges fail alone, and the others are billed. FOR NO KEY UPDATE still lets
   * the journal's foreign-key checks (FOR KEY SHARE) through.
   */
  lockAccounts: 'SELECT id FROM accounts WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE',
  /**
   * Appends the charges (in batch order, so seqs follow it), skipping any whose request is already billed (the
   * unique index; a concurrent batch with the same request waits for the other's outcome) or whose account does
   * not exist (it is written without waiting for lockAccounts' answer), then adds exactly the appended ones into
   * accounts.spent and usage_daily: both read `appended`, the INSERT's RETURNING, so a skipped charge is never
   * counted. The usage_daily rows belong to the accounts locked above, so no other batch can be adding to them
   * meanwhile. A chain provider's charges also add their neuron into provider_settlement.served (what it was
   * served, durable with the charge: store/settlement.ts); those rows are shared by every account, so they are
   * taken after the account locks and in provider order, like the accounts, and no two batches deadlock.
   * Answers the seq of each charge appended.
   */
  append: `WITH input AS (
      SELECT * FROM unnest($1::text[], $2::numeric[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[],
        $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::numeric[]) WITH ORDINALITY
        AS c(account_id, amount, request_id, key_id, created_at, model, provider, prompt_tokens, completion_tokens,
          images, audio_ms, day, neuron, ord)
    ), appended AS (
      INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at, model, provider,
        prompt_tokens, completion_tokens, images, audio_ms, neuron)
      SELECT account_id, 'charge', amount, request_id, key_id, '', created_at, model, provider,
        prompt_tokens, completion_tokens, images, audio_ms, neuron
      FROM input WHERE EXISTS (SELECT 1 FROM accounts a WHERE a.id = input.account_id)
      ORDER BY ord
      ON CONFLICT (request_id) WHERE kind = 'charge' DO NOTHING
      RETURNING seq, request_id, account_id, key_id, model, provider, neuron, amount, prompt_tokens, completion_tokens, images, audio_ms
    ), served AS (
      INSERT INTO provider_settlement AS p (provider, served)
      SELECT provider, sum(neuron) FROM appended WHERE neuron > 0 GROUP BY provider ORDER BY provider
      ON CONFLICT (provider) DO UPDATE SET served = p.served + EXCLUDED.served
    ), spent AS (
      UPDATE accounts a SET spent = a.spent + s.amount
      FROM (SELECT account_id, sum(amount) AS amount FROM appended GROUP BY account_id) s
      WHERE a.id = s.account_id
    ), daily AS (
      INSERT INTO usage_daily AS u (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens,
        images, audio_ms, cost)
      SELECT a.account_id, i.day, a.model, a.key_id, count(*), ${cap('sum(a.prompt_tokens)')}, ${cap('sum(a.completion_tokens)')},
        ${cap('sum(a.images)')}, ${cap('sum(a.audio_ms)')}, sum(a.amount)
      FROM appended a JOIN input i ON i.request_id = a.request_id
      GROUP BY a.account_id, i.day, a.model, a.key_id
      ON CONFLICT (account_id, day, model, key_id) DO UPDATE SET
        requests = ${cap('u.requests::numeric + EXCLUDED.requests')},
        prompt_tokens = ${cap('u.prompt_tokens::numeric + EXCLUDED.prompt_tokens')},
        completion_tokens = ${cap('u.completion_tokens::numeric + EXCLUDED.completion_tokens')},
        images = ${cap('u.images::numeric + EXCLUDED.images')},
        audio_ms = ${cap('u.audio_ms::numeric + EXCLUDED.audio_ms')},
        cost = u.cost + EXCLUDED.cost
    )
    SELECT seq, request_id FROM appended`,
} as const

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

  /** The batch's transaction: CHARGE_SQL's two statements, pipelined. */
  async #append(ids: string[], valid: readonly Charge[]): Promise<Appended> {
    const n = valid.length
    const columns = Array.from({ length: 13 }, () => new Array<unknown>(n))
    for (let i = 0; i < n; i++) {
      const c = valid[i]!
      columns[0]![i] = c.accountId
      columns[1]![i] = c.cost.toString()
      columns[2]![i] = c.requestId
      columns[3]![i] = c.keyId
      columns[4]![i] = c.at
      columns[5]![i] = c.model
      columns[6]![i] = c.provider
      columns[7]![i] = c.promptTokens
      columns[8]![i] = c.completionTokens
      columns[9]![i] = c.images
      columns[10]![i] = c.audioMs
      columns[11]![i] = utcDay(c.at)
      columns[12]![i] = c.neuron === null || c.neuron === undefined ? null : c.neuron.toString()
    }
    const statements: pg.QueryConfig[] = [{ name: 'svc_lock_accounts', text: CHARGE_SQL.lockAccounts, values: [ids] }]
    const pay = this.#payLeased(valid)
    if (pay !== null) statements.push(pay)
    statements.push({ name: 'svc_append_charges', text: CHARGE_SQL.append, values: columns })
    const results = await this.#conn.pipelined(statements)
    const locked = results[0]
    const appended = results[results.length - 1]
    const known = new Set((locked!.rows as { id: string }[]).map((r) => r.id))
    const seqs = new Map<string, number>()
    for (const row of appended!.rows as { seq: number; request_id: string }[]) seqs.set(row.request_id, row.seq)
    return { known, seqs }
  }

  /**
   * The statement that pays the batch's leased charges out of this replica's leases (or free room), after the
   * account locks and before the append (store/postgres/leases.ts svc_lease_pay_all); null when none is leased.
   */
  #payLeased(batch: readonly Charge[]): pg.QueryConfig | null {
    let leased: Charge[] | null = null
    for (const c of batch) if (c.leased === true) (leased ??= []).push(c)
    if (leased === null) return null
    const replicaId = this.#conn.options.replicaId
    if (replicaId === null) throw new Error('a leased charge needs the replica whose lease pays it (a store opened with a replica id)')
    return {
      name: 'svc_lease_pay_all',
      text: LEASE_SQL.payAll,
      values: [
        replicaId,
        leased.map((c) => c.requestId),
        leased.map((c) => c.accountId),
        leased.map((c) => c.keyId),
        leased.map((c) => c.periodStart ?? 0),
        leased.map((c) => c.cost.toString()),
      ],
    }
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
