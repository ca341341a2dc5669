/**
 * The AccountStore on PostgreSQL: the `accounts` table (its money columns are the ledger's, postgres/ledger.ts).
 * Each write that changes an account records a `changes` row in the same statement (postgres/changes.ts).
 */
import type { AccountRecord, AccountStore } from '../accounts.js'
import type { PgConnection } from './connection.js'

export interface AccountRow {
  id: string
  rate_limit: number | null
  created_at: number
}

export const ACCOUNT_SQL = {
  /**
   * Creates the account if it does not exist, recording an 'account' change only when it did not. The row comes
   * from the insert's RETURNING when it was created (the statement's own snapshot cannot see it), else from the
   * table; a concurrent creator that committed after this statement's snapshot leaves neither, and the caller
   * runs it again.
   */
  ensure: `WITH created AS (
      INSERT INTO accounts (id, created_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING
      RETURNING id, rate_limit, created_at
    ), changed AS (
      INSERT INTO changes (kind, account_id, origin) SELECT 'account', id, $3 FROM created RETURNING seq
    )
    SELECT id, rate_limit, created_at, (SELECT seq FROM changed) AS change_seq FROM created
    UNION ALL
    SELECT id, rate_limit, created_at, NULL FROM accounts WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM created)`,
  byId: 'SELECT id, rate_limit, created_at FROM accounts WHERE id = $1',
  count: 'SELECT count(*)::int AS n FROM accounts',
  /** Always recorded as a change, even to the same value: an old value read here could be stale under a concurrent update. */
  setRateLimit: `WITH updated AS (
      UPDATE accounts SET rate_limit = $2 WHERE id = $1 RETURNING id, rate_limit, created_at
    ), changed AS (
      INSERT INTO changes (kind, account_id, origin) SELECT 'account', id, $3 FROM updated RETURNING seq
    )
    SELECT id, rate_limit, created_at, (SELECT seq FROM changed) AS change_seq FROM updated`,
} as const

export function toAccount(row: AccountRow): AccountRecord {
  return { id: row.id, rateLimit: row.rate_limit, createdAt: row.created_at }
}

export class PgAccounts implements AccountStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  async ensureAccount(wallet: string, now: number): Promise<AccountRecord> {
    // Twice at most in practice: a second run has a snapshot that sees the concurrent creator's commit.
    for (let tries = 0; tries < 5; tries++) {
      const { rows } = await this.#conn.query<AccountRow & { change_seq: number | null }>(ACCOUNT_SQL.ensure, [wallet, now, this.#conn.origin])
      const row = rows[0]
      if (row !== undefined) {
        this.#conn.noteOwnChange(row.change_seq)
        return toAccount(row)
      }
    }
    throw new Error(`account ${wallet} could not be created or read`)
  }

  async getAccount(wallet: string): Promise<AccountRecord | null> {
    const { rows } = await this.#conn.query<AccountRow>(ACCOUNT_SQL.byId, [wallet])
    return rows[0] === undefined ? null : toAccount(rows[0])
  }

  async countAccounts(): Promise<number> {
    const { rows } = await this.#conn.query<{ n: number }>(ACCOUNT_SQL.count)
    return rows[0]!.n
  }

  async setAccountRateLimit(wallet: string, limit: number | null): Promise<AccountRecord | null> {
    this.#conn.check()
    if (limit !== null && (!Number.isSafeInteger(limit) || limit <= 0 || limit > 2_147_483_647)) {
      throw new RangeError(`rate limit must be a positive integer (got ${limit})`)
    }
    const { rows } = await this.#conn.query<AccountRow & { change_seq: number | null }>(ACCOUNT_SQL.setRateLimit, [wallet, limit, this.#conn.origin])
    const row = rows[0]
    if (row === undefined) return null
    this.#conn.noteOwnChange(row.change_seq)
    return toAccount(row)
  }
}
