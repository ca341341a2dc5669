/**
 * The pg.Pool that every part of the PostgreSQL store shares (accounts.ts, keys.ts, ledger.ts, jobs.ts), with
 * a deadline on everything it does: connecting (connectTimeoutMs), each statement (statement_timeout on the
 * server, query_timeout in the client for a server that does not answer at all), and a transaction left open
 * (idle_in_transaction_session_timeout). A frozen or vanished PostgreSQL therefore gives a StoreUnavailableError
 * within a bounded time, never a hang, and the pool reconnects by itself when it comes back.
 *
 * Every session commits with synchronous_commit on: a write's promise resolves once PostgreSQL has flushed its
 * commit record, whatever the server's default.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { log } from '../../log.js'
import { StoreUnavailableError } from '../store.js'

export interface PostgresStoreOptions {
  /** postgres://user:password@host:port/database (libpq URL; sslmode etc. as query parameters). */
  readonly url: string
  /** Connections in the pool (default 10). */
  readonly poolSize?: number
  /** Deadline to open a connection or wait for a free one (default 5000 ms). */
  readonly connectTimeoutMs?: number
  /** Deadline of each statement (default 5000 ms). */
  readonly queryTimeoutMs?: number
  /** Deadline of the schema migrations at open, the wait for another process's migration included (120 s). */
  readonly migrationTimeoutMs?: number
  /** How often the change listener checks that its connection answers and reads what it may have missed (1000 ms). */
  readonly changeHeartbeatMs?: number
  /** The replica this handle serves, recorded as the owner of the jobs it creates (jobs.ts); null: none. */
  readonly replicaId?: string | null
  /** Shown in pg_stat_activity (default 'svc-router'). */
  readonly applicationName?: string
}

const DEFAULTS = {
  poolSize: 10,
  connectTimeoutMs: 5_000,
  queryTimeoutMs: 5_000,
  migrationTimeoutMs: 120_000,
  changeHeartbeatMs: 1_000,
}

/**
 * How PostgreSQL values come back: int8 (bigint columns: epoch ms, counters, seqs) as numbers, which every
 * value the store keeps there fits exactly (below 2^53); NUMERIC stays a decimal string, turned into bigint by
 * the part that reads it. Per pool, not pg's global parsers: another user of pg in the process is unaffected.
 */
export const PG_TYPES = new pg.TypeOverrides()
PG_TYPES.setTypeParser(pg.types.builtins.INT8, (text: string) => Number(text))

/**
 * The session settings every connection starts with: synchronous_commit on (a COMMIT answers once flushed),
 * after whatever the URL's own `options` parameter sets (e.g. `?options=-c search_path=svc` for a schema of its
 * own). pg lets a URL parameter replace a setting given beside it, so the URL's is moved into ours.
 */
export function sessionOptions(url: string): { url: string; options: string } {
  const ours = '-c synchronous_commit=on'
  if (!url.includes('options=') || !URL.canParse(url)) return { url, options: ours }
  const parsed = new URL(url)
  const theirs = parsed.searchParams.get('options')
  if (theirs === null) return { url, options: ours }
  parsed.searchParams.delete('options')
  return { url: parsed.toString(), options: `${theirs} ${ours}` }
}

/** SQLSTATE classes and messages of a connection that is gone or never came (the store is unreachable). */
const CONNECTION_CODES = new Set(['57P01', '57P02', '57P03', '53300', '08000', '08001', '08003', '08004', '08006', '08007', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND'])
const CONNECTION_MESSAGES = ['Query read timeout', 'timeout exceeded when trying to connect', 'Connection terminated', 'Client has encountered a connection error', 'Connection ended', 'connection timeout']

/** The connection this error came on cannot be used again: it must be dropped from the pool, not reused. */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null
  if (e === null || typeof e !== 'object') return false
  if (e.code !== undefined && CONNECTION_CODES.has(e.code)) return true
  const message = e.message ?? ''
  return CONNECTION_MESSAGES.some((m) => message.includes(m))
}

/** A statement cancelled by statement_timeout (57014): the server is alive but did not finish in time. */
function isTimeout(err: unknown): boolean {
  return (err as { code?: string }).code === '57014'
}

/** A transaction that PostgreSQL aborted to break a deadlock or a serialization conflict: running it again is safe. */
function isRetryable(err: unknown): boolean {
  const code = (err as { code?: string }).code
  return code === '40P01' || code === '40001'
}

export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string }).code === '23505'
}

export function isForeignKeyViolation(err: unknown): boolean {
  return (err as { code?: string }).code === '23503'
}

/** Errors of an unreachable or unanswering server become StoreUnavailableError (with the cause); others pass. */
export function unavailable(err: unknown): unknown {
  if (err instanceof StoreUnavailableError) return err
  if (isConnectionError(err) || isTimeout(err)) {
    return new StoreUnavailableError(`PostgreSQL is unavailable: ${(err as Error).message}`, { cause: err })
  }
  return err
}

/** Tries of a transaction PostgreSQL aborted as a deadlock victim (each is rolled back whole first). */
const RETRIES = 3

export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>>
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>
}

export class PgConnection {
  readonly pool: pg.Pool
  readonly options: Required<Omit<PostgresStoreOptions, 'replicaId' | 'applicationName'>> & {
    readonly replicaId: string | null
    readonly applicationName: string
  }
  /** This handle's name in the `changes` rows it writes: its change feed leaves those out (changes.ts). */
  readonly origin = randomUUID()
  /** The highest `changes` seq a write through this handle produced. */
  ownSeq = 0
  #closed = false

