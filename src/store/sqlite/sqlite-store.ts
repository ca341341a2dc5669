/**
 * The embedded Store: one better-sqlite3 connection in WAL mode. Calls are synchronous underneath and resolve
 * at once; writes that read before they write take the write lock up front (BEGIN IMMEDIATE), so running
 * totals stay exact even with the operator CLI writing to the same file.
 */
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import {
  type AccountRecord,
  type AccountTotals,
  type ApiKeyPatch,
  type ApiKeyRecord,
  type Charge,
  type Credential,
  type JournalEntry,
  type JournalKind,
  type MgmtKeyRecord,
  type NewApiKey,
  type NewMgmtKey,
  type ResetPeriod,
  type Scope,
  type Store,
  type TrustMode,
  type UsageFilter,
  type UsageRow,
} from '../store.js'
import { ChargeThread } from './charge-thread.js'
import { ACCOUNT_SQL, INSERT_JOURNAL_SQL, prepareChargeStatements, writeCharges, type ChargeStatements } from './charges.js'
import { migrate } from './migrate.js'

export interface SqliteStoreOptions {
  /** Database file, or ':memory:'. Its directory is created if missing. */
  readonly path: string
  /** 'full' (default): commits are fsynced and survive a power cut; 'normal': they survive a process crash. */
  readonly synchronous?: 'full' | 'normal'
  /** How often to look for changes made by other processes (the external_changes row, migrations.ts). */
  readonly changePollMs?: number
  /**
   * Commit charge batches on a worker thread with its own connection (charge-thread.ts), started with the
   * store, so the event loop never waits for an fsync. Default false (the store's connection commits them);
   * an in-memory database, which no second connection can open, always commits them itself.
   */
  readonly chargeThread?: boolean
  readonly now?: () => number
}

interface AccountRow {
  id: string
  rate_limit: number | null
  deposited: string
  credited: string
  spent: string
  created_at: number
}

interface ApiKeyRow {
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
  allowed_models: string | null
  allowed_providers: string | null
  created_at: number
}

interface MgmtKeyRow {
  id: string
  account_id: string
  hash: string
  preview: string
  name: string
  scopes: string
  revoked_at: number | null
  created_at: number
  last_used_at: number | null
  last_source_ip: string | null
}

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

function toAccount(row: AccountRow): AccountRecord {
  return { id: row.id, rateLimit: row.rate_limit, createdAt: row.created_at }
}

function jsonList(text: string | null): string[] | null {
  return text === null ? null : (JSON.parse(text) as string[])
}

function listJson(list: readonly string[] | null | undefined): string | null {
  return list === null || list === undefined || list.length === 0 ? null : JSON.stringify(list)
}

function toApiKey(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    hash: row.hash,
    preview: row.preview,
    name: row.name,
    trustMode: row.trust_mode as TrustMode | null,
    revoked: row.revoked_at !== null,
    revokedAt: row.revoked_at,
    creditLimit: row.credit_limit === null ? null : BigInt(row.credit_limit),
    resetPeriod: row.reset_period as ResetPeriod,
    expiresAt: row.expires_at,
    allowedModels: jsonList(row.allowed_models),
    allowedProviders: jsonList(row.allowed_providers),
    createdAt: row.created_at,
  }
}

function toMgmtKey(row: MgmtKeyRow): MgmtKeyRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    hash: row.hash,
    preview: row.preview,
    name: row.name,
    scopes: row.scopes.length === 0 ? [] : (row.scopes.split(' ') as Scope[]),
    revoked: row.revoked_at !== null,
    revokedAt: row.revoked_at,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    lastSourceIp: row.last_source_ip,
  }
}

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

