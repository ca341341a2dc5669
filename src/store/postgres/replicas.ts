/**
 * The replica registry (DESIGN.md §6): which router processes share this database, whether each may trust
 * its in-memory key data, and how far each has applied the change feed. It gives two guarantees:
 *
 * - **A write answers after every replica heard it** (`barrier`): a key revoked or changed through one replica
 *   binds the next request on every replica (spec §3: at once everywhere). The writer waits until every other
 *   replica that trusts its cache has acknowledged the change's seq, or has stopped trusting (it says so, or
 *   its heartbeat is older than the fence).
 * - **A replica that may have missed a change does not serve from its cache** (`trusted`): it trusts only
 *   while its change listener is connected and caught up and its last heartbeat is younger than the fence.
 *   Trust is claimed in the database first and the feed caught up after, so a write that commits in between
 *   is either read by the catch-up or waited for by its writer.
 *
 * A replica that stops heartbeating for `dead_after_ms` is removed by whichever replica reaps first, and its
 * budget leases go back to the accounts and keys in the same transaction (leases.ts), so a SIGKILL strands
 * no money for longer than that.
 */
import type { PgConnection } from './connection.js'
import { log } from '../../log.js'
import { StoreUnavailableError } from '../store.js'

/** The change feed as the registry needs it (the PostgreSQL feed provides it: changes.ts). */
export interface TrackedFeed {
  /** The listener is connected and has read every change up to its last notification. */
  readonly current: boolean
  /** The highest change seq this process has applied. */
  readonly lastSeq: number
  /** The highest change seq written through this handle. */
  readonly ownSeq: number
  /** Called after each change this process applies (after its listeners ran). */
  onApplied(listener: (seq: number) => void): () => void
  /** Reads and applies every change committed before this call; rejects when the listener is not caught up. */
  catchUp(): Promise<number>
}

export interface ReplicaSettings {
  readonly heartbeatMs: number
  /** How long a heartbeat lets a replica trust its cache; how long a writer waits at most for a silent replica. */
  readonly fenceMs: number
  /** A replica silent this long is removed and its leases released. */
  readonly deadAfterMs: number
}

export const REPLICA_SQL = {
  /** A (re)start: trusting nothing until its first heartbeat and catch-up. */
  register: `INSERT INTO replicas (id, heartbeat_at, applied_seq, trusting, info) VALUES ($1, now(), $2, false, $3)
      ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), applied_seq = EXCLUDED.applied_seq, trusting = false`,
  /** The row is gone when another replica reaped this one (it was silent too long): rowCount 0 says so. */
  heartbeat: `UPDATE replicas SET heartbeat_at = now(), applied_seq = GREATEST(applied_seq, $2), trusting = $3 WHERE id = $1`,
  ack: `UPDATE replicas SET applied_seq = GREATEST(applied_seq, $2) WHERE id = $1`,
  /** Replicas a writer must still wait for: they trust their cache, are not silent, and have not applied `seq`. */
  lagging: `SELECT count(*)::int AS n FROM replicas
      WHERE id <> $1 AND trusting AND applied_seq < $2 AND heartbeat_at > now() - make_interval(secs => $3::float8 / 1000)`,
  live: `SELECT count(*)::int AS n FROM replicas WHERE heartbeat_at > now() - make_interval(secs => $1::float8 / 1000)`,
  /** Removes silent replicas and gives their leases back (svc_release_orphan_leases: leases.ts). */
  reap: `WITH dead AS (DELETE FROM replicas WHERE heartbeat_at < now() - make_interval(secs => $1::float8 / 1000) RETURNING id)
      SELECT id FROM dead`,
  /** ...and folds what they were served into the providers' books (svc_fold_served: charge-batch.ts). */
  releaseOrphans: `SELECT svc_release_orphan_leases() AS released, svc_fold_served() AS folded`,
  unregister: `DELETE FROM replicas WHERE id = $1`,
  ids: `SELECT id FROM replicas`,
} as const

/**
 * Resolves once every replica but `selfId` that trusts its cache has applied change `seq` or stopped trusting
 * (said so, or silent past `fenceMs`). Rejects when that is not known within twice the fence: the database
 * is unreachable, or a replica keeps heartbeating without applying (it then stops trusting by itself).
 */
export async function replicasApplied(pool: PgConnection, selfId: string | null, seq: number, fenceMs: number): Promise<void> {
  if (seq <= 0) return
  const deadline = performance.now() + 2 * fenceMs + 1_000
  let wait = 2
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(REPLICA_SQL.lagging, [selfId ?? '', seq, fenceMs])
    if (rows[0]!.n === 0) return
    if (performance.now() > deadline) throw new StoreUnavailableError(`${rows[0]!.n} replica(s) did not confirm change ${seq} in time`)
    await new Promise((resolve) => setTimeout(resolve, wait))
    wait = Math.min(wait * 2, 50)
  }
}

export class ReplicaRegistry {
  readonly id: string
  readonly #pool: PgConnection
  readonly #feed: TrackedFeed
  readonly #s: ReplicaSettings
  #timer: NodeJS.Timeout | null = null
  /** performance.now() until which the cache may be trusted (0: not now). */
  #trustedUntil = 0
  #acking = false
  #ackAgain = false
  #beating = false
  #live = 1
  #stopFeed: (() => void) | null = null
  readonly #lostListeners = new Set<() => void>()
  #closed = false

