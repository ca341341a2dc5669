/**
 * One undici Pool per provider origin, with keep-alive, shared by every request to that provider and kept
 * across registry reloads while the provider stays.
 */
import type { Socket } from 'node:net'
import { buildConnector, Pool } from 'undici'
import { log } from '../log.js'
import { watchWrites } from './chunk-pool.js'
import type { AddressRefusedError, ConnectGuard } from './connect-guard.js'
import { ProviderLimiter } from './limiter.js'

/** What the pools need of an attempt under way: its deadline, and a way to end it as failed. */
export interface ActiveAttempt {
  /** performance.now() by which the request must be over (upstream.total_timeout_ms from its arrival). */
  readonly deadline: number
  /** Where ActiveAttempts keeps it while it is under way; -1 when it is not there. Only ActiveAttempts writes it. */
  activeSlot: number
  fail(err: Error): void
}

/**
 * The attempts under way, in an array where each knows its own slot (removal moves the last one into it): not a
 * Set, whose every add and delete by every request would keep a collector-visible chain of garbage. V8 rehashes a
 * Set's table every few dozen adds and deletes (to grow or to drop deleted entries), and the table it leaves
 * keeps a pointer to its successor and every entry it held. Once one such table is in the old generation (any
 * full collection moves the live one there) the next ones, and the requests in them, are reachable from garbage
 * that only a full collection can see is garbage: every scavenge copies them, then promotes them, and the old
 * generation fills at the pace of the requests, so full collections come every second or so and each one starts
 * the chain again. Measured on the SQLite router at 64 connections (2026-11-27, --trace-gc-nvp): from the first
 * full collection on, 2.2-2.7 MB survived each scavenge instead of 0.4-0.5 MB, and the scavenges' pauses took
 * 90-110 ms of every second instead of 35-45.
 */
export class ActiveAttempts {
  #items: ActiveAttempt[] = []

  get size(): number {
    return this.#items.length
  }

