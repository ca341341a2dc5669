/**
 * The KeyStore on PostgreSQL: the `api_keys` and `mgmt_keys` tables. Every write that changes a key records a
 * 'key' change in the same statement (a CTE on the write's RETURNING), so the change exists exactly when the
 * write committed; the audit write (touchMgmtKey) records none.
 */
import {
  apiKeyRecord,
  mgmtKeyRecord,
  type ApiKeyPatch,
  type ApiKeyRecord,
  type ApiKeyRow as StoredApiKeyRow,
  type Credential,
  type KeyStore,
  type MgmtKeyPatch,
  type MgmtKeyRecord,
  type MgmtKeyRow as StoredMgmtKeyRow,
  type NewApiKey,
  type NewMgmtKey,
  type Scope,
} from '../keys.js'
import { toAccount } from './accounts.js'
import type { PgConnection } from './connection.js'

type ApiKeyRow = StoredApiKeyRow<string[]>
type MgmtKeyRow = StoredMgmtKeyRow<string[]>

type Changed<R> = R & { change_seq: number | null }
type WithAccount<R> = R & { account_rate_limit: number | null; account_created_at: number }

const API_COLUMNS = `id, account_id, hash, preview, name, trust_mode, revoked_at, credit_limit, reset_period, expires_at,
  allowed_models, allowed_providers, created_at`
const MGMT_COLUMNS = 'id, account_id, hash, preview, name, scopes, revoked_at, created_at, last_used_at, last_source_ip'

/** A write of one key (`written`: its RETURNING) and its 'key' change, in one statement. */
const keyChange = (write: string, origin: string, columns: string): string => `WITH written AS (${write} RETURNING ${columns}),
  changed AS (INSERT INTO changes (kind, account_id, key_id, origin) SELECT 'key', account_id, id, ${origin} FROM written RETURNING seq)
  SELECT ${columns}, (SELECT seq FROM changed) AS change_seq FROM written`

