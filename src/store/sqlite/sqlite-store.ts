/**
 * The embedded Store: one better-sqlite3 connection in WAL mode. Calls are synchronous underneath and resolve
 * at once; writes that read before they write take the write lock up front (BEGIN IMMEDIATE), so running
 * totals stay exact even with the operator CLI writing to the same file.
 */
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import { utcDay } from '../days.js'
import {
  StoreConflictError,
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
  type UsageFilter,
  type UsageRow,
} from '../store.js'
import type { TrustMode } from '../../vocabulary/trust.js'
import { migrate } from './migrate.js'

export interface SqliteStoreOptions {
  /** Database file, or ':memory:'. Its directory is created if missing. */
  readonly path: string
  /** 'full' (default): commits are fsynced and survive a power cut; 'normal': they survive a process crash. */
  readonly synchronous?: 'full' | 'normal'
  /** How often to look for commits by other processes (PRAGMA data_version). */
  readonly changePollMs?: number
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
    // The column's CHECK admits only the TRUST_MODES names.
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

function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: string }).code
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
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

/** Every statement, prepared once. */
function prepareStatements(db: Database.Database) {
  return {
    insertAccount: db.prepare('INSERT INTO accounts (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING'),
    account: db.prepare<[string], AccountRow>('SELECT * FROM accounts WHERE id = ?'),
    countAccounts: db.prepare<[], { n: number }>('SELECT count(*) AS n FROM accounts'),
    setRateLimit: db.prepare('UPDATE accounts SET rate_limit = ? WHERE id = ?'),
    setTotals: db.prepare('UPDATE accounts SET deposited = ?, credited = ?, spent = ? WHERE id = ?'),

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

    insertJournal: db.prepare(
      'INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    ),
    journalEntry: db.prepare<[number | bigint], JournalRow>('SELECT * FROM journal WHERE seq = ?'),
    journal: db.prepare<[string], JournalRow>('SELECT * FROM journal WHERE account_id = ? ORDER BY seq'),
    insertUsage: db.prepare(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, day, created_at,
      prompt_tokens, completion_tokens, images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    dailyRow: db.prepare<[string, string, string, string], UsageDailyRow>(
      'SELECT * FROM usage_daily WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?',
    ),
    insertDailySum: db.prepare(`INSERT INTO usage_daily (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens,
      images, audio_ms, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    addDailySum: db.prepare(`UPDATE usage_daily SET requests = requests + ?, prompt_tokens = prompt_tokens + ?,
      completion_tokens = completion_tokens + ?, images = images + ?, audio_ms = audio_ms + ?, cost = ?
      WHERE account_id = ? AND day = ? AND model = ? AND key_id = ?`),
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
  #dataVersion = 0
  #closed = false
  readonly #q: Statements

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
    } catch (err) {
      this.#db.close()
      throw err
    }
  }

  #check(): void {
    if (this.#closed) throw new Error('store is closed')
  }

  async ensureAccount(wallet: string, now: number): Promise<AccountRecord> {
    this.#check()
    this.#q.insertAccount.run(wallet, now)
    return toAccount(this.#q.account.get(wallet)!)
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
    const { changes } = this.#q.setRateLimit.run(limit, wallet)
    return changes === 0 ? null : toAccount(this.#q.account.get(wallet)!)
  }

  async createApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    this.#check()
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
    const update = this.#db.transaction((): ApiKeyRecord | null => {
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
    return update.immediate()
  }

  async revokeApiKey(accountId: string, keyId: string, now: number): Promise<ApiKeyRecord | null> {
    this.#check()
    const { changes } = this.#q.revokeApiKey.run(now, keyId, accountId)
    return changes === 0 ? null : toApiKey(this.#q.apiKey.get(keyId, accountId)!)
  }

  async createMgmtKey(key: NewMgmtKey): Promise<MgmtKeyRecord> {
    this.#check()
    this.#q.insertMgmtKey.run(key.id, key.accountId, key.hash, key.preview, key.name, key.scopes.join(' '), key.createdAt)
    return toMgmtKey(this.#q.mgmtKey.get(key.id)!)
  }

  async listMgmtKeys(accountId?: string): Promise<MgmtKeyRecord[]> {
    this.#check()
    const rows = accountId === undefined ? this.#q.mgmtKeys.all() : this.#q.mgmtKeysOf.all(accountId)
    return rows.map(toMgmtKey)
  }

  async revokeMgmtKey(keyId: string, now: number): Promise<MgmtKeyRecord | null> {
    this.#check()
    const { changes } = this.#q.revokeMgmtKey.run(now, keyId)
    return changes === 0 ? null : toMgmtKey(this.#q.mgmtKey.get(keyId)!)
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
    const add = this.#db.transaction((): JournalEntry => {
      this.#q.insertAccount.run(wallet, now)
      const row = this.#q.account.get(wallet)!
      const deposited = BigInt(row.deposited) + (kind === 'deposit' ? amount : 0n)
      const credited = BigInt(row.credited) + (kind === 'credit' ? amount : 0n)
      this.#q.setTotals.run(deposited.toString(), credited.toString(), row.spent, wallet)
      const { lastInsertRowid } = this.#q.insertJournal.run(wallet, kind, amount.toString(), null, null, memo, now)
      return toJournal(this.#q.journalEntry.get(lastInsertRowid)!)
    })
    return add.immediate()
  }

  async recordCharge(c: Charge): Promise<JournalEntry> {
    const [outcome] = await this.recordCharges([c])
    if (outcome instanceof Error) throw outcome
    return outcome!
  }

  async recordCharges(charges: readonly Charge[]): Promise<(JournalEntry | Error)[]> {
    this.#check()
    const out: (JournalEntry | Error)[] = new Array<JournalEntry | Error>(charges.length)
    const write = this.#db.transaction((): void => {
      // Totals and roll-up rows are added up here with BigInt and written once per batch: a batch of 256
      // charges on one account is one accounts UPDATE, not 256.
      const accounts = new Map<string, { row: AccountRow; spent: bigint }>()
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
          account = { row, spent: BigInt(row.spent) }
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
      for (const [id, a] of accounts) this.#q.setTotals.run(a.row.deposited, a.row.credited, a.spent.toString(), id)
    })
    write.immediate()
    return out
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
      this.#dataVersion = this.#db.pragma('data_version', { simple: true }) as number
      this.#poll = setInterval(() => this.#pollChanges(), this.#pollMs)
      this.#poll.unref()
    }
    return () => {
      this.#listeners.delete(listener)
    }
  }

  /** PRAGMA data_version moves only when another connection commits: exactly the changes we did not make. */
  #pollChanges(): void {
    if (this.#closed) return
    const version = this.#db.pragma('data_version', { simple: true }) as number
    if (version === this.#dataVersion) return
    this.#dataVersion = version
    for (const listener of this.#listeners) listener()
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#poll !== null) clearInterval(this.#poll)
    this.#listeners.clear()
    this.#db.close()
  }
}

/** Opens (creating and migrating if needed) the SQLite store at `options.path`. */
export function openSqliteStore(options: SqliteStoreOptions): SqliteStore {
  return new SqliteStore(options)
}
