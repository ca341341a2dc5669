/** The KeyStore on SQLite: the `api_keys` and `mgmt_keys` tables. */
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
import { ACCOUNT_BY_ID, toAccount, type AccountRow } from './accounts.js'
import type { SqliteConnection } from './connection.js'

type ApiKeyRow = StoredApiKeyRow<string>
type MgmtKeyRow = StoredMgmtKeyRow<string>

function jsonList(text: string | null): string[] | null {
  return text === null ? null : (JSON.parse(text) as string[])
}

function listJson(list: readonly string[] | null | undefined): string | null {
  return list === null || list === undefined || list.length === 0 ? null : JSON.stringify(list)
}

function toApiKey(row: ApiKeyRow): ApiKeyRecord {
  return apiKeyRecord(row, jsonList)
}

function toMgmtKey(row: MgmtKeyRow): MgmtKeyRecord {
  return mgmtKeyRecord(row, (scopes) => (scopes.length === 0 ? [] : (scopes.split(' ') as Scope[])))
}

function prepareStatements(conn: SqliteConnection) {
  const db = conn.db
  return {
    account: db.prepare<[string], AccountRow>(ACCOUNT_BY_ID),

    insertApiKey: db.prepare(`INSERT INTO api_keys (id, account_id, hash, preview, name, trust_mode, credit_limit, reset_period,
      expires_at, allowed_models, allowed_providers, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    apiKey: db.prepare<[string, string], ApiKeyRow>('SELECT * FROM api_keys WHERE id = ? AND account_id = ?'),
    apiKeys: db.prepare<[string], ApiKeyRow>('SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, rowid'),
    updateApiKey: db.prepare(`UPDATE api_keys SET name = ?, trust_mode = ?, credit_limit = ?, reset_period = ?, expires_at = ?,
      allowed_models = ?, allowed_providers = ? WHERE id = ? AND account_id = ?`),
    revokeApiKey: db.prepare('UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ? AND account_id = ?'),
    apiKeyByHash: db.prepare<[string], ApiKeyRow>('SELECT * FROM api_keys WHERE hash = ?'),

    insertMgmtKey: db.prepare(
      'INSERT INTO mgmt_keys (id, account_id, hash, preview, name, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    ),
    mgmtKey: db.prepare<[string], MgmtKeyRow>('SELECT * FROM mgmt_keys WHERE id = ?'),
    mgmtKeyOf: db.prepare<[string, string], MgmtKeyRow>('SELECT * FROM mgmt_keys WHERE id = ? AND account_id = ?'),
    updateMgmtKey: db.prepare('UPDATE mgmt_keys SET name = ?, scopes = ? WHERE id = ? AND account_id = ?'),
    mgmtKeys: db.prepare<[], MgmtKeyRow>('SELECT * FROM mgmt_keys ORDER BY created_at, rowid'),
    mgmtKeysOf: db.prepare<[string], MgmtKeyRow>('SELECT * FROM mgmt_keys WHERE account_id = ? ORDER BY created_at, rowid'),
    revokeMgmtKey: db.prepare('UPDATE mgmt_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?'),
    touchMgmtKey: db.prepare(`UPDATE mgmt_keys SET last_used_at = ?, last_source_ip = ?
      WHERE id = ? AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at <= ?)`),
    mgmtKeyByHash: db.prepare<[string], MgmtKeyRow>('SELECT * FROM mgmt_keys WHERE hash = ?'),
  }
}

export class SqliteKeys implements KeyStore {
  readonly #conn: SqliteConnection
  readonly #q: ReturnType<typeof prepareStatements>

  constructor(conn: SqliteConnection) {
    this.#conn = conn
    this.#q = prepareStatements(conn)
  }

  async createApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    await this.#conn.writable()
    this.#q.insertApiKey.run(
      key.id,
      key.accountId,
      key.hash,
      key.preview,
      key.name,
      key.trustMode,
      key.creditLimit === null ? null : key.creditLimit.toString(),
      key.resetPeriod,
      key.expiresAt,
      listJson(key.allowedModels),
      listJson(key.allowedProviders),
      key.createdAt,
    )
    return this.#conn.flushed(toApiKey(this.#q.apiKey.get(key.id, key.accountId)!))
  }

  async getApiKey(accountId: string, keyId: string): Promise<ApiKeyRecord | null> {
    this.#conn.check()
    const row = this.#q.apiKey.get(keyId, accountId)
    return row === undefined ? null : toApiKey(row)
  }

  async listApiKeys(accountId: string): Promise<ApiKeyRecord[]> {
    this.#conn.check()
    return this.#q.apiKeys.all(accountId).map(toApiKey)
  }

  async updateApiKey(accountId: string, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null> {
    await this.#conn.writable()
    const update = this.#conn.db.transaction((): ApiKeyRecord | null => {
      const row = this.#q.apiKey.get(keyId, accountId)
      if (row === undefined) return null
      const old = toApiKey(row)
      const creditLimit = patch.creditLimit === undefined ? old.creditLimit : patch.creditLimit
      this.#q.updateApiKey.run(
        patch.name ?? old.name,
        patch.trustMode === undefined ? old.trustMode : patch.trustMode,
        creditLimit === null ? null : creditLimit.toString(),
        patch.resetPeriod ?? old.resetPeriod,
        patch.expiresAt === undefined ? old.expiresAt : patch.expiresAt,
        listJson(patch.allowedModels === undefined ? old.allowedModels : patch.allowedModels),
        listJson(patch.allowedProviders === undefined ? old.allowedProviders : patch.allowedProviders),
        keyId,
        accountId,
      )
      return toApiKey(this.#q.apiKey.get(keyId, accountId)!)
    })
    return this.#conn.flushed(update.immediate())
  }

  async revokeApiKey(accountId: string, keyId: string, now: number): Promise<ApiKeyRecord | null> {
    await this.#conn.writable()
    const { changes } = this.#q.revokeApiKey.run(now, keyId, accountId)
    return changes === 0 ? null : this.#conn.flushed(toApiKey(this.#q.apiKey.get(keyId, accountId)!))
  }

  async createMgmtKey(key: NewMgmtKey): Promise<MgmtKeyRecord> {
    await this.#conn.writable()
    this.#q.insertMgmtKey.run(key.id, key.accountId, key.hash, key.preview, key.name, key.scopes.join(' '), key.createdAt)
    return this.#conn.flushed(toMgmtKey(this.#q.mgmtKey.get(key.id)!))
  }

  async getMgmtKey(accountId: string, keyId: string): Promise<MgmtKeyRecord | null> {
    this.#conn.check()
    const row = this.#q.mgmtKeyOf.get(keyId, accountId)
    return row === undefined ? null : toMgmtKey(row)
  }

  async updateMgmtKey(accountId: string, keyId: string, patch: MgmtKeyPatch): Promise<MgmtKeyRecord | null> {
    await this.#conn.writable()
    const update = this.#conn.db.transaction((): MgmtKeyRecord | null => {
      const row = this.#q.mgmtKeyOf.get(keyId, accountId)
      if (row === undefined) return null
      const old = toMgmtKey(row)
      const scopes = patch.scopes === undefined ? old.scopes : [...new Set(patch.scopes)]
      this.#q.updateMgmtKey.run(patch.name ?? old.name, scopes.join(' '), keyId, accountId)
      return toMgmtKey(this.#q.mgmtKeyOf.get(keyId, accountId)!)
    })
    return update.immediate()
  }

  async listMgmtKeys(accountId?: string): Promise<MgmtKeyRecord[]> {
    this.#conn.check()
    const rows = accountId === undefined ? this.#q.mgmtKeys.all() : this.#q.mgmtKeysOf.all(accountId)
    return rows.map(toMgmtKey)
  }

  async revokeMgmtKey(keyId: string, now: number): Promise<MgmtKeyRecord | null> {
    await this.#conn.writable()
    const { changes } = this.#q.revokeMgmtKey.run(now, keyId)
    return changes === 0 ? null : this.#conn.flushed(toMgmtKey(this.#q.mgmtKey.get(keyId)!))
  }

  async touchMgmtKey(keyId: string, now: number, sourceIp: string, minIntervalMs: number): Promise<boolean> {
    await this.#conn.writable()
    return this.#q.touchMgmtKey.run(now, sourceIp, keyId, now - minIntervalMs).changes === 1
  }

  async findCredential(hash: string): Promise<Credential | null> {
    this.#conn.check()
    const api = this.#q.apiKeyByHash.get(hash)
    if (api !== undefined) return { kind: 'api', key: toApiKey(api), account: toAccount(this.#q.account.get(api.account_id)!) }
    const mgmt = this.#q.mgmtKeyByHash.get(hash)
    if (mgmt !== undefined) return { kind: 'mgmt', key: toMgmtKey(mgmt), account: toAccount(this.#q.account.get(mgmt.account_id)!) }
    return null
  }
}