  add(a: ActiveAttempt): void {
    if (a.activeSlot >= 0 && this.#items[a.activeSlot] === a) return
    a.activeSlot = this.#items.length
    this.#items.push(a)
  }

  delete(a: ActiveAttempt): void {
    const slot = a.activeSlot
    if (slot < 0 || this.#items[slot] !== a) return
    const last = this.#items.pop()!
    if (last !== a) {
      this.#items[slot] = last
      last.activeSlot = slot
    }
    a.activeSlot = -1
  }

  /** The attempts under way now (a copy: ending one changes the roster). */
  list(): ActiveAttempt[] {
    return this.#items.slice()
  }

  /** The earliest deadline after `now`, and the attempts whose deadline is `now` or before. */
  due(now: number, expired: ActiveAttempt[]): number {
    let next = Infinity
    const items = this.#items
    for (let i = 0; i < items.length; i++) {
      const a = items[i]!
      if (a.deadline <= now) expired.push(a)
      else if (a.deadline < next) next = a.deadline
    }
    return next
  }
}

function totalTimeout(): Error {
  return Object.assign(new Error('the request ran past upstream.total_timeout_ms'), { code: 'SVC_TOTAL_TIMEOUT' })
}

export interface PoolSettings {
  readonly connections: number
  readonly connectTimeoutMs: number
  readonly keepAliveTimeoutMs: number
  readonly headersTimeoutMs: number
  readonly bodyTimeoutMs: number
  /** The most a request may spend upstream, across its attempts, from its arrival. */
  readonly totalTimeoutMs: number
  /** Concurrent attempts per provider, then how many may wait and for how long (limiter.ts). */
  readonly maxConcurrent: number
  readonly queue: number
  readonly queueTimeoutMs: number
  /**
   * Judges every address a pool connects to (providers from the ledger: public unicast only); null or absent
   * for a registry that is the operator's own word.
   */
  readonly guard?: ConnectGuard | null
}

/** A provider base URL's pool and path prefix, worked out once (a URL parse per request cost more than the Map get). */
export interface Upstream {
  readonly pool: Pool
  /** basePath() of the URL. */
  readonly basePath: string
}

export class UpstreamPools {
  readonly #pools = new Map<string, Upstream>()
  readonly #settings: PoolSettings
  /** Provider URLs whose refused address was logged: once per URL while it stays in the registry. */
  readonly #refusedLogged = new Set<string>()
  /** Attempts dispatched and not yet over (attempt.ts: watch() and forget()). */
  readonly active = new ActiveAttempts()
  /**
   * One timer for every attempt's total timeout, armed for the earliest deadline it knows of: an attempt
   * whose deadline is later (every new request's, the deadline being its arrival plus a constant) costs no
   * timer of its own, where a setTimeout and clearTimeout per attempt cost a few µs of the request path. It
   * is not disarmed when attempts end: it fires, fails what is past its deadline, and is armed again for the
   * earliest deadline left. Unref'd: it never keeps the process alive (the sockets of attempts do).
   */
  #timer: NodeJS.Timeout | null = null
  #armedFor = Infinity
  /** Set when the drain's deadline passed: every attempt under way and any new one fails with it. */
  drainError: Error | null = null

  readonly limiter: ProviderLimiter

  constructor(settings: PoolSettings) {
    this.#settings = settings
    this.limiter = new ProviderLimiter({ max: settings.maxConcurrent, queue: settings.queue, queueTimeoutMs: settings.queueTimeoutMs })
  }

  get settings(): PoolSettings {
    return this.#settings
  }

  /** The pool for a provider base URL (its origin; the path prefix is added per request). */
  get(url: string): Pool {
    return this.upstream(url).pool
  }

  /**
   * The pool and path prefix for a provider base URL. The pool's headers and body timeouts are the settings':
   * a request that sends none gets them.
   */
  upstream(url: string): Upstream {
    let upstream = this.#pools.get(url)
    if (upstream === undefined) {
      const s = this.#settings
      const pool = new Pool(new URL(url).origin, {
        connections: s.connections,
        pipelining: 1,
        keepAliveTimeout: s.keepAliveTimeoutMs,
        keepAliveMaxTimeout: Math.max(s.keepAliveTimeoutMs, 600_000),
        headersTimeout: s.headersTimeoutMs,
        bodyTimeout: s.bodyTimeoutMs,
        connect: watchedConnector(s.connectTimeoutMs, s.guard ?? null, (err) => this.#refused(url, err)),
      })
      upstream = { pool, basePath: basePath(url) }
      this.#pools.set(url, upstream)
    }
    return upstream
  }

  #refused(url: string, err: AddressRefusedError): void {
    if (this.#refusedLogged.has(url)) return
    this.#refusedLogged.add(url)
    log.warn('provider not reached: its address is not public unicast', { url, address: err.address, reason: err.reason })
  }

  /** Closes pools of providers that left the registry (in-flight requests on them finish first). */
  retain(urls: ReadonlySet<string>): void {
    for (const url of this.#refusedLogged) if (!urls.has(url)) this.#refusedLogged.delete(url)
    for (const [url, { pool }] of this.#pools) {
      if (!urls.has(url)) {
        this.#pools.delete(url)
        pool.close().catch(() => {})
      }
    }
  }

  /** An attempt is under way: failed with SVC_TOTAL_TIMEOUT once its deadline passes, unless forgotten first. */
  watch(a: ActiveAttempt): void {
    this.active.add(a)
    if (a.deadline < this.#armedFor) this.#arm(a.deadline)
  }

  /** The attempt is over. */
  forget(a: ActiveAttempt): void {
    this.active.delete(a)
  }

  #arm(at: number): void {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#armedFor = at
    this.#timer = setTimeout(this.#expire, Math.max(1, Math.ceil(at - performance.now()))).unref()
  }

  readonly #expire = (): void => {
    this.#timer = null
    this.#armedFor = Infinity
    const now = performance.now()
    const expired: ActiveAttempt[] = []
    const next = this.active.due(now, expired)
    if (next !== Infinity) this.#arm(next)
    for (const a of expired) a.fail(totalTimeout())
  }

  /** Ends every attempt under way, and any started from now on, as failed: what is left at the drain's deadline. */
  failAll(): void {
    this.drainError = Object.assign(new Error('the router is shutting down'), { code: 'SVC_SHUTTING_DOWN' })
    for (const a of this.active.list()) a.fail(this.drainError)
  }

  async close(): Promise<void> {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#armedFor = Infinity
    const pools = [...this.#pools.values()]
    this.#pools.clear()
    await Promise.all(pools.map(({ pool }) => pool.destroy().catch(() => {})))
  }
}

/** The path prefix of a provider URL (e.g. "/openai" for http://host/openai), "" for a bare origin. */
export function basePath(url: string): string {
  const path = new URL(url).pathname
  return path === '/' ? '' : path.replace(/\/+$/, '')
}

/**
 * undici's connector, with every socket it opens holding the pooled upload chunks written to it until they are
 * written (chunk-pool.ts watchWrites), and, with a guard, every address it connects to judged first.
 */
function watchedConnector(timeout: number, guard: ConnectGuard | null, onRefused: (err: AddressRefusedError) => void): buildConnector.connector {
  const connect = buildConnector(guard === null ? { timeout } : { timeout, lookup: guard.lookup })
  return (options, callback) => {
    const refused = guard?.literal(options.hostname) ?? null
    if (refused !== null) {
      onRefused(refused)
      // Asynchronously, as a failed connect: undici then fails one queued request and may connect again at once.
      process.nextTick(callback as (err: Error, socket: null) => void, refused, null)
      return
    }
    connect(options, (err, socket) => {
      if (err !== null && (err as { code?: unknown }).code === 'SVC_ADDRESS_REFUSED') onRefused(err as AddressRefusedError)
      // A failed connect calls back with the error alone.
      if (err === null && socket != null) watchWrites(socket)
      // The callback's two forms (an error, or a socket) are one call here.
      ;(callback as (err: Error | null, socket: Socket | null) => void)(err, socket)
    })
  }
}
