/**
 * The durable state of the router behind one interface (DESIGN.md §1): accounts (wallet addresses), `sk-` API
 * keys, `mk-` management keys, and the ledger (an append-only journal of deposits, credits and charges, plus
 * per-request usage records and their daily roll-up). SQLite is the embedded implementation; a PostgreSQL one
 * must pass the same contract suite (test/store/contract.ts).
 *
 * Every method returns a Promise so that a networked store fits; callers on the hot path never await one on a
 * cache hit (src/auth/key-cache.ts). Money is bigint atto-USD everywhere in this interface; implementations
 * store it as exact integers (SQLite: TEXT, PostgreSQL: NUMERIC), never as floating point, and never let the
 * database add it up.
 */
import type { TrustMode } from '../vocabulary/trust.js'

export type ResetPeriod = 'never' | 'daily' | 'weekly' | 'monthly'
export const RESET_PERIODS: readonly ResetPeriod[] = ['never', 'daily', 'weekly', 'monthly']

export type Scope = 'account:read' | 'keys:read' | 'keys:create' | 'keys:manage'
export const SCOPES: readonly Scope[] = ['account:read', 'keys:read', 'keys:create', 'keys:manage']

/** Kinds of journal entries. Deposits and credits add funds, charges spend them. */
export type JournalKind = 'deposit' | 'credit' | 'charge'

export interface AccountRecord {
  /** The wallet address, lower-case 0x + 40 hex. */
  readonly id: string
  /** Requests per minute for this account; null = the configured default. */
  readonly rateLimit: number | null
  /** Epoch ms. */
  readonly createdAt: number
}

export interface ApiKeyRecord {
  /** UUID. */
  readonly id: string
  readonly accountId: string
  /** SHA-256 of the whole secret, base64url (43 chars). The secret itself is never stored. */
  readonly hash: string
  readonly preview: string
  readonly name: string
  readonly trustMode: TrustMode | null
  readonly revoked: boolean
  /** Epoch ms, null while active. */
  readonly revokedAt: number | null
  readonly creditLimit: bigint | null
  readonly resetPeriod: ResetPeriod
  /** Epoch ms, null = never expires. */
  readonly expiresAt: number | null
  /** null = unrestricted (never an empty list). */
  readonly allowedModels: readonly string[] | null
  /** Lower-case provider addresses; null = unrestricted. */
  readonly allowedProviders: readonly string[] | null
  readonly createdAt: number
}

export interface MgmtKeyRecord {
  readonly id: string
  readonly accountId: string
  readonly hash: string
  readonly preview: string
  readonly name: string
  readonly scopes: readonly Scope[]
  readonly revoked: boolean
  readonly revokedAt: number | null
  readonly createdAt: number
  readonly lastUsedAt: number | null
  readonly lastSourceIp: string | null
}

/** What a secret's hash resolves to: the key (revoked or not) and its account. */
export type Credential =
  | { readonly kind: 'api'; readonly key: ApiKeyRecord; readonly account: AccountRecord }
  | { readonly kind: 'mgmt'; readonly key: MgmtKeyRecord; readonly account: AccountRecord }

/** A key as created: the record before anything revokes it. */
export type NewApiKey = Omit<ApiKeyRecord, 'revoked' | 'revokedAt'>

/** Fields of an API key that an update may change; absent fields are left alone. */
export type ApiKeyPatch = Partial<
  Pick<ApiKeyRecord, 'name' | 'trustMode' | 'creditLimit' | 'resetPeriod' | 'expiresAt' | 'allowedModels' | 'allowedProviders'>
>

/** A management key as created: not revoked, never used yet. */
export type NewMgmtKey = Omit<MgmtKeyRecord, 'revoked' | 'revokedAt' | 'lastUsedAt' | 'lastSourceIp'>

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
}

/** The running totals of an account's journal (what is available: billing/available.ts). */
export interface AccountTotals {
  readonly deposited: bigint
  readonly credited: bigint
  readonly spent: bigint
}

