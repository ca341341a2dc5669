/**
 * One request window per account across every replica (issue #28 §4, DESIGN.md §6): the arrival times of the
 * account's admitted requests live in a Redis sorted set, and one Lua script (atomic on the server, on the
 * server's clock) drops what left the window, counts, and admits or refuses. Exact whatever the number of
 * replicas: two replicas can never both take the last slot.
 *
 * Redis down (or slow past the command timeout): the replica decides alone on a share of the limit,
 * `ceil(limit / replicas)`, with the in-process window (auth/rate-limit.ts), so the sum over replicas stays
 * near the limit and nobody is refused for Redis's sake. Exact again with the next request once Redis answers.
 */
import type { Redis } from 'ioredis'
import { RateLimiter, type RateDecision, type RateGate } from '../auth/rate-limit.js'
import type { RedisLink } from './redis.js'

/**
 * KEYS[1] the account's window; ARGV: limit, window ms, a member unique to this request, 1 to count it (take)
 * or 0 (peek). Returns {admitted 0|1, requests in the window, oldest arrival ms, server now ms}.
 */
const TAKE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local admitted = 0
if ARGV[4] == '1' and count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  count = count + 1
  admitted = 1
end
local oldest = now
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then oldest = tonumber(first[2]) end
return {admitted, count, oldest, now}
`

interface RateCommands {
  svcRateWindow(key: string, limit: number, windowMs: number, member: string, count: '0' | '1'): Promise<[number, number, number, number]>
}

export interface SharedRateLimiterOptions {
  readonly windowMs?: number
  /** How many replicas share the limit when Redis is down (the live count of the replica registry). */
  readonly replicas: () => number
  /** Key prefix in Redis. */
  readonly prefix?: string
}

export class SharedRateLimiter implements RateGate {
  readonly #link: RedisLink
  readonly #client: Redis & RateCommands
  readonly #windowMs: number
  readonly #replicas: () => number
  readonly #prefix: string
  readonly #defaultLimit: number
  /** The window this replica keeps alone while Redis is unreachable. */
  readonly fallback: RateLimiter
  #seq = 0
  readonly #tag = Math.random().toString(36).slice(2, 10)
  /** Decisions made by the fallback, for the logs and tests. */
  fallbacks = 0

  constructor(link: RedisLink, defaultLimit: number, options: SharedRateLimiterOptions) {
    this.#link = link
    this.#client = link.client as Redis & RateCommands
    this.#client.defineCommand('svcRateWindow', { numberOfKeys: 1, lua: TAKE_SCRIPT })
    this.#defaultLimit = defaultLimit
    this.#windowMs = options.windowMs ?? 60_000
    this.#replicas = options.replicas
    this.#prefix = options.prefix ?? 'svc:rate:'
    this.fallback = new RateLimiter(defaultLimit, this.#windowMs)
  }

  take(account: string, now: number, limit = this.#defaultLimit): RateDecision | Promise<RateDecision> {
    return this.#ask(account, now, limit, '1')
  }

  peek(account: string, now: number, limit = this.#defaultLimit): RateDecision | Promise<RateDecision> {
    return this.#ask(account, now, limit, '0')
  }

  #ask(account: string, now: number, limit: number, count: '0' | '1'): RateDecision | Promise<RateDecision> {
    if (!this.#link.up) return this.#alone(account, now, limit, count)
    const member = this.#tag + ':' + (this.#seq++).toString(36)
    return this.#client.svcRateWindow(this.#prefix + account, limit, this.#windowMs, member, count).then(
      ([admitted, held, oldest, serverNow]) => {
        // The server's clock decided; the reset time is given on ours.
        const resetAt = Date.now() + (oldest + this.#windowMs - serverNow)
        const allowed = count === '1' ? admitted === 1 : held < limit
        return {
          allowed,
          limit,
          remaining: Math.max(0, limit - held),
          resetAt,
          retryAfter: allowed ? 0 : Math.max(1, Math.ceil((oldest + this.#windowMs - serverNow) / 1000)),
        }
      },
      () => this.#alone(account, Date.now(), limit, count),
    )
  }

  /** The decision without Redis: this replica's share of the limit. */
  #alone(account: string, now: number, limit: number, count: '0' | '1'): RateDecision {
    this.fallbacks++
    const share = Math.max(1, Math.ceil(limit / Math.max(1, this.#replicas())))
    const d = count === '1' ? this.fallback.take(account, now, share) : this.fallback.peek(account, now, share)
    // A copy: the fallback's decision object is reused by its next call, and this one may outlive it.
    return { ...d }
  }
}
