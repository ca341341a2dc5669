/**
 * Provider health shared between replicas (issue #28 §9): an ejection made by one replica reaches the others
 * at once over Redis pub/sub, so a dead provider is found once, not once per replica; and each replica
 * publishes its time-to-first-byte averages every `latencyEveryMs`, which the others blend into theirs, so
 * `X-SVC-Provider-Sort: latency` ranks on what the whole fleet sees. Best effort by design: a lost message
 * costs a rediscovery, never a wrong answer, and with Redis down each replica keeps its own view.
 */
import type { Redis } from 'ioredis'
import type { HealthBook } from '../health/health.js'
import { log } from '../log.js'
import { RedisLink } from './redis.js'

const CHANNEL = 'svc:health'

interface HealthMessage {
  readonly from: string
  readonly eject?: readonly [string, number]
  readonly latency?: readonly (readonly [string, number])[]
}

export interface HealthExchangeOptions {
  readonly replicaId: string
  readonly ewmaAlpha: number
  readonly latencyEveryMs?: number
}

export class HealthExchange {
  readonly #link: RedisLink
  readonly #sub: Redis
  readonly #book: HealthBook
  readonly #id: string
  readonly #timer: NodeJS.Timeout
  /** Messages applied from other replicas, for tests and logs. */
  heard = 0

  constructor(link: RedisLink, book: HealthBook, options: HealthExchangeOptions) {
    this.#link = link
    this.#book = book
    this.#id = options.replicaId
    // Subscribing takes a connection of its own; it resubscribes by itself after a reconnect.
    this.#sub = RedisLink.connect(link.url, 2_000)
    this.#sub.on('error', () => {})
    // On every (re)connection: with no offline queue, a subscribe sent before the connection is up is dropped.
    this.#sub.on('ready', () => this.#sub.subscribe(CHANNEL).catch(() => {}))
    this.#sub.on('message', (_channel: string, text: string) => this.#hear(text, options.ewmaAlpha))
    book.onEject((address, backoffMs) => this.#publish({ from: this.#id, eject: [address, backoffMs] }))
    this.#timer = setInterval(() => {
      const latency = [...book.latencies()]
      if (latency.length > 0) this.#publish({ from: this.#id, latency })
    }, options.latencyEveryMs ?? 2_000)
    this.#timer.unref()
  }

  #publish(message: HealthMessage): void {
    if (!this.#link.up) return
    this.#link.client.publish(CHANNEL, JSON.stringify(message)).catch(() => {})
  }

  #hear(text: string, alpha: number): void {
    let message: HealthMessage
    try {
      message = JSON.parse(text) as HealthMessage
    } catch {
      return
    }
    if (typeof message !== 'object' || message === null || message.from === this.#id) return
    this.heard++
    const eject = message.eject
    if (Array.isArray(eject) && typeof eject[0] === 'string' && typeof eject[1] === 'number' && eject[1] > 0) {
      this.#book.provider(eject[0]).ejectedElsewhere(performance.now(), Math.min(eject[1], 3_600_000))
      log.info('provider ejected by another replica', { provider: eject[0], backoff_ms: Math.round(eject[1]) })
    }
    if (Array.isArray(message.latency)) {
      const pairs = message.latency.filter((p): p is [string, number] => Array.isArray(p) && typeof p[0] === 'string' && typeof p[1] === 'number')
      this.#book.observeElsewhere(pairs, alpha)
    }
  }

  close(): void {
    clearInterval(this.#timer)
    this.#book.onEject(null)
    this.#sub.disconnect()
  }
}
