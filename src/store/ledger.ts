import { MAX_USAGE_COUNT } from '../billing/usage-bound.js'

/**
 * The durable ledger: an append-only journal of deposits, credits and charges with each account's running
 * totals, plus per-request usage records and their daily roll-up. The part of the Store (store.ts) that the
 * billing ledger in memory (billing/ledger.ts) is rebuilt from and commits charges to.
 */

/** Kinds of journal entries. Deposits and credits add funds, charges spend them. */
export type JournalKind = 'deposit' | 'credit' | 'charge'

export interface JournalEntry {
  readonly seq: number
  readonly accountId: string
  readonly kind: JournalKind
  /** Always >= 0; the kind gives the direction. */
  readonly amount: bigint
  /** Charges only: the request that was billed (unique among charges). */
  readonly requestId: string | null
  readonly keyId: string | null
  readonly memo: string
  readonly createdAt: number
  /** Charges of a chain provider only: what the answer owes it at its own prices (neuron, exact); absent otherwise. */
  readonly neuron?: bigint
}

/** The running totals of an account's journal (what is available: billing/available.ts). */
export interface AccountTotals {
  readonly deposited: bigint
  readonly credited: bigint
  readonly spent: bigint
}

/** The totals with what replicas hold of the account in budget leases (leases.ts), read in one go. */
export interface LeasedTotals extends AccountTotals {
  readonly leased: bigint
}

/** One billed request: its journal charge and the usage it pays for. */
export interface Charge {
  readonly requestId: string
  readonly accountId: string
  readonly keyId: string
  readonly model: string
  readonly provider: string
  /** Epoch ms of the request; its UTC day is the roll-up day. */
  readonly at: number
  readonly promptTokens: number
  readonly completionTokens: number
  readonly images: number
  /** Audio duration in milliseconds (integer). */
  readonly audioMs: number
  readonly cost: bigint
  /**
   * A chain provider's price of the answer in neuron (exact; src/settlement/), recorded beside `cost`; null or
   * absent for a provider without chain prices.
   */
  readonly neuron?: bigint | null
  /**
   * Paid out of the recording handle's budget lease on the key (leases.ts, networked stores only): the lease
   * shrinks by `cost` in the same transaction, or, when the lease is gone (its replica was presumed dead), the
   * charge is written only if the account and key still have the room, else it fails with LeaseLostError.
   */
  readonly leased?: boolean
  /** With `leased`: epoch ms at which the key's current reset period started (0 for `never`). */
  readonly periodStart?: number
}

/** One (day, model, key) row of the daily roll-up. */
export interface UsageRow {
  /** UTC day, YYYY-MM-DD. */
  readonly day: string
  readonly model: string
  readonly keyId: string
  readonly requests: number
  readonly promptTokens: number
  readonly completionTokens: number
  readonly images: number
  readonly audioMs: number
  readonly cost: bigint
}

export interface UsageFilter {
  /** Inclusive UTC days, YYYY-MM-DD. */
  readonly fromDay: string
  readonly toDay: string
  readonly keyId?: string
  readonly model?: string
}

export interface LedgerStore {
  /** Appends a deposit or credit to the journal and the account's totals (creating the account if needed). */
  addFunds(wallet: string, kind: 'deposit' | 'credit', amount: bigint, memo: string, now: number): Promise<JournalEntry>
  /**
   * Bills one request: its journal charge with its usage, durably. The totals and the daily roll-up that
   * totals(), spendByKey() and usage() read include it from then on (an implementation may add it to them
   * later, as long as every reader sees it). A request id already billed throws StoreConflictError and changes
   * nothing (no double charge).
   */
  recordCharge(charge: Charge): Promise<JournalEntry>
  /**
   * Group commit: bills every charge of the batch in ONE transaction (one durable commit for all). Each charge
   * keeps the semantics of recordCharge on its own: the outcome at index i is its journal entry, or the error
   * recordCharge would have thrown for it (StoreConflictError for a request already billed, inside the batch or
   * before it), and such a charge changes nothing while the others are still written. The promise rejects only
   * when the transaction itself failed, and then nothing of the batch was written.
   *
   * The router writes thousands of these a second: charges are never reported as changes (changes.ts), and an
   * implementation must not make this path pay for change tracking.
   */
  recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]>
  totals(accountId: string): Promise<AccountTotals>
  /**
   * The totals and every replica's leases on the account, read together (the funds endpoint's `reserved`):
   * stores shared by replicas only. Absent: reservations live in the one process's memory (billing/ledger.ts).
   */
  totalsWithLeases?(accountId: string): Promise<LeasedTotals>
  /** The journal of an account, oldest first. */
  journal(accountId: string): Promise<JournalEntry[]>
  /** Spend per key from `sinceDay` (inclusive, YYYY-MM-DD; null = all time). Keys with no spend are absent. */
  spendByKey(accountId: string, sinceDay: string | null): Promise<Map<string, bigint>>
  /** Daily roll-up rows, ordered by day, model, key. */
  usage(accountId: string, filter: UsageFilter): Promise<UsageRow[]>
  /**
   * A store whose totals are folded in from the journal after the charge (SQLite): journal rows the fold left
   * out (quarantined: kept, not added up) or added without their usage counts, since the store was created.
   * A store that adds each charge in its own transaction (PostgreSQL) has none and leaves this out.
   */
  quarantinedRows?(): number
  /**
   * Why the totals cannot be brought up to the journal now (the fold fails as a whole, for a reason no one
   * row explains), or null; read by /readyz. Absent where there is no fold.
   */
  foldStuck?(): Promise<string | null>
}