  constructor(options: PostgresStoreOptions) {
    this.options = {
      url: options.url,
      poolSize: options.poolSize ?? DEFAULTS.poolSize,
      connectTimeoutMs: options.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs,
      queryTimeoutMs: options.queryTimeoutMs ?? DEFAULTS.queryTimeoutMs,
      migrationTimeoutMs: options.migrationTimeoutMs ?? DEFAULTS.migrationTimeoutMs,
      changeHeartbeatMs: options.changeHeartbeatMs ?? DEFAULTS.changeHeartbeatMs,
      replicaId: options.replicaId ?? null,
      applicationName: options.applicationName ?? 'svc-router',
    }
    this.pool = new pg.Pool({
      ...this.clientConfig(this.options.applicationName),
      max: this.options.poolSize,
      idleTimeoutMillis: 30_000,
      allowExitOnIdle: true,
      pipeline: true,
    })
    // An idle connection that breaks (the server restarted) is reported here; unheard, it would end the process.
    this.pool.on('error', (err) => log.warn('store: an idle PostgreSQL connection failed; the pool opens a new one', { err: String(err) }))
    // A checked-out connection that breaks between two queries emits 'error' on itself: never unheard either.
    this.pool.on('connect', (client) => {
      client.on('error', (err) => log.warn('store: a PostgreSQL connection failed', { err: String(err) }))
    })
  }

  /** The settings of every connection of this store (the pool's, the listener's, the migration's). */
  clientConfig(applicationName: string, statementTimeoutMs = this.options.queryTimeoutMs): pg.ClientConfig {
    const { url, options } = sessionOptions(this.options.url)
    return {
      connectionString: url,
      connectionTimeoutMillis: this.options.connectTimeoutMs,
      statement_timeout: statementTimeoutMs,
      // The client-side deadline, a little after the server's: the server's cancels cleanly and keeps the
      // connection; this one is for a server that does not answer at all (frozen, cut off).
      query_timeout: statementTimeoutMs + 500,
      // The store's transactions never wait on anything but their own next statement: one idle longer than
      // this belongs to a process that froze or lost its network mid-way, and must not keep holding the
      // account locks every other replica's charges wait for.
      idle_in_transaction_session_timeout: Math.max(1_000, Math.min(statementTimeoutMs, 5_000) / 2),
      application_name: applicationName,
      keepAlive: true,
      keepAliveInitialDelayMillis: 5_000,
      types: PG_TYPES,
      options,
    }
  }

  get closed(): boolean {
    return this.#closed
  }

  /** Throws once the store is closed: every call starts with it. */
  check(): void {
    if (this.#closed) throw new Error('store is closed')
  }

  /** Records the seq of a change this handle wrote (null: the write changed nothing). */
  noteOwnChange(seq: number | null | undefined): void {
    if (seq !== null && seq !== undefined && seq > this.ownSeq) this.ownSeq = seq
  }

  /** A pooled connection of an open store; StoreUnavailableError when none can be had. */
  async #connect(): Promise<pg.PoolClient> {
    this.check()
    try {
      return await this.pool.connect()
    } catch (err) {
      throw unavailable(err)
    }
  }

  /** One statement on a pooled connection; a connection that broke is dropped, others go back to the pool. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string | pg.QueryConfig, values?: unknown[]): Promise<pg.QueryResult<R>> {
    const client = await this.#connect()
    let broken: Error | undefined
    try {
      return typeof text === 'string' ? await client.query<R>(text, values) : await client.query<R>(text)
    } catch (err) {
      if (isConnectionError(err)) broken = err as Error
      throw unavailable(err)
    } finally {
      client.release(broken)
    }
  }

  /**
   * One statement that is a transaction of its own (autocommit: a function doing a transaction's work, like
   * svc_charge_batch): committed, and flushed, when it answers. A deadlock victim is run again, as
   * transaction() does; a connection lost before the answer leaves the outcome unknown (StoreUnavailableError).
   */
  async statement<R extends pg.QueryResultRow = pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.query<R>(config)
      } catch (err) {
        if (attempt < RETRIES && isRetryable(err)) continue
        throw err
      }
    }
  }

  /**
   * Runs `fn` in a transaction (READ COMMITTED) and commits; rolls back and rethrows when it throws. A
   * transaction PostgreSQL aborted to break a deadlock is run again (up to RETRIES tries): `fn` must not keep
   * state across tries. A COMMIT that fails on a lost connection leaves its outcome unknown: the caller gets
   * StoreUnavailableError and must not report the write as done (a charge retried later is refused as already
   * billed if it did commit: request ids are unique). `fn` must not wait on anything but its own statements: a
   * transaction idle for more than about 2.5 s is ended by the server (idle_in_transaction_session_timeout).
   */
  async transaction<T>(fn: (client: Queryable) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.#connect()
      let broken: Error | undefined
      try {
        await client.query('BEGIN')
        const out = await fn(client)
        await client.query('COMMIT')
        return out
      } catch (err) {
        if (isConnectionError(err)) broken = err as Error
        else {
          // A connection that answers: roll back and keep it. One that does not is dropped (the server rolls back).
          try {
            await client.query('ROLLBACK')
          } catch (rollbackErr) {
            broken = rollbackErr as Error
          }
        }
        if (attempt < RETRIES && isRetryable(err)) continue
        throw unavailable(err)
      } finally {
        client.release(broken)
      }
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.pool.end()
  }
}
