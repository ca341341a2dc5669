/**
 * `sk-` API keys and `mk-` management keys: the part of the Store (store.ts) that authentication reads on a
 * key-cache miss and the key endpoints and the operator CLI write. A key belongs to one account for life, and
 * its secret is never stored, only its hash.
 */
import type { TrustMode } from '../vocabulary/trust.js'
import type { AccountRecord } from './accounts.js'

export type ResetPeriod = 'never' | 'daily' | 'weekly' | 'monthly'
export const RESET_PERIODS: readonly ResetPeriod[] = ['never', 'daily', 'weekly', 'monthly']

export type Scope = 'account:read' | 'keys:read' | 'keys:create' | 'keys:manage'
export const SCOPES: readonly Scope[] = ['account:read', 'keys:read', 'keys:create', 'keys:manage']

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

/** Fields of a management key that an update may change; absent fields are left alone. */
export type MgmtKeyPatch = Partial<Pick<MgmtKeyRecord, 'name' | 'scopes'>>

/** A management key as created: not revoked, never used yet. */
export type NewMgmtKey = Omit<MgmtKeyRecord, 'revoked' | 'revokedAt' | 'lastUsedAt' | 'lastSourceIp'>

export interface KeyStore {
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
  /** The key if it belongs to `accountId`; a key of another account is null, as an unknown one. */
  getMgmtKey(accountId: string, keyId: string): Promise<MgmtKeyRecord | null>
  /** Renames the key or changes its scopes (revoked keys too: the record stays accurate); null if not the account's. */
  updateMgmtKey(accountId: string, keyId: string, patch: MgmtKeyPatch): Promise<MgmtKeyRecord | null>
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
}

/**
 * An `api_keys` row as both stores read it; `L` is how the engine holds a list (SQLite: JSON text, PostgreSQL:
 * a text[]), decoded by the store.
 */
export interface ApiKeyRow<L> {
  id: string
  account_id: string
  hash: string
  preview: string
  name: string
  trust_mode: string | null
  revoked_at: number | null
  credit_limit: string | null
  reset_period: string
  expires_at: number | null
  allowed_models: L | null
  allowed_providers: L | null
  created_at: number
}

/** A `mgmt_keys` row as both stores read it; `S` is how the engine holds the scopes (SQLite: text, PostgreSQL: text[]). */
export interface MgmtKeyRow<S> {
  id: string
  account_id: string
  hash: string
  preview: string
  name: string
  scopes: S
  revoked_at: number | null
  created_at: number
  last_used_at: number | null
  last_source_ip: string | null
}

/** The record of an `api_keys` row, its lists decoded by `list`. */
export function apiKeyRecord<L>(row: ApiKeyRow<L>, list: (stored: L | null) => string[] | null): ApiKeyRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    hash: row.hash,
    preview: row.preview,
    name: row.name,
    // The column's CHECK admits only the TRUST_MODES names.
    trustMode: row.trust_mode as TrustMode | null,
    revoked: row.revoked_at !== null,
    revokedAt: row.revoked_at,
    creditLimit: row.credit_limit === null ? null : BigInt(row.credit_limit),
    resetPeriod: row.reset_period as ResetPeriod,
    expiresAt: row.expires_at,
    allowedModels: list(row.allowed_models),
    allowedProviders: list(row.allowed_providers),
    createdAt: row.created_at,
  }
}

/** The record of a `mgmt_keys` row, its scopes decoded by `scopes`. */
export function mgmtKeyRecord<S>(row: MgmtKeyRow<S>, scopes: (stored: S) => Scope[]): MgmtKeyRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    hash: row.hash,
    preview: row.preview,
    name: row.name,
    scopes: scopes(row.scopes),
    revoked: row.revoked_at !== null,
    revokedAt: row.revoked_at,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    lastSourceIp: row.last_source_ip,
  }
}