/** A `journal` row as both stores read it (money as decimal text). */
export interface JournalRow {
  seq: number
  account_id: string
  kind: string
  amount: string
  request_id: string | null
  key_id: string | null
  memo: string
  created_at: number
  /** Decimal text; null on deposits, credits and charges of providers without chain prices. */
  neuron?: string | null
}

/** A `usage_daily` row as both stores read it (money as decimal text). */
export interface UsageDailyRow {
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

/** The journal entry of a `journal` row. */
export function toJournal(row: JournalRow): JournalEntry {
  return {
    seq: row.seq,
    accountId: row.account_id,
    kind: row.kind as JournalKind,
    amount: BigInt(row.amount),
    requestId: row.request_id,
    keyId: row.key_id,
    memo: row.memo,
    createdAt: row.created_at,
    ...(row.neuron !== null && row.neuron !== undefined && { neuron: BigInt(row.neuron) }),
  }
}

/** The journal entry of a charge just written (no read back). */
export function chargeEntry(seq: number, c: Charge): JournalEntry {
  const e = { seq, accountId: c.accountId, kind: 'charge' as const, amount: c.cost, requestId: c.requestId, keyId: c.keyId, memo: '', createdAt: c.at }
  return c.neuron === null || c.neuron === undefined ? e : { ...e, neuron: c.neuron }
}

/** The roll-up row of a `usage_daily` row. */
export function toUsageRow(r: UsageDailyRow): UsageRow {
  return {
    day: r.day,
    model: r.model,
    keyId: r.key_id,
    requests: r.requests,
    promptTokens: r.prompt_tokens,
    completionTokens: r.completion_tokens,
    images: r.images,
    audioMs: r.audio_ms,
    cost: BigInt(r.cost),
  }
}

/**
 * Where a count of the daily roll-up stops (2^53 - 1): a sum saturates there rather than overflow a 64-bit
 * column or lose exactness in JavaScript. Each charge's counts are at most MAX_USAGE_COUNT (10^9), so it takes
 * nine million maximal charges on one (account, day, model, key) to get there.
 */
export const MAX_STORED_COUNT = Number.MAX_SAFE_INTEGER

/** `a + b` for roll-up counts, saturating at MAX_STORED_COUNT. */
export function addCounts(a: number, b: number): number {
  const sum = a + b
  return sum < MAX_STORED_COUNT ? sum : MAX_STORED_COUNT
}

function isCount(n: number): boolean {
  return Number.isInteger(n) && n >= 0 && n <= MAX_USAGE_COUNT
}

/** The error recordCharge gives a malformed charge before touching the database, or null. */
export function invalidCharge(c: Charge): RangeError | null {
  if (c.cost < 0n) return new RangeError(`a charge cannot be negative (got ${c.cost})`)
  if (c.requestId.length === 0) return new RangeError('a charge must name its request')
  if (c.neuron !== null && c.neuron !== undefined && c.neuron < 0n) return new RangeError(`a charge's neuron cannot be negative (got ${c.neuron})`)
  // Checked without building a list per charge (this runs for every charge on the commit path).
  if (isCount(c.promptTokens) && isCount(c.completionTokens) && isCount(c.images) && isCount(c.audioMs)) return null
  for (const what of ['promptTokens', 'completionTokens', 'images', 'audioMs'] as const) {
    if (!isCount(c[what])) return new RangeError(`${what} must be an integer from 0 to ${MAX_USAGE_COUNT} (got ${c[what]})`)
  }
  return null
}
