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
import { RateLimiter, type RateCounts, type RateDecision, type RateGate } from '../auth/rate-limit.js'
import type { RedisLink } from './redis.js'

/**
 * The account's window and the leases replicas hold of it (rate-lease.ts), hash-tagged by account: one slot of
 * a Redis Cluster, as a script needs. One pair of keys whether a replica leases or not (`redis.rate_lease_size`
 * 0 on some replicas and not on others, as during a rolling change of it): both paths count the same window.
 */
export function rateKeys(prefix: string, account: string): [window: string, leases: string] {
  return [prefix + '{' + account + '}', prefix + 'lease:{' + account + '}']
}

/**
 * KEYS[1] the account's window, KEYS[2] the replicas' leases of it (hash: holder -> "slots:expires at"; every
 * live lease counts in full, as the lease script counts it); ARGV: window ms, a member prefix unique to this
 * call, 1 to count the requests
 * (take) or 0 (peek), then one limit per request, in arrival order. The requests are decided one after another
 * as that many separate calls would decide them at the same instant: each is admitted while the window holds
 * fewer than its limit, and an admitted one is counted before the next is decided. Returns {server now ms,
 * requests in the window before the first, then for each request: the requests in the window after it, and
 * when the window admits again under its limit (the arrival whose leaving brings the count below the limit: the
 * oldest, or past it when the window holds more than a lowered limit; server now when the window is empty; the
 * soonest end of a lease when that comes first, its unused slots coming back), as the score of an arrival}.
 */
const TAKE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local leased = 0
local soonest = -1
local all = redis.call('HGETALL', KEYS[2])
for j = 1, #all, 2 do
  local v = all[j + 1]
  local sep = string.find(v, ':', 1, true)
  local expires = tonumber(string.sub(v, sep + 1))
  if expires <= now then
    redis.call('HDEL', KEYS[2], all[j])
  else
    leased = leased + tonumber(string.sub(v, 1, sep - 1))
    if soonest < 0 or expires < soonest then soonest = expires end
  end