  constructor(pool: PgConnection, feed: TrackedFeed, settings: ReplicaSettings, id: string) {
    this.id = id
    this.#pool = pool
    this.#feed = feed
    this.#s = settings
  }

  /** Whether the key cache may answer from memory now: synchronous, no I/O. */
  readonly trusted = (): boolean => this.#feed.current && performance.now() < this.#trustedUntil

  /** Replicas heartbeating now (this one included; 1 until known): the rate limit's share when Redis is down. */
  get live(): number {
    return this.#live
  }

  async liveIds(): Promise<string[]> {
    const { rows } = await this.#pool.query<{ id: string }>(REPLICA_SQL.ids)
    return rows.map((r) => r.id)
  }

  /** Calls `listener` when this replica learns it was presumed dead and its leases were released. */
  onLeasesLost(listener: () => void): () => void {
    this.#lostListeners.add(listener)
    return () => this.#lostListeners.delete(listener)
  }

  async start(): Promise<void> {
    await this.#pool.query(REPLICA_SQL.register, [this.id, this.#feed.lastSeq, `pid ${process.pid}`])
    this.#stopFeed = this.#feed.onApplied(() => this.#ack())
    await this.#beat()
    this.#timer = setInterval(() => void this.#beat(), this.#s.heartbeatMs)
    this.#timer.unref()
  }

  /**
   * Resolves once every other replica that trusts its cache has applied every change this handle wrote so far
   * (or stopped trusting). Rejects when that cannot be known in time (the database is unreachable): the caller
   * answers 503, and the write, which did commit, is safe to repeat.
   */
  barrier(): Promise<void> {
    return replicasApplied(this.#pool, this.id, this.#feed.ownSeq, this.#s.fenceMs)
  }

  async #beat(): Promise<void> {
    if (this.#beating || this.#closed) return
    this.#beating = true
    const started = performance.now()
    try {
      // Trust is claimed only while the listener is connected and caught up; otherwise disclaimed first.
      const claim = this.#feed.current
      if (!claim) this.#trustedUntil = 0
      const res = await this.#pool.query(REPLICA_SQL.heartbeat, [this.id, this.#feed.lastSeq, claim])
      if (res.rowCount === 0) {
        this.#trustedUntil = 0
        log.error('replica: presumed dead by the others (silent too long); its budget leases were released. Registering again')
        for (const listener of this.#lostListeners) listener()
        await this.#pool.query(REPLICA_SQL.register, [this.id, this.#feed.lastSeq, `pid ${process.pid}`])
        return
      }
      if (claim) {
        // The claim is committed: a change committed from now on is waited for by its writer, and one committed
        // before is read here. Then, and only then, the cache may answer until this heartbeat's fence runs out.
        await this.#feed.catchUp()
        this.#trustedUntil = started + this.#s.fenceMs
      }
      const live = await this.#pool.query<{ n: number }>(REPLICA_SQL.live, [this.#s.fenceMs])
      this.#live = Math.max(1, live.rows[0]!.n)
      await this.#reap()
    } catch (err) {
      // The fence runs out by itself: no heartbeat, no trust past fenceMs.
      log.warn('replica: heartbeat failed', { err: String(err) })
    } finally {
      this.#beating = false
    }
  }

  /** Tells the database how far this replica applied the feed (coalesced: one update in flight at a time). */
  #ack(): void {
    if (this.#acking) {
      this.#ackAgain = true
      return
    }
    this.#acking = true
    this.#pool
      .query(REPLICA_SQL.ack, [this.id, this.#feed.lastSeq])
      .catch((err: unknown) => log.warn('replica: acknowledging changes failed', { err: String(err) }))
      .finally(() => {
        this.#acking = false
        if (this.#ackAgain) {
          this.#ackAgain = false
          this.#ack()
        }
      })
  }

  async #reap(): Promise<void> {
    const { rows } = await this.#pool.query<{ id: string }>(REPLICA_SQL.reap, [this.#s.deadAfterMs])
    // Leases of replicas gone (reaped now, or by a reaper that died before releasing) go back.
    const released = await this.#pool.query<{ released: number }>(REPLICA_SQL.releaseOrphans)
    if (rows.length > 0 || (released.rows[0]?.released ?? 0) > 0) {
      log.warn('replica: removed silent replicas and released their budget leases', {
        replicas: rows.map((r) => r.id),
        leases: released.rows[0]?.released ?? 0,
      })
    }
  }

  /** Leaves the registry (its leases were given back by the ledger's close before this). */
  async close(): Promise<void> {
    this.#closed = true
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#stopFeed?.()
    this.#trustedUntil = 0
    try {
      await this.#pool.query(REPLICA_SQL.unregister, [this.id])
      await this.#pool.query(REPLICA_SQL.releaseOrphans)
    } catch (err) {
      log.warn('replica: leaving the registry failed; the others remove it after dead_after_ms', { err: String(err) })
    }
  }
}