/** Every statement, prepared once. */
function prepareStatements(db: Database.Database) {
  return {
    insertAccount: db.prepare('INSERT INTO accounts (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING'),
    account: db.prepare<[string], AccountRow>(ACCOUNT_SQL),
    countAccounts: db.prepare<[], { n: number }>('SELECT count(*) AS n FROM accounts'),
    setRateLimit: db.prepare('UPDATE accounts SET rate_limit = ? WHERE id = ?'),
    setTotals: db.prepare('UPDATE accounts SET deposited = ?, credited = ?, spent = ? WHERE id = ?'),
    externalChanges: db.prepare<[], { seq: number }>('SELECT seq FROM external_changes WHERE id = 1'),

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
    mgmtKeys: db.prepare<[], MgmtKeyRow>('SELECT * FROM mgmt_keys ORDER BY created_at, rowid'),
    mgmtKeysOf: db.prepare<[string], MgmtKeyRow>('SELECT * FROM mgmt_keys WHERE account_id = ? ORDER BY created_at, rowid'),
    revokeMgmtKey: db.prepare('UPDATE mgmt_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?'),
    touchMgmtKey: db.prepare(`UPDATE mgmt_keys SET last_used_at = ?, last_source_ip = ?
      WHERE id = ? AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at <= ?)`),
    mgmtKeyByHash: db.prepare<[string], MgmtKeyRow>('SELECT * FROM mgmt_keys WHERE hash = ?'),

    insertJournal: db.prepare(INSERT_JOURNAL_SQL),
    journalEntry: db.prepare<[number | bigint], JournalRow>('SELECT * FROM journal WHERE seq = ?'),
    journal: db.prepare<[string], JournalRow>('SELECT * FROM journal WHERE account_id = ? ORDER BY seq'),
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

type Statements = ReturnType<typeof prepareStatements>

export class SqliteStore implements Store {
  readonly #db: Database.Database
  readonly #now: () => number
  readonly #pollMs: number
  readonly #listeners = new Set<() => void>()
  readonly #memory: boolean
  #poll: NodeJS.Timeout | null = null
  #changeSeq = 0
  #closed = false
  readonly #q: Statements
  readonly #chargeThread: ChargeThread | null
  #chargeStatements: ChargeStatements | null = null

  constructor(options: SqliteStoreOptions) {
    this.#now = options.now ?? Date.now
    this.#pollMs = options.changePollMs ?? 1000
    this.#memory = options.path === ':memory:' || options.path === ''
    if (!this.#memory) mkdirSync(dirname(options.path), { recursive: true })
    this.#db = new Database(options.path)
    try {
      this.#db.pragma('journal_mode = WAL')
      // FULL: a revoke or a charge that was acknowledged survives a power cut, not only a process crash.
      // NORMAL (opt-in): in WAL mode a commit still survives the process dying, without waiting for an fsync.
      this.#db.pragma(options.synchronous === 'normal' ? 'synchronous = NORMAL' : 'synchronous = FULL')
      this.#db.pragma('foreign_keys = ON')
      this.#db.pragma('busy_timeout = 5000')
      migrate(this.#db, this.#now())
      this.#q = prepareStatements(this.#db)
      this.#chargeThread =
        this.#memory || options.chargeThread !== true ? null : new ChargeThread({ path: options.path, synchronous: options.synchronous ?? 'full' })
    } catch (err) {
      this.#db.close()
      throw err
    }
  }

  #check(): void {
    if (this.#closed) throw new Error('store is closed')
  }

  /**
   * Runs one of this connection's writes as a transaction holding the write lock, and counts the
   * external_changes bumps its triggers made as already seen: listeners hear of other processes' writes only.
   * (When another process's change was still unseen, nothing is marked and the next poll reports it.)
   */
  #own<T>(write: () => T): T {
    return this.#db
      .transaction((): T => {
        const before = this.#q.externalChanges.get()!.seq
        const result = write()
        if (before === this.#changeSeq) this.#changeSeq = this.#q.externalChanges.get()!.seq
        return result
      })
      .immediate()
  }

  async ensureAccount(wallet: string, now: number): Promise<AccountRecord> {
    this.#check()
    return this.#own(() => {
      this.#q.insertAccount.run(wallet, now)
      return toAccount(this.#q.account.get(wallet)!)
    })
  }

  async getAccount(wallet: string): Promise<AccountRecord | null> {
    this.#check()
    const row = this.#q.account.get(wallet)
    return row === undefined ? null : toAccount(row)
  }

  async countAccounts(): Promise<number> {
    this.#check()
    return this.#q.countAccounts.get()!.n
  }

  async setAccountRateLimit(wallet: string, limit: number | null): Promise<AccountRecord | null> {
    this.#check()
    if (limit !== null && (!Number.isSafeInteger(limit) || limit <= 0)) throw new RangeError(`rate limit must be a positive integer (got ${limit})`)
    return this.#own(() => {
      const { changes } = this.#q.setRateLimit.run(limit, wallet)
      return changes === 0 ? null : toAccount(this.#q.account.get(wallet)!)
    })
  }

  async createApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    this.#check()
    return this.#own(() => {
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
      return toApiKey(this.#q.apiKey.get(key.id, key.accountId)!)
    })
  }

  async getApiKey(accountId: string, keyId: string): Promise<ApiKeyRecord | null> {
    this.#check()
    const row = this.#q.apiKey.get(keyId, accountId)
    return row === undefined ? null : toApiKey(row)
  }

  async listApiKeys(accountId: string): Promise<ApiKeyRecord[]> {
    this.#check()
    return this.#q.apiKeys.all(accountId).map(toApiKey)
  }

  async updateApiKey(accountId: string, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null> {
    this.#check()
    return this.#own((): ApiKeyRecord | null => {
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
  }

  async revokeApiKey(accountId: string, keyId: string, now: number): Promise<ApiKeyRecord | null> {
    this.#check()
    return this.#own(() => {
      const { changes } = this.#q.revokeApiKey.run(now, keyId, accountId)
      return changes === 0 ? null : toApiKey(this.#q.apiKey.get(keyId, accountId)!)
    })
  }

  async createMgmtKey(key: NewMgmtKey): Promise<MgmtKeyRecord> {
    this.#check()
    return this.#own(() => {
      this.#q.insertMgmtKey.run(key.id, key.accountId, key.hash, key.preview, key.name, key.scopes.join(' '), key.createdAt)
      return toMgmtKey(this.#q.mgmtKey.get(key.id)!)
    })
  }

  async listMgmtKeys(accountId?: string): Promise<MgmtKeyRecord[]> {
    this.#check()
    const rows = accountId === undefined ? this.#q.mgmtKeys.all() : this.#q.mgmtKeysOf.all(accountId)
    return rows.map(toMgmtKey)
  }

  async revokeMgmtKey(keyId: string, now: number): Promise<MgmtKeyRecord | null> {
    this.#check()
    return this.#own(() => {
      const { changes } = this.#q.revokeMgmtKey.run(now, keyId)
      return changes === 0 ? null : toMgmtKey(this.#q.mgmtKey.get(keyId)!)
    })
  }

  async touchMgmtKey(keyId: string, now: number, sourceIp: string, minIntervalMs: number): Promise<boolean> {
    this.#check()
    return this.#q.touchMgmtKey.run(now, sourceIp, keyId, now - minIntervalMs).changes === 1
  }

  async findCredential(hash: string): Promise<Credential | null> {
    this.#check()
    const api = this.#q.apiKeyByHash.get(hash)
    if (api !== undefined) return { kind: 'api', key: toApiKey(api), account: toAccount(this.#q.account.get(api.account_id)!) }
    const mgmt = this.#q.mgmtKeyByHash.get(hash)
    if (mgmt !== undefined) return { kind: 'mgmt', key: toMgmtKey(mgmt), account: toAccount(this.#q.account.get(mgmt.account_id)!) }
    return null
  }

  async addFunds(wallet: string, kind: 'deposit' | 'credit', amount: bigint, memo: string, now: number): Promise<JournalEntry> {
    this.#check()
    if (amount <= 0n) throw new RangeError(`a ${kind} must be positive (got ${amount})`)
    return this.#own((): JournalEntry => {
      this.#q.insertAccount.run(wallet, now)
      const row = this.#q.account.get(wallet)!
      const deposited = BigInt(row.deposited) + (kind === 'deposit' ? amount : 0n)
      const credited = BigInt(row.credited) + (kind === 'credit' ? amount : 0n)
      this.#q.setTotals.run(deposited.toString(), credited.toString(), row.spent, wallet)
      const { lastInsertRowid } = this.#q.insertJournal.run(wallet, kind, amount.toString(), null, null, memo, now)
      return toJournal(this.#q.journalEntry.get(lastInsertRowid)!)
    })
  }

  async recordCharge(c: Charge): Promise<JournalEntry> {
    const [outcome] = await this.recordCharges([c])
    if (outcome instanceof Error) throw outcome
    return outcome!
  }

  async recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]> {
    this.#check()
    if (this.#chargeThread !== null) return this.#chargeThread.write(charges)
    this.#chargeStatements ??= prepareChargeStatements(this.#db)
    return writeCharges(this.#db, this.#chargeStatements, charges)
  }

  async totals(accountId: string): Promise<AccountTotals> {
    this.#check()
    const row = this.#q.account.get(accountId)
    if (row === undefined) return { deposited: 0n, credited: 0n, spent: 0n }
    return { deposited: BigInt(row.deposited), credited: BigInt(row.credited), spent: BigInt(row.spent) }
  }

  async journal(accountId: string): Promise<JournalEntry[]> {
    this.#check()
    return this.#q.journal.all(accountId).map(toJournal)
  }

  async spendByKey(accountId: string, sinceDay: string | null): Promise<Map<string, bigint>> {
    this.#check()
    const out = new Map<string, bigint>()
    for (const row of this.#q.spendSince.all(accountId, sinceDay ?? '')) {
      out.set(row.key_id, (out.get(row.key_id) ?? 0n) + BigInt(row.cost))
    }
    return out
  }

  async usage(accountId: string, filter: UsageFilter): Promise<UsageRow[]> {
    this.#check()
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

  onExternalChange(listener: () => void): () => void {
    this.#listeners.add(listener)
    // Only another connection can change the file under us; an in-memory database has none.
    if (this.#poll === null && !this.#memory && !this.#closed) {
      this.#changeSeq = this.#q.externalChanges.get()!.seq
      this.#poll = setInterval(() => this.#pollChanges(), this.#pollMs)
      this.#poll.unref()
    }
    return () => {
      this.#listeners.delete(listener)
    }
  }

  /**
   * The external_changes row moves on every write to keys, accounts' funds and limits (triggers, whoever the
   * writer), never on a charge. A change this process made itself is seen too: its listeners drop a cache
   * or re-read totals once more, which costs a little and is never wrong.
   */
  #pollChanges(): void {
    if (this.#closed) return
    const seq = this.#q.externalChanges.get()!.seq
    if (seq === this.#changeSeq) return
    this.#changeSeq = seq
    for (const listener of this.#listeners) listener()
  }

  async ready(): Promise<void> {
    await this.#chargeThread?.ready()
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#poll !== null) clearInterval(this.#poll)
    this.#listeners.clear()
    // Batches already handed to the thread commit before it stops.
    await this.#chargeThread?.close()
    this.#db.close()
  }
}

/** Opens (creating and migrating if needed) the SQLite store at `options.path`. */
export function openSqliteStore(options: SqliteStoreOptions): SqliteStore {
  return new SqliteStore(options)
}
