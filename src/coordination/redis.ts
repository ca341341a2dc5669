/**
 * The Redis connection of a replica (DESIGN.md §6, "Redis for what is shared and hot"): the account rate
 * windows (rate-window.ts) and the health exchange (health-exchange.ts). Redis is never on the money path, so
 * its absence is a state to serve through, not an error: commands fail fast while it is down (no offline
 * queue, a short command timeout), the client reconnects by itself forever, and `up` says which state holds.
 */
import { Redis } from 'ioredis'
import { log } from '../log.js'

export interface RedisLinkOptions {
  /** A command that has no answer after this long fails (the caller falls back), ms. */
  readonly commandTimeoutMs?: number
}

export class RedisLink {
  readonly client: Redis
  readonly #url: string
  #up = false
  #closed = false
  readonly #listeners = new Set<(up: boolean) => void>()

  constructor(url: string, options: RedisLinkOptions = {}) {
    this.#url = url
    this.client = RedisLink.connect(url, options.commandTimeoutMs ?? 500)
    this.client.on('ready', () => this.#set(true))
    this.client.on('close', () => this.#set(false))
    this.client.on('end', () => this.#set(false))
    // Errors are states here (connection refused, reset): logged once per change of state by #set.
    this.client.on('error', () => {})
  }

  /** A client as every link of the router's uses it: fail fast while down, reconnect forever. */
  static connect(url: string, commandTimeoutMs: number): Redis {
    return new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: commandTimeoutMs,
      connectTimeout: 2_000,
      enableAutoPipelining: true,
      retryStrategy: (times) => Math.min(50 * times, 1_000),
      lazyConnect: false,
    })
  }

  get up(): boolean {
    return this.#up
  }

  get url(): string {
    return this.#url
  }

  /** Calls `listener` on each change between up and down. */
  onState(listener: (up: boolean) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  /** Resolves once connected, or after `ms` (serving starts either way: Redis down is a degraded state). */
  ready(ms: number): Promise<boolean> {
    if (this.#up) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        stop()
        resolve(false)
      }, ms)
      const stop = this.onState((up) => {
        if (!up) return
        clearTimeout(timer)
        stop()
        resolve(true)
      })
    })
  }

  #set(up: boolean): void {
    if (up === this.#up || this.#closed) return
    this.#up = up
    if (up) log.info('redis connected: rate limits are shared across replicas again', { url: redactUrl(this.#url) })
    else log.warn('redis unreachable: rate limits fall back to a per-replica share, health is not exchanged', { url: redactUrl(this.#url) })
    for (const listener of this.#listeners) listener(up)
  }

  async close(): Promise<void> {
    this.#closed = true
    this.client.disconnect()
  }
}

/** A connection URL without its password, for logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url)
    if (u.password !== '') u.password = '***'
    return u.toString()
  } catch {
    return '(unparsable url)'
  }
}