export const KEY_SQL = {
  createApiKey: keyChange(
    `INSERT INTO api_keys (id, account_id, hash, preview, name, trust_mode, credit_limit, reset_period, expires_at,
      allowed_models, allowed_providers, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
    '$13',
    API_COLUMNS,
  ),
  apiKey: `SELECT ${API_COLUMNS} FROM api_keys WHERE id = $1 AND account_id = $2`,
  apiKeys: `SELECT ${API_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at, ord`,
  /**
   * Each field changes only when its flag is true (absent from the patch: left as it is), in one statement: no
   * read-then-write, so two concurrent updates of different fields both land.
   */
  updateApiKey: keyChange(
    `UPDATE api_keys SET
      name = CASE WHEN $3 THEN $4 ELSE name END,
      trust_mode = CASE WHEN $5 THEN $6 ELSE trust_mode END,
      credit_limit = CASE WHEN $7 THEN $8::numeric ELSE credit_limit END,
      reset_period = CASE WHEN $9 THEN $10 ELSE reset_period END,
      expires_at = CASE WHEN $11 THEN $12::bigint ELSE expires_at END,
      allowed_models = CASE WHEN $13 THEN $14::text[] ELSE allowed_models END,
      allowed_providers = CASE WHEN $15 THEN $16::text[] ELSE allowed_providers END
    WHERE id = $1 AND account_id = $2`,
    '$17',
    API_COLUMNS,
  ),
  /** A second revoke keeps the first time (coalesce), and is still recorded as a change: harmless, and never missed. */
  revokeApiKey: keyChange('UPDATE api_keys SET revoked_at = coalesce(revoked_at, $3) WHERE id = $1 AND account_id = $2', '$4', API_COLUMNS),
  apiKeyByHash: `SELECT k.id, k.account_id, k.hash, k.preview, k.name, k.trust_mode, k.revoked_at, k.credit_limit, k.reset_period,
      k.expires_at, k.allowed_models, k.allowed_providers, k.created_at,
      a.rate_limit AS account_rate_limit, a.created_at AS account_created_at
    FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = $1`,

  createMgmtKey: keyChange(
    'INSERT INTO mgmt_keys (id, account_id, hash, preview, name, scopes, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)',
    '$8',
    MGMT_COLUMNS,
  ),
  mgmtKeyOf: `SELECT ${MGMT_COLUMNS} FROM mgmt_keys WHERE id = $1 AND account_id = $2`,
  updateMgmtKey: keyChange(
    `UPDATE mgmt_keys SET name = CASE WHEN $3 THEN $4 ELSE name END, scopes = CASE WHEN $5 THEN $6::text[] ELSE scopes END
    WHERE id = $1 AND account_id = $2`,
    '$7',
    MGMT_COLUMNS,
  ),
  mgmtKeys: `SELECT ${MGMT_COLUMNS} FROM mgmt_keys ORDER BY created_at, ord`,
  mgmtKeysOf: `SELECT ${MGMT_COLUMNS} FROM mgmt_keys WHERE account_id = $1 ORDER BY created_at, ord`,
  revokeMgmtKey: keyChange('UPDATE mgmt_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1', '$3', MGMT_COLUMNS),
  /**
   * At most one recorded use per key per interval, whichever process writes (spec §8): the condition on
   * last_used_at is checked on the row as it stands under its lock, so of two concurrent touches in one interval
   * only one writes. Never on a revoked key. Not a change: no cache holds these columns.
   */
  touchMgmtKey: `UPDATE mgmt_keys SET last_used_at = $2, last_source_ip = $3
    WHERE id = $1 AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at <= $4)`,
  mgmtKeyByHash: `SELECT m.id, m.account_id, m.hash, m.preview, m.name, m.scopes, m.revoked_at, m.created_at, m.last_used_at,
      m.last_source_ip, a.rate_limit AS account_rate_limit, a.created_at AS account_created_at
    FROM mgmt_keys m JOIN accounts a ON a.id = m.account_id WHERE m.hash = $1`,
} as const

/** null for an absent or empty list: the store keeps "unrestricted" as NULL, never as an empty array. */
function listParam(list: readonly string[] | null | undefined): string[] | null {
  return list === null || list === undefined || list.length === 0 ? null : [...list]
}

function toApiKey(row: ApiKeyRow): ApiKeyRecord {
  return apiKeyRecord(row, (list) => list)
}

function toMgmtKey(row: MgmtKeyRow): MgmtKeyRecord {
  return mgmtKeyRecord(row, (scopes) => scopes as Scope[])
}

export class PgKeys implements KeyStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  /** Runs a write of KEY_SQL that records a change; the written row, or null when it matched none. */
  async #write<R>(sql: string, values: unknown[]): Promise<R | null> {
    const { rows } = await this.#conn.query<Changed<R & object>>(sql, values)
    const row = rows[0]
    if (row === undefined) return null
    this.#conn.noteOwnChange(row.change_seq)
    return row
  }

  async createApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    const row = await this.#write<ApiKeyRow>(KEY_SQL.createApiKey, [
      key.id,
      key.accountId,
      key.hash,
      key.preview,
      key.name,
      key.trustMode,
      key.creditLimit === null ? null : key.creditLimit.toString(),
      key.resetPeriod,
      key.expiresAt,
      listParam(key.allowedModels),
      listParam(key.allowedProviders),
      key.createdAt,
      this.#conn.origin,
    ])
    return toApiKey(row!)
  }

  async getApiKey(accountId: string, keyId: string): Promise<ApiKeyRecord | null> {
    const { rows } = await this.#conn.query<ApiKeyRow>(KEY_SQL.apiKey, [keyId, accountId])
    return rows[0] === undefined ? null : toApiKey(rows[0])
  }

  async listApiKeys(accountId: string): Promise<ApiKeyRecord[]> {
    const { rows } = await this.#conn.query<ApiKeyRow>(KEY_SQL.apiKeys, [accountId])
    return rows.map(toApiKey)
  }

  async updateApiKey(accountId: string, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null> {
    // name and resetPeriod: null is "absent" (they cannot be cleared), as in the SQLite store.
    const name = patch.name ?? null
    const reset = patch.resetPeriod ?? null
    const row = await this.#write<ApiKeyRow>(KEY_SQL.updateApiKey, [
      keyId,
      accountId,
      name !== null,
      name,
      patch.trustMode !== undefined,
      patch.trustMode ?? null,
      patch.creditLimit !== undefined,
      patch.creditLimit === undefined || patch.creditLimit === null ? null : patch.creditLimit.toString(),
      reset !== null,
      reset,
      patch.expiresAt !== undefined,
      patch.expiresAt ?? null,
      patch.allowedModels !== undefined,
      listParam(patch.allowedModels),
      patch.allowedProviders !== undefined,
      listParam(patch.allowedProviders),
      this.#conn.origin,
    ])
    return row === null ? null : toApiKey(row)
  }

  async revokeApiKey(accountId: string, keyId: string, now: number): Promise<ApiKeyRecord | null> {
    const row = await this.#write<ApiKeyRow>(KEY_SQL.revokeApiKey, [keyId, accountId, now, this.#conn.origin])
    return row === null ? null : toApiKey(row)
  }

  async createMgmtKey(key: NewMgmtKey): Promise<MgmtKeyRecord> {
    const row = await this.#write<MgmtKeyRow>(KEY_SQL.createMgmtKey, [
      key.id,
      key.accountId,
      key.hash,
      key.preview,
      key.name,
      [...key.scopes],
      key.createdAt,
      this.#conn.origin,
    ])
    return toMgmtKey(row!)
  }

  async getMgmtKey(accountId: string, keyId: string): Promise<MgmtKeyRecord | null> {
    const { rows } = await this.#conn.query<MgmtKeyRow>(KEY_SQL.mgmtKeyOf, [keyId, accountId])
    return rows[0] === undefined ? null : toMgmtKey(rows[0])
  }

  async updateMgmtKey(accountId: string, keyId: string, patch: MgmtKeyPatch): Promise<MgmtKeyRecord | null> {
    const name = patch.name ?? null
    const scopes = patch.scopes === undefined ? null : [...new Set(patch.scopes)]
    const row = await this.#write<MgmtKeyRow>(KEY_SQL.updateMgmtKey, [keyId, accountId, name !== null, name, scopes !== null, scopes, this.#conn.origin])
    return row === null ? null : toMgmtKey(row)
  }

  async listMgmtKeys(accountId?: string): Promise<MgmtKeyRecord[]> {
    const { rows } =
      accountId === undefined
        ? await this.#conn.query<MgmtKeyRow>(KEY_SQL.mgmtKeys)
        : await this.#conn.query<MgmtKeyRow>(KEY_SQL.mgmtKeysOf, [accountId])
    return rows.map(toMgmtKey)
  }

  async revokeMgmtKey(keyId: string, now: number): Promise<MgmtKeyRecord | null> {
    const row = await this.#write<MgmtKeyRow>(KEY_SQL.revokeMgmtKey, [keyId, now, this.#conn.origin])
    return row === null ? null : toMgmtKey(row)
  }

  async touchMgmtKey(keyId: string, now: number, sourceIp: string, minIntervalMs: number): Promise<boolean> {
    const { rowCount } = await this.#conn.query(KEY_SQL.touchMgmtKey, [keyId, now, sourceIp, now - minIntervalMs])
    return rowCount === 1
  }

  async findCredential(hash: string): Promise<Credential | null> {
    const api = await this.#conn.query<WithAccount<ApiKeyRow>>(KEY_SQL.apiKeyByHash, [hash])
    const a = api.rows[0]
    if (a !== undefined) {
      return { kind: 'api', key: toApiKey(a), account: toAccount({ id: a.account_id, rate_limit: a.account_rate_limit, created_at: a.account_created_at }) }
    }
    const mgmt = await this.#conn.query<WithAccount<MgmtKeyRow>>(KEY_SQL.mgmtKeyByHash, [hash])
    const m = mgmt.rows[0]
    if (m !== undefined) {
      return { kind: 'mgmt', key: toMgmtKey(m), account: toAccount({ id: m.account_id, rate_limit: m.account_rate_limit, created_at: m.account_created_at }) }
    }
    return null
  }
}
