/**
 * The ChangeFeed on PostgreSQL. Every write to accounts, keys and funds inserts a `changes` row in its own
 * transaction (accounts.ts, keys.ts, ledger.ts), whose trigger hands out seqs in commit order and sends
 * `NOTIFY svc_changes` at COMMIT (migrations.ts). This feed holds one dedicated connection (not from the pool)
 * that LISTENs, and on each notification, on each heartbeat and after each (re)connect reads the rows past the
 * last seq it applied, in order. Rows this handle wrote (its `origin`) are left out; charges write none.
 *
 * A listener that lost its connection cannot tell what it missed: once it has reconnected and caught up, it
 * reports one `unknown` change (drop everything). While it is not connected and caught up, `current` is false:
 * what this process caches may be stale (DESIGN.md §6: refuse to serve on it). `current` also turns false by
 * itself when no read has been confirmed for a while (a frozen server or a cut connection, before the TCP
 * connection notices), without waiting for the read's deadline.
 */
import pg from 'pg'
import { log } from '../../log.js'
import { ChangeListeners, toChange, UNKNOWN_CHANGE, type ChangeFeed, type ChangeListener, type ChangeRow as StoredChangeRow } from '../changes.js'
import { StoreUnavailableError } from '../store.js'
import type { PgConnection } from './connection.js'
import { CHANGES_KEPT } from './migrations.js'

/** A change row with the handle that wrote it (its own rows are left out). */
type ChangeRow = StoredChangeRow & { origin: string | null }

export const CHANGES_SQL = {
  listen: 'LISTEN svc_changes',
  last: 'SELECT coalesce(max(seq), 0)::bigint AS seq FROM changes',
  since: 'SELECT seq, kind, account_id, key_id, origin FROM changes WHERE seq > $1 ORDER BY seq',
} as const

const FIRST_RETRY_MS = 100
const MAX_RETRY_MS = 2_000

export class PgChanges implements ChangeFeed {
  readonly #conn: PgConnection
  readonly #listeners = new ChangeListeners()
  readonly #heartbeatMs: number
  /** The listener connection's statement deadline: short, so a dead connection is noticed soon. */
  readonly #readTimeoutMs: number
  /** Past this long without a confirmed read, `current` is false whatever the connection seems to be. */
  readonly #staleAfterMs: number
  #client: pg.Client | null = null
  #running = false
  #caughtUp = false
  #confirmedAt = 0
  #lastSeq = 0
  /** A starting seq was taken (the first connect of this subscription). */
  #marked = false
  /** Changes may have been missed (a lost connection, a first connect that failed): the next catch-up reports `unknown`. */
  #missed = false
  /** The read under way, and the connection it is on (one left from a lost connection never delays the next). */
  #reading: { readonly client: pg.Client; readonly done: Promise<void> } | null = null
  #readAgain = false
  #heartbeat: NodeJS.Timeout | null = null
  #retry: NodeJS.Timeout | null = null
  #retryMs = FIRST_RETRY_MS
  readonly #applied = new Set<(seq: number) => void>()
  /** Waiting for the first connect to take its position (ready()). */
  #whenReady: (() => void)[] = []
  /** How a write through this handle waits for the replicas to apply it (replicas.ts); none: it does not. */
  #barrier: (() => Promise<void>) | null = null

  constructor(conn: PgConnection) {
    this.#conn = conn
    this.#heartbeatMs = conn.options.changeHeartbeatMs
    this.#readTimeoutMs = Math.min(conn.options.queryTimeoutMs, Math.max(1_000, 2 * this.#heartbeatMs))
    this.#staleAfterMs = 2 * this.#heartbeatMs + this.#readTimeoutMs + 500
  }

  /**
   * True only while the listener is connected, has caught up since it (re)connected, and a read confirmed that
   * recently: every change committed before the last confirmed read has been reported. Synchronous, no I/O.
   */
  get current(): boolean {
    return this.#caughtUp && Date.now() - this.#confirmedAt <= this.#staleAfterMs
  }

  /** The highest `changes` seq this process has applied (read, whether reported or its own). */
  get lastSeq(): number {
    return this.#lastSeq
  }

  /** The highest `changes` seq of a change this handle wrote. */
  get ownSeq(): number {
    return this.#conn.ownSeq
  }

  /** Calls `listener` with the new last seq each time this feed has applied (reported) more changes. */
  onApplied(listener: (seq: number) => void): () => void {
    this.#applied.add(listener)
    return () => this.#applied.delete(listener)
  }

  /** Makes `settled()` wait on `barrier` (the replica registry's, or the CLI's wait for the replicas). */
  settleWith(barrier: () => Promise<void>): void {
    this.#barrier = barrier
  }

