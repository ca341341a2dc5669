/**
 * The PostgreSQL Store, for several router processes (replicas) on one database (DESIGN.md §6): a pg.Pool with
 * deadlines (connection.ts) shared by one part per concern (accounts.ts, keys.ts, ledger.ts, jobs.ts), and a
 * change feed on a connection of its own (changes.ts). Opening migrates the database under an advisory lock
 * (migrate.ts), so replicas started at once on an empty database all come up on one schema.
 */
import pg from 'pg'
import type { Store } from '../store.js'
import { PgAccounts } from './accounts.js'
import { PgChanges } from './changes.js'
import { PgConnection, unavailable, type PostgresStoreOptions } from './connection.js'
import { PgJobs } from './jobs.js'
import { PgKeys } from './keys.js'
import { PgLedger } from './ledger.js'
import { migrate } from './migrate.js'

export type { PostgresStoreOptions }

export class PostgresStore implements Store {
  readonly accounts: PgAccounts
  readonly keys: PgKeys
  readonly ledger: PgLedger
  readonly changes: PgChanges
  readonly jobs: PgJobs
  readonly #conn: PgConnection
  #closing: Promise<void> | null = null

  constructor(conn: PgConnection) {
    this.#conn = conn
    this.accounts = new PgAccounts(conn)
    this.keys = new PgKeys(conn)
    this.ledger = new PgLedger(conn)
    this.changes = new PgChanges(conn)
    this.jobs = new PgJobs(conn)
  }

  /** The pool, for what the runtime adds on the same database (leases, the readiness check). */
  get connection(): PgConnection {
    return this.#conn
  }

  close(): Promise<void> {
    if (this.#closing === null) {
      this.changes.close()
      this.#closing = this.#conn.close()
    }
    return this.#closing
  }
}

/**
 * Opens the store at `options.url`, migrating the database first (on a connection of its own, with the longer
 * migration deadline: another process may hold the migration lock for a while). Throws SchemaTooNewError for a
 * database written by a newer svc-router, and StoreUnavailableError when it cannot be reached within the
 * connect deadline.
 */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<PostgresStore> {
  const conn = new PgConnection(options)
  const migrator = new pg.Client(conn.clientConfig('svc-router migrate', conn.options.migrationTimeoutMs))
  migrator.on('error', () => {})
  try {
    await migrator.connect()
    await migrate(migrator, Date.now())
  } catch (err) {
    await conn.close()
    throw unavailable(err)
  } finally {
    await migrator.end().catch(() => {})
  }
  return new PostgresStore(conn)
}
