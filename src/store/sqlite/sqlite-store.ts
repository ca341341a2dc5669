/**
 * The embedded Store: one better-sqlite3 connection in WAL mode (connection.ts) shared by one part per concern
 * (accounts.ts, keys.ts, ledger.ts, jobs.ts, responses.ts, changes.ts).
 */
import type { Store } from '../store.js'
import { SqliteAccounts } from './accounts.js'
import { SqliteChanges } from './changes.js'
import { SqliteConnection, type SqliteStoreOptions } from './connection.js'
import { SqliteJobs } from './jobs.js'
import { SqliteKeys } from './keys.js'
import { SqliteLedger } from './ledger.js'
import { SqliteResponses } from './responses.js'
import { SqliteSettlement } from './settlement.js'

export type { SqliteStoreOptions }

export class SqliteStore implements Store {
  readonly accounts: SqliteAccounts
  readonly keys: SqliteKeys
  readonly ledger: SqliteLedger
  readonly changes: SqliteChanges
  readonly jobs: SqliteJobs
  readonly responses: SqliteResponses
  readonly settlement: SqliteSettlement
  readonly #conn: SqliteConnection
  #closing: Promise<void> | null = null

  constructor(options: SqliteStoreOptions) {
    this.#conn = new SqliteConnection(options)
    try {
      this.accounts = new SqliteAccounts(this.#conn)
      this.keys = new SqliteKeys(this.#conn)
      this.ledger = new SqliteLedger(this.#conn)
      this.changes = new SqliteChanges(this.#conn, options.changePollMs, options.besideServer === true)
      this.jobs = new SqliteJobs(this.#conn)
      this.responses = new SqliteResponses(this.#conn)
      this.settlement = new SqliteSettlement(this.#conn)
    } catch (err) {
      this.#conn.close()
      throw err
    }
  }

  close(): Promise<void> {
    if (this.#closing === null) this.#closing = this.#close()
    return this.#closing
  }

  async #close(): Promise<void> {
    if (this.#conn.closed) return
    this.changes.close()
    // First the upkeep thread and its connection: ours is then the last, and no file of the database changes
    // once the store has closed (the last connection checkpoints and removes the WAL).
    await this.#conn.stopUpkeep()
    // Leaves the totals folded for whoever opens the file next (a fold not done here is done by the next reader).
    try {
      this.ledger.fold()
    } catch {}
    this.#conn.close()
  }
}

/** Opens (creating and migrating if needed) the SQLite store at `options.path`. */
export async function openSqliteStore(options: SqliteStoreOptions): Promise<SqliteStore> {
  return new SqliteStore(options)
}