  ready(): Promise<void> {
    if (this.#caughtUp) return Promise.resolve()
    return new Promise((resolve) => this.#whenReady.push(resolve))
  }

  settled(): Promise<void> {
    return this.#barrier === null ? Promise.resolve() : this.#barrier()
  }

  /**
   * Reads what was committed up to now (without waiting for its notification) and resolves to lastSeq once
   * every change before this call has been reported; rejects when the listener is not connected and caught up.
   * For a caller that must know it has heard a change another process just made (its seq in hand).
   */
  async catchUp(): Promise<number> {
    const client = this.#client
    if (client === null || !this.#caughtUp) throw new StoreUnavailableError('the change listener is not connected')
    // A read already under way may have sent its query before this call: a second one follows it.
    if (this.#reading !== null && this.#reading.client === client) {
      this.#readAgain = true
      await this.#reading.done
    }
    await this.#read(client)
    if (this.#client !== client || !this.#caughtUp) throw new StoreUnavailableError('the change listener lost its connection')
    return this.#lastSeq
  }

  subscribe(listener: ChangeListener): () => void {
    const remove = this.#listeners.add(listener)
    if (!this.#running && !this.#conn.closed) {
      this.#running = true
      void this.#connect()
    }
    return () => {
      remove()
      if (this.#listeners.size === 0) this.#stop()
    }
  }

  close(): void {
    this.#stop()
    this.#listeners.clear()
  }

  #stop(): void {
    this.#running = false
    this.#caughtUp = false
    this.#marked = false
    this.#missed = false
    if (this.#heartbeat !== null) clearInterval(this.#heartbeat)
    if (this.#retry !== null) clearTimeout(this.#retry)
    this.#heartbeat = this.#retry = null
    const client = this.#client
    this.#client = null
    if (client !== null) this.#drop(client)
    // Nobody listens any more: a wait for the subscription to take effect ends too.
    for (const resolve of this.#whenReady.splice(0)) resolve()
  }

  #drop(client: pg.Client): void {
    client.removeAllListeners()
    client.on('error', () => {})
    client.end().catch(() => {})
  }

  async #connect(): Promise<void> {
    this.#retry = null
    if (!this.#running || this.#conn.closed) return
    const client = new pg.Client(this.#conn.clientConfig('svc-router changes', this.#readTimeoutMs))
    this.#client = client
    client.on('error', (err) => this.#lost(client, err))
    client.on('end', () => this.#lost(client, new Error('the listener connection ended')))
    client.on('notification', () => {
      if (this.#client === client) void this.#read(client)
    })
    try {
      await client.connect()
      await client.query(CHANGES_SQL.listen)
      // After LISTEN: a change committed from here on is notified, and one committed before is at most this seq.
      if (!this.#marked) {
        const { rows } = await client.query<{ seq: number }>(CHANGES_SQL.last)
        if (this.#client !== client) return
        this.#lastSeq = Math.max(this.#lastSeq, rows[0]!.seq)
        this.#marked = true
      }
      await this.#read(client)
      if (this.#client !== client) return
      this.#retryMs = FIRST_RETRY_MS
      this.#caughtUp = true
      for (const resolve of this.#whenReady.splice(0)) resolve()
      this.#heartbeat ??= setInterval(() => {
        if (this.#client !== null && this.#caughtUp) void this.#read(this.#client)
      }, this.#heartbeatMs)
      this.#heartbeat.unref()
      if (this.#missed) {
        this.#missed = false
        this.#listeners.emit(UNKNOWN_CHANGE)
        this.#advance(this.#lastSeq)
      }
    } catch (err) {
      this.#lost(client, err)
    }
  }

  /** The connection broke (or never came): not current, everything since counts as missed, and reconnect. */
  #lost(client: pg.Client, err: unknown): void {
    if (this.#client !== client) return
    this.#client = null
    this.#caughtUp = false
    this.#missed = true
    this.#drop(client)
    if (!this.#running || this.#conn.closed) return
    log.warn('store: the PostgreSQL change listener lost its connection; reconnecting', { err: String(err), retryMs: this.#retryMs })
    this.#retry = setTimeout(() => void this.#connect(), this.#retryMs)
    this.#retry.unref()
    this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS)
  }

  /**
   * Reads every row past lastSeq; one read at a time on a connection, and one more after it when asked
   * meanwhile. A read still hanging on a lost connection is not waited for: what it answers is dropped
   * (readOnce), and the new connection reads at once.
   */
  #read(client: pg.Client): Promise<void> {
    const under = this.#reading
    if (under !== null && under.client === client) {
      this.#readAgain = true
      return under.done
    }
    const reading: { client: pg.Client; done: Promise<void> } = { client, done: Promise.resolve() }
    reading.done = (async () => {
      try {
        do {
          this.#readAgain = false
          await this.#readOnce(client)
        } while (this.#readAgain && this.#client === client)
      } catch (err) {
        this.#lost(client, err)
      } finally {
        if (this.#reading === reading) this.#reading = null
      }
    })()
    this.#reading = reading
    return reading.done
  }

  async #readOnce(client: pg.Client): Promise<void> {
    const { rows } = await client.query<ChangeRow>(CHANGES_SQL.since, [this.#lastSeq])
    if (this.#client !== client) return
    this.#confirmedAt = Date.now()
    if (rows.length === 0) return
    const last = rows[rows.length - 1]!.seq
    // Rows up to last - CHANGES_KEPT have been trimmed: a mark further behind may have missed some.
    const trimmed = this.#lastSeq < last - CHANGES_KEPT
    // Missed while disconnected: these rows are not the whole story; the catch-up ends with one `unknown`.
    if (this.#missed) {
      this.#lastSeq = last
      return
    }
    if (trimmed) {
      this.#listeners.emit(UNKNOWN_CHANGE)
      this.#advance(last)
      return
    }
    const own = this.#conn.origin
    // One report per distinct change: fifty updates of one key between two reads are one `key` change.
    const seen = new Set<string>()
    for (const row of rows) {
      if (row.origin === own) continue
      const id = `${row.kind}\u0000${row.account_id}\u0000${row.key_id ?? ''}`
      if (seen.has(id)) continue
      seen.add(id)
      this.#listeners.emit(toChange(row))
    }
    this.#advance(last)
  }

  /** The listeners have been told everything up to `seq`: it counts as applied (the replicas' acknowledgement). */
  #advance(seq: number): void {
    this.#lastSeq = seq
    for (const listener of this.#applied) listener(seq)
  }
}
