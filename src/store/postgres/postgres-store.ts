/**
 * The PostgreSQL Store, for several router processes (replicas) on one database (DESIGN.md §6): a pg.Pool with
 * deadlines (connection.ts) shared by one part per concern (accounts.ts, keys.ts, ledger.ts, jobs.ts), and a
 * change feed on a connection of its own (changes.ts). Opening migrates the database under an advisory lock
 * (migrate.ts), so replicas started at once on an empty database all come up on one schema.
 */
import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import pg from 'pg'
import type { Store } from '../store.js'
import { PgAccounts } from './accounts.js'
import { PgChanges } from './changes.js'
import { PgConnection, unavailable, type PostgresStoreOptions } from './connection.js'
import { PgJobs } from './jobs.js'
import { PgKeys } from './keys.js'
import { PgLedger } from './ledger.js'
import { PgLeaseStore } from './leases.js'
import { PgResponses } from './responses.js'
import { PgSettlement } from './settlement.js'
import { migrate } from './migrate.js'
import { ReplicaRegistry, replicasApplied, type ReplicaSettings } from './replicas.js'

export type { PostgresStoreOptions }

export interface OpenPostgresOptions extends PostgresStoreOptions {
  /**
   * Open as a replica that serves (serve.ts): register in the replica registry, take budget leases, and let key
   * writes wait for the other replicas. Without it (the operator CLI) key writes still wait for the replicas.
   */
  readonly replica?: ReplicaSettings
}

/** How long a write through a handle that is no replica (the CLI) waits for replicas that went silent. */
const CLI_FENCE_MS = 2_000

export class PostgresStore implements Store {
  readonly accounts: PgAccounts
  readonly keys: PgKeys
  readonly ledger: PgLedger
  readonly changes: PgChanges
  readonly jobs: PgJobs
  readonly responses: PgResponses
  readonly settlement: PgSettlement
  /** Present when opened as a replica that serves (OpenPostgresOptions.replica). */
  leases?: PgLeaseStore
  replica?: ReplicaRegistry
  readonly #conn: PgConnection
  #stopFeed: (() => void) | null = null
  #closing: Promise<void> | null = null

  constructor(conn: PgConnection) {
    this.#conn = conn
    this.accounts = new PgAccounts(conn)
    this.keys = new PgKeys(conn)
    this.ledger = new PgLedger(conn)
    this.changes = new PgChanges(conn)
    this.jobs = new PgJobs(conn)
    this.responses = new PgResponses(conn)
    this.settlement = new PgSettlement(conn)
    this.changes.settleWith(() => replicasApplied(conn, null, this.changes.ownSeq, CLI_FENCE_MS))
  }

  /**
   * Joins the replicas: the change feed runs for as long as the store is open, the registry entry is made once
   * the feed has caught up (so what it acknowledges is true), and key writes wait for the other replicas.
   */
  async joinReplicas(settings: ReplicaSettings, replicaId: string): Promise<void> {
    this.#stopFeed = this.changes.subscribe(() => {})
    const deadline = Date.now() + this.#conn.options.connectTimeoutMs * 2
    while (!this.changes.current && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
    const registry = new ReplicaRegistry(this.#conn, this.changes, settings, replicaId)
    await registry.start()
    this.replica = registry
    this.leases = new PgLeaseStore(this.#conn, replicaId)
    this.changes.settleWith(() => registry.barrier())
  }
  /** The pool, for what the runtime adds on the same database (leases, the readiness check). */
  get connection(): PgConnection {
    return this.#conn
  }

  close(): Promise<void> {
    if (this.#closing === null) {
      this.#closing = (async () => {
        // Leaves the registry first (its leases were given back by the ledger's close): the others stop waiting for it.
        await this.replica?.close()
        this.#stopFeed?.()
        this.changes.close()
        await this.#conn.close()
      })()
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
export async function openPostgresStore(options: OpenPostgresOptions): Promise<PostgresStore> {
  const replicaId = options.replica === undefined ? (options.replicaId ?? null) : (options.replicaId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`)
  const conn = new PgConnection({ ...options, replicaId })
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
  const store = new PostgresStore(conn)
  if (options.replica !== undefined) {
    try {
      await store.joinReplicas(options.replica, replicaId!)
    } catch (err) {
      await store.close()
      throw unavailable(err)
    }
  }
  return store
}
