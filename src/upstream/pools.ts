/**
 * One undici Pool per provider origin, with keep-alive, shared by every request to that provider and kept
 * across registry reloads while the provider stays.
 */
import type { Socket } from 'node:net'
import { buildConnector, Pool } from 'undici'
import { watchWrites } from './chunk-pool.js'
import { ProviderLimiter } from './limiter.js'

/** What the pools need of an attempt under way: its deadline, and a way to end it as failed. */
export interface ActiveAttempt {
  /** performance.now() by which the request must be over (upstream.total_timeout_ms from its arrival). */
  readonly deadline: number
  fail(err: Error): void
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
  /** Attempts dispatched and not yet over (attempt.ts: watch() and forget()). */
  readonly active = new Set<ActiveAttempt>()
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
        connect: watchedConnector(s.connectTimeoutMs),
      })
      upstream = { pool, basePath: basePath(url) }
      this.#pools.set(url, upstream)
    }
    return upstream
  }

  /** Closes pools of providers that left the registry (in-flight requests on them finish first). */
  retain(urls: ReadonlySet<string>): void {
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
    let next = Infinity
    const expired: ActiveAttempt[] = []
    for (const a of this.active) {
      if (a.deadline <= now) expired.push(a)
      else if (a.deadline < next) next = a.deadline
    }
    if (next !== Infinity) this.#arm(next)
    for (const a of expired) a.fail(totalTimeout())
  }

  /** Ends every attempt under way, and any started from now on, as failed: what is left at the drain's deadline. */
  failAll(): void {
    this.drainError = Object.assign(new Error('the router is shutting down'), { code: 'SVC_SHUTTING_DOWN' })
    for (const a of [...this.active]) a.fail(this.drainError)
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
 * written (chunk-pool.ts watchWrites).
 */
function watchedConnector(timeout: number): buildConnector.connector {
  const connect = buildConnector({ timeout })
  return (options, callback) =>
    connect(options, (err, socket) => {
      // A failed connect calls back with the error alone.
      if (err === null && socket != null) watchWrites(socket)
      // The callback's two forms (an error, or a socket) are one call here.
      ;(callback as (err: Error | null, socket: Socket | null) => void)(err, socket)
    })
}
