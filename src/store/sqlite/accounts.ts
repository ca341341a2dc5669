/** The AccountStore on SQLite: the `accounts` table (its money columns are the ledger's, sqlite/ledger.ts). */
import type { AccountRecord, AccountStore } from '../accounts.js'
import type { SqliteConnection } from './connection.js'

export interface AccountRow {
  id: string
  rate_limit: number | null
  deposited: string
  credited: string
  spent: string
  created_at: number
}

export const ACCOUNT_BY_ID = 'SELECT * FROM accounts WHERE id = ?'
export const INSERT_ACCOUNT = 'INSERT INTO accounts (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING'

export function toAccount(row: AccountRow): AccountRecord {
  return { id: row.id, rateLimit: row.rate_limit, createdAt: row.created_at }
}

function prepareStatements(conn: SqliteConnection) {
  const db = conn.db
  return {
    insert: db.prepare<[string, number]>(INSERT_ACCOUNT),
    byId: db.prepare<[string], AccountRow>(ACCOUNT_BY_ID),
    count: db.prepare<[], { n: number }>('SELECT count(*) AS n FROM accounts'),
    setRateLimit: db.prepare<[number | null, string]>('UPDATE accounts SET rate_limit = ? WHERE id = ?'),
  }
}

export class SqliteAccounts implements AccountStore {
  readonly #conn: SqliteConnection
  readonly #q: ReturnType<typeof prepareStatements>

  constructor(conn: SqliteConnection) {
    this.#conn = conn
    this.#q = prepareStatements(conn)
  }

  async ensureAccount(wallet: string, now: number): Promise<AccountRecord> {
    await this.#conn.writable()
    const { changes } = this.#q.insert.run(wallet, now)
    const account = toAccount(this.#q.byId.get(wallet)!)
    return changes === 0 ? account : this.#conn.flushed(account)
  }

  async getAccount(wallet: string): Promise<AccountRecord | null> {
    this.#conn.check()
    const row = this.#q.byId.get(wallet)
    return row === undefined ? null : toAccount(row)
  }

  async countAccounts(): Promise<number> {
    this.#conn.check()
    return this.#q.count.get()!.n
  }

  async setAccountRateLimit(wallet: string, limit: number | null): Promise<AccountRecord | null> {
    await this.#conn.writable()
    if (limit !== null && (!Number.isSafeInteger(limit) || limit <= 0)) throw new RangeError(`rate limit must be a positive integer (got ${limit})`)
    const { changes } = this.#q.setRateLimit.run(limit, wallet)
    return changes === 0 ? null : this.#conn.flushed(toAccount(this.#q.byId.get(wallet)!))
  }
}