end
local count = redis.call('ZCARD', KEYS[1]) + leased
local out = {now, count}
local take = ARGV[3] == '1'
local added = {}
local counts = {}
for i = 4, #ARGV do
  if take and count < tonumber(ARGV[i]) then
    count = count + 1
    added[#added + 1] = now
    added[#added + 1] = ARGV[2] .. (i - 3)
  end
  counts[#counts + 1] = count
end
if #added > 0 then
  redis.call('ZADD', KEYS[1], unpack(added))
  redis.call('PEXPIRE', KEYS[1], window)
end
local at = {}
for j = 1, #counts do
  local rank = counts[j] - tonumber(ARGV[j + 3])
  if rank < 0 then rank = 0 end
  local score = at[rank]
  if score == nil then
    local m = redis.call('ZRANGE', KEYS[1], rank, rank, 'WITHSCORES')
    score = now
    if m[2] then score = tonumber(m[2]) end
    at[rank] = score
  end
  -- Refused: slots leased and not used come back when their lease ends, sooner when that comes first.
  if counts[j] >= tonumber(ARGV[j + 3]) and soonest >= 0 and soonest - window < score then score = soonest - window end
  out[#out + 1] = counts[j]
  out[#out + 1] = score
end
return out
`

interface RateCommands {
  svcRateWindow(key: string, leases: string, windowMs: number, member: string, count: '0' | '1', ...limits: number[]): Promise<number[]>
}

/**
 * A batch holds at most this many requests: one script call's arguments, and the time the script holds Redis
 * (every other command waits for it), stay bounded.
 */
const MAX_BATCH = 256

/** The takes of one account waiting for the end of this turn of the event loop. */
class Batch {
  readonly limits: number[] = []
  readonly settle: ((d: RateDecision) => void)[] = []
}

export interface SharedRateLimiterOptions {
  readonly windowMs?: number
  /** How many replicas share the limit when Redis is down (the live count of the replica registry). */
  readonly replicas: () => number
  /** Key prefix in Redis. */
  readonly prefix?: string
}

/**
 * The takes of one turn of the event loop go to Redis together: one script call per account, after the turn's
 * I/O callbacks (setImmediate), deciding them in arrival order exactly as one call each would (TAKE_SCRIPT).
 * Under load that is one round of Redis work for the many requests a turn admits, not one each; a lone request
 * waits for no timer, only for the end of the turn that read it.
 */
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
  /** Takes waiting for this turn's flush, by account. */
  #batches = new Map<string, Batch>()
  #flushQueued = false
  readonly #flush = (): void => this.#flushAll()
  /** Decisions made by the fallback, for the logs and tests. */
  fallbacks = 0
  /** Script calls made for takes (each decides a batch), for the tests; and for peeks. */
  takeCalls = 0
  peekCalls = 0

  constructor(link: RedisLink, defaultLimit: number, options: SharedRateLimiterOptions) {
    this.#link = link
    this.#client = link.client as Redis & RateCommands
    this.#client.defineCommand('svcRateWindow', { numberOfKeys: 2, lua: TAKE_SCRIPT })
    this.#defaultLimit = defaultLimit
    this.#windowMs = options.windowMs ?? 60_000
    this.#replicas = options.replicas
    this.#prefix = options.prefix ?? 'svc:rate:'
    this.fallback = new RateLimiter(defaultLimit, this.#windowMs)
  }

  take(account: string, now: number, limit = this.#defaultLimit): RateDecision | Promise<RateDecision> {
    if (!this.#link.up) return this.#alone(account, now, limit, '1')
    let batch = this.#batches.get(account)
    if (batch === undefined) {
      batch = new Batch()
      this.#batches.set(account, batch)
    }
    const decided = new Promise<RateDecision>((resolve) => batch.settle.push(resolve))
    batch.limits.push(limit)
    if (batch.limits.length >= MAX_BATCH) {
      this.#batches.delete(account)
      this.#send(account, batch)
    } else if (!this.#flushQueued) {
      this.#flushQueued = true
      setImmediate(this.#flush)
    }
    return decided
  }

  peek(account: string, now: number, limit = this.#defaultLimit): RateDecision | Promise<RateDecision> {
    if (!this.#link.up) return this.#alone(account, now, limit, '0')
    this.peekCalls++
    return this.#client.svcRateWindow(...rateKeys(this.#prefix, account), this.#windowMs, '', '0', limit).then(
      (out) => this.#decision(out, 0, limit, false),
      () => this.#alone(account, Date.now(), limit, '0'),
    )
  }

  counts(): RateCounts {
    return { leased: 0, redisCalls: this.takeCalls + this.peekCalls, alone: this.fallbacks }
  }

  #flushAll(): void {
    this.#flushQueued = false
    const batches = this.#batches
    if (batches.size === 0) return
    this.#batches = new Map()
    for (const [account, batch] of batches) this.#send(account, batch)
  }

  #send(account: string, batch: Batch): void {
    this.takeCalls++
    const member = this.#tag + ':' + (this.#seq++).toString(36) + ':'
    // Unanswered (down, or past the command timeout): each decided alone, in order.
    const alone = (): void => {
      for (let i = 0; i < batch.settle.length; i++) batch.settle[i]!(this.#alone(account, Date.now(), batch.limits[i]!, '1'))
    }
    let answer: Promise<number[]>
    try {
      answer = this.#client.svcRateWindow(...rateKeys(this.#prefix, account), this.#windowMs, member, '1', ...batch.limits)
    } catch {
      // Called from a timer: nothing above would catch it, and the batch's requests would wait forever.
      return alone()
    }
    answer.then((out) => {
      for (let i = 0; i < batch.settle.length; i++) batch.settle[i]!(this.#decision(out, i, batch.limits[i]!, true))
    }, alone)
  }

  /** Request i's decision from the script's answer: admitted when the window grew with it. */
  #decision(out: number[], i: number, limit: number, take: boolean): RateDecision {
    const serverNow = out[0]!
    const held = out[2 + 2 * i]!
    const before = i === 0 ? out[1]! : out[2 * i]!
    const allowed = take ? held > before : held < limit
    // The server's clock decided; the reset time is given on ours.
    const untilReset = out[3 + 2 * i]! + this.#windowMs - serverNow
    return {
      allowed,
      limit,
      remaining: Math.max(0, limit - held),
      resetAt: Date.now() + untilReset,
      retryAfter: allowed ? 0 : Math.max(1, Math.ceil(untilReset / 1000)),
    }
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