/** One billed request: the usage record, its journal charge and the daily roll-up, written together. */
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

/** A write that would break a uniqueness rule of the store (e.g. a second charge for one request). */
export class StoreConflictError extends Error {
  override name = 'StoreConflictError'
}

export interface Store {
  // Accounts
  /** The account, created (no funds, default rate limit) if it does not exist yet. */
  ensureAccount(wallet: string, now: number): Promise<AccountRecord>
  getAccount(wallet: string): Promise<AccountRecord | null>
  countAccounts(): Promise<number>
  /** Sets (or with null, clears) the account's rate-limit override; null when there is no such account. */
  setAccountRateLimit(wallet: string, limit: number | null): Promise<AccountRecord | null>

  // sk- keys
  createApiKey(key: NewApiKey): Promise<ApiKeyRecord>
  /** The key if it belongs to `accountId`; a key of another account is null, as an unknown one. */
  getApiKey(accountId: string, keyId: string): Promise<ApiKeyRecord | null>
  /** Every key of the account, revoked ones included, oldest first. */
  listApiKeys(accountId: string): Promise<ApiKeyRecord[]>
  updateApiKey(accountId: string, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null>
  /** Marks the key revoked (once: a second revoke keeps the first time). */
  revokeApiKey(accountId: string, keyId: string, now: number): Promise<ApiKeyRecord | null>

  // mk- keys
  createMgmtKey(key: NewMgmtKey): Promise<MgmtKeyRecord>
  /** All management keys, or only those of one account; oldest first. */
  listMgmtKeys(accountId?: string): Promise<MgmtKeyRecord[]>
  revokeMgmtKey(keyId: string, now: number): Promise<MgmtKeyRecord | null>
  /**
   * Records a successful use, unless one was recorded less than `minIntervalMs` before `now` (spec §8: at
   * most once per key per 60 s, whichever process wrote it). True when written.
   */
  touchMgmtKey(keyId: string, now: number, sourceIp: string, minIntervalMs: number): Promise<boolean>

  /** Resolves a secret's hash to its key, of either kind, with the account (revoked keys too). */
  findCredential(hash: string): Promise<Credential | null>

  // Ledger
  /** Appends a deposit or credit to the journal and the account's totals (creating the account if needed). */
  addFunds(wallet: string, kind: 'deposit' | 'credit', amount: bigint, memo: string, now: number): Promise<JournalEntry>
  /**
   * Bills one request: usage record, journal charge, daily roll-up and totals in one transaction. A request id
   * already billed throws StoreConflictError and changes nothing (no double charge).
   */
  recordCharge(charge: Charge): Promise<JournalEntry>
  /**
   * Group commit: bills every charge of the batch in ONE transaction (one durable commit for all). Each charge
   * keeps the semantics of recordCharge on its own: the outcome at index i is its journal entry, or the error
   * recordCharge would have thrown for it (StoreConflictError for a request already billed, inside the batch or
   * before it), and such a charge changes nothing while the others are still written. The promise rejects only
   * when the transaction itself failed, and then nothing of the batch was written.
   */
  recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]>
  totals(accountId: string): Promise<AccountTotals>
  /** The journal of an account, oldest first. */
  journal(accountId: string): Promise<JournalEntry[]>
  /** Spend per key from `sinceDay` (inclusive, YYYY-MM-DD; null = all time). Keys with no spend are absent. */
  spendByKey(accountId: string, sinceDay: string | null): Promise<Map<string, bigint>>
  /** Daily roll-up rows, ordered by day, model, key. */
  usage(accountId: string, filter: UsageFilter): Promise<UsageRow[]>

  /**
   * Calls `listener` when another process (the operator CLI, another replica) changed the store, so caches
   * can drop what they hold. Returns the unsubscribe function.
   */
  onExternalChange(listener: () => void): () => void
  close(): Promise<void>
}
