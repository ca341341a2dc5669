/**
 * The account window shared by replicas, leased (issue #45): a replica takes a share of an account's window
 * from Redis (a lease of up to `leaseSize` admissions, valid `leaseMs`), admits requests out of it in memory
 * with no Redis command, and reports what it used (each admission at the time it was made, as an entry of
 * the window). When half a lease is used, the next is asked for while this one still admits: the call reports
 * the use, keeps the unused slots leased and tops them up to `leaseSize` (a replica never holds more), so at
 * steady load no request waits for Redis, however far away it is. A lease that stops being used is given back
 * whole once it is past its use (or at close).
 * The window in Redis counts, besides its entries, every live lease in full: what replicas hold unused is
 * refused to the others, so the limit is never passed while leases are reported in time.
 *
 * The slack, for an account with limit L over R replicas and leases of S admissions:
 * - never more than L admitted in any window, except that a replica that dies, or stalls past its lease, with
 *   a lease half used forgets up to S admissions it had not reported: its lease expires in Redis after
 *   `leaseMs` (slots come back) and those admissions are not in the window;
 * - a request the window refuses only for slots other replicas hold unused waits once, at most `leaseMs`, for
 *   the soonest of their leases to end, and is decided again (as a hold waits for budget others hold); it is
 *   refused if they are still held then: at most (R − 1) × S of them. Leases shrink as the window fills (a
 *   grant is at most half of a replica's share of what is left), so near the limit requests go to Redis one
 *   call per turn, as without leases.
 * Redis down: each replica decides alone on its share, as SharedRateLimiter does.
 */
import type { Redis } from 'ioredis'
import { RateLimiter, type RateCounts, type RateDecision, type RateGate } from '../auth/rate-limit.js'
import type { RedisLink } from './redis.js'
import { rateKeys } from './rate-window.js'

/**
 * KEYS[1] the window (sorted set of admissions), KEYS[2] its leases (hash: holder → "slots:expires at").
 * ARGV: window ms, lease ms, holder, member prefix, grant limit, slots wanted, replicas, mode ('take': return
 * the holder's lease, decide the requests, grant a new one; 'peek': count only), slots of its lease the holder
 * keeps (a renewal before it runs out: they stay leased, to a new expiry, with the grant added), then the number
 * of used slots reported, each as ms before now, then one limit per request to decide, in arrival order. Returns
 * {server now, count before the requests (the kept slots not in it), requests admitted, slots granted, the score
 * of the entry whose leaving lets the window admit again (server now when empty), the soonest expiry of another
 * holder's lease (-1: none), the slots other holders' leases hold}.
 */
const LEASE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local leaseMs = tonumber(ARGV[2])
local holder = ARGV[3]
local prefix = ARGV[4]
local take = ARGV[8] == 'take'
local keep = tonumber(ARGV[9])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = tonumber(ARGV[10])
local added = {}
for i = 1, used do
  local at = now - tonumber(ARGV[10 + i])
  if at > now - window then
    added[#added + 1] = at
    added[#added + 1] = prefix .. 'u' .. i
  end
end
if take then redis.call('HDEL', KEYS[2], holder) end
local leased = 0
local soonest = -1
local all = redis.call('HGETALL', KEYS[2])
for j = 1, #all, 2 do
  local v = all[j + 1]
  local sep = string.find(v, ':', 1, true)
  local slots = tonumber(string.sub(v, 1, sep - 1))
  local expires = tonumber(string.sub(v, sep + 1))
  if expires <= now then
    redis.call('HDEL', KEYS[2], all[j])
  elseif all[j] ~= holder then
    leased = leased + slots
    if soonest < 0 or expires < soonest then soonest = expires end
  end
end
local count = redis.call('ZCARD', KEYS[1]) + #added / 2 + leased + keep
local before = count - keep
local admitted = 0
for i = 11 + used, #ARGV do
  if take and count < tonumber(ARGV[i]) then
    count = count + 1
    admitted = admitted + 1
    added[#added + 1] = now
    added[#added + 1] = prefix .. 'r' .. admitted
  end
end
if #added > 0 then redis.call('ZADD', KEYS[1], unpack(added)) end
local limit = tonumber(ARGV[5])
local rank = count - limit
if rank < 0 then rank = 0 end
local m = redis.call('ZRANGE', KEYS[1], rank, rank, 'WITHSCORES')
local score = now
if m[2] then score = tonumber(m[2]) end
local granted = 0
if take and count < limit then
  granted = math.min(tonumber(ARGV[6]), math.floor((limit - count) / tonumber(ARGV[7])))
  if granted < 0 then granted = 0 end
end
if take and keep + granted > 0 then redis.call('HSET', KEYS[2], holder, (keep + granted) .. ':' .. (now + leaseMs)) end
if #added > 0 or keep + granted > 0 then
  redis.call('PEXPIRE', KEYS[1], window + leaseMs)
  redis.call('PEXPIRE', KEYS[2], window + leaseMs)
end
return {now, before, admitted, granted, score, soonest, leased}
`

interface LeaseCommands {
  svcRateLease(window: string, leases: string, ...args: (string | number)[]): Promise<number[]>
}

/** At most this many requests decided by one script call (its arguments, and its time holding Redis, bounded). */
const MAX_BATCH = 256

/** One account's lease on this replica, and the requests waiting for Redis because it ran out. */
class AccountLease {
  /** Admissions left in the lease. */
  slots = 0
  /** performance.now() of each admission out of the lease not reported yet. */
  used: number[] = []
  /** performance.now() after which the lease admits no more (a margin before it expires in Redis). */
  usableUntil = 0
  /** The window's count, other replicas' leases included, when the lease was granted. */
  base = 0
  limit = 0
  /** Epoch ms (ours) when the window admits again, as of the grant. */
  resetAt = 0
  /** One script call per account at a time: a second would return a lease the first's answer sets up. */
  inflight = false
  /** When the lease is down to this many slots, it is renewed in the background (-1: not again until an answer). */
  renewAt = -1
  limits: number[] = []
  settle: ((d: RateDecision) => void)[] = []
  /** Whether each waiting request already waited once for other replicas' leases to end. */
  waited: boolean[] = []
  /** Requests waiting for other replicas' leases to end (not in `settle` meanwhile): the account is kept. */
  deferred = 0
}

export interface LeasedRateLimiterOptions {
  readonly windowMs?: number
  /** Admissions a replica leases at most at once (S). */
  readonly leaseSize: number
  /** How long a lease lives in Redis; a replica stops admitting out of it a quarter before, and returns it. */
  readonly leaseMs: number
  /** How many replicas share the limit (the live count of the replica registry). */
  readonly replicas: () => number
  readonly prefix?: string
}

export class LeasedRateLimiter implements RateGate {
  readonly #link: RedisLink
  readonly #client: Redis & LeaseCommands
  readonly #o: Required<LeasedRateLimiterOptions>
  readonly #defaultLimit: number
  readonly #holder = Math.random().toString(36).slice(2, 12)
  readonly #accounts = new Map<string, AccountLease>()
  readonly #waiting = new Set<string>()
  #flushQueued = false
  #seq = 0
  readonly #sweeper: NodeJS.Timeout
  /** The window this replica keeps alone while Redis is unreachable. */
  readonly fallback: RateLimiter
  fallbacks = 0
  /** Script calls made (takes, returns and peeks), for the tests. */
  calls = 0
  /** Admissions made out of a lease, with no Redis command, for the tests and metrics. */
  leasedAdmissions = 0

  constructor(link: RedisLink, defaultLimit: number, options: LeasedRateLimiterOptions) {
    this.#link = link
    this.#client = link.client as Redis & LeaseCommands
    this.#client.defineCommand('svcRateLease', { numberOfKeys: 2, lua: LEASE_SCRIPT })
    this.#defaultLimit = defaultLimit
    this.#o = { windowMs: 60_000, prefix: 'svc:rate:', ...options }
    this.fallback = new RateLimiter(defaultLimit, this.#o.windowMs)
    // A lease is returned within an eighth of its life after it stops admitting (usableUntil, three quarters):
    // its report reaches Redis before the lease expires there, unless the process stalls.
    this.#sweeper = setInterval(() => this.#sweep(), Math.max(5, Math.floor(this.#o.leaseMs / 8)))
    this.#sweeper.unref()
  }

  take(account: string, now: number, limit = this.#defaultLimit): RateDecision | Promise<RateDecision> {
    if (!this.#link.up) return this.#alone(account, now, limit, true)
    let a = this.#accounts.get(account)
    if (a === undefined) this.#accounts.set(account, (a = new AccountLease()))
    const t = performance.now()
    if (a.slots > 0 && a.limit === limit && t < a.usableUntil && a.settle.length === 0) return this.#fromLease(account, a, t)
    const decided = new Promise<RateDecision>((resolve) => a.settle.push(resolve))
    a.limits.push(limit)
    a.waited.push(false)
    this.#queue(account)
    return decided
  }

  async peek(account: string, now: number, limit = this.#defaultLimit): Promise<RateDecision> {
    if (!this.#link.up) return this.#alone(account, now, limit, false)
    const a = this.#accounts.get(account)
    try {
      this.calls++
      const out = await this.#client.svcRateLease(...this.#keys(account), this.#o.windowMs, this.#o.leaseMs, this.#holder, '', limit, 0, 1, 'peek', 0, 0)
      // The script leaves this replica's own lease out: what it used of it counts, what it has left does not.
      const held = out[1]! + (a?.used.length ?? 0)
      return { allowed: held < limit, limit, remaining: Math.max(0, limit - held), resetAt: this.#resetAt(out, limit, held), retryAfter: 0 }
    } catch {
      return this.#alone(account, Date.now(), limit, false)
    }
  }

  counts(): RateCounts {
    return { leased: this.leasedAdmissions, redisCalls: this.calls, alone: this.fallbacks }
  }

  /** Gives every lease back (at close). */
  async close(): Promise<void> {
    clearInterval(this.#sweeper)
    await Promise.all([...this.#accounts].map(([account, a]) => (a.inflight || (a.slots === 0 && a.used.length === 0) ? null : this.#send(account, a, 0, false))))
  }

  #fromLease(account: string, a: AccountLease, t: number): RateDecision {
    a.slots--
    a.used.push(t)
    this.leasedAdmissions++
    // Half the lease is left: the next one is asked for now, while this one still admits, so a replica a round
    // trip from Redis does not hold requests for it at steady load.
    if (a.slots <= a.renewAt && !a.inflight) {
      a.renewAt = -1
      this.#queue(account)
    }
    const held = a.base + a.used.length
    return { allowed: true, limit: a.limit, remaining: Math.max(0, a.limit - held), resetAt: a.resetAt, retryAfter: 0 }
  }

  #keys(account: string): [string, string] {
    return rateKeys(this.#o.prefix, account)
  }

  #flush(): void {
    this.#flushQueued = false
    for (const account of this.#waiting) {
      const a = this.#accounts.get(account)!
      if (!a.inflight) {
        this.#waiting.delete(account)
        void this.#send(account, a, Math.min(MAX_BATCH, a.limits.length), true)
      }
    }
  }

  #queue(account: string): void {
    this.#waiting.add(account)
    if (!this.#flushQueued) {
      this.#flushQueued = true
      setImmediate(() => this.#flush())
    }
  }

  /**
   * Reports the lease's use, decides the first `n` waiting requests and takes a new lease. With `renew`, slots
   * of the lease still usable under the same limit stay leased (to a new expiry) and go on admitting while the
   * call is out, and the new lease tops them up to the lease size; else the lease is returned whole.
   */
  async #send(account: string, a: AccountLease, n: number, renew: boolean): Promise<void> {
    a.inflight = true
    const limits = a.limits.splice(0, n)
    const settle = a.settle.splice(0, n)
    const waited = a.waited.splice(0, n)
    const sentAt = performance.now()
    const ages = a.used.map((u) => Math.max(0, Math.round(sentAt - u)))
    // Reported now: counted in the base until the answer brings the window's count.
    a.base += ages.length
    a.used = []
    const limit = limits.length > 0 ? limits[limits.length - 1]! : a.limit > 0 ? a.limit : this.#defaultLimit
    const keep = renew && a.slots > 0 && a.limit === limit && sentAt < a.usableUntil ? a.slots : 0
    if (keep === 0) a.slots = 0
    const want = n > 0 || keep > 0 ? Math.max(0, this.#o.leaseSize - keep) : 0
    // A grant is at most half of this replica's share of what is left: leases shrink geometrically as the
    // window fills, so what replicas hold unused when it is full (others' refusals) is a few admissions.
    const divisor = 2 * Math.max(1, this.#o.replicas())
    const member = this.#holder + ':' + (this.#seq++).toString(36) + ':'
    let out: number[]
    try {
      this.calls++
      out = await this.#client.svcRateLease(...this.#keys(account), this.#o.windowMs, this.#o.leaseMs, this.#holder, member, limit, want, divisor, 'take', keep, ages.length, ...ages, ...limits)
    } catch {
      // Unanswered (down, or past the command timeout): each decided alone, in order.
      a.inflight = false
      for (let i = 0; i < settle.length; i++) settle[i]!(this.#alone(account, Date.now(), limits[i]!, true))
      this.#next(account, a)
      return
    }
    a.inflight = false
    const before = out[1]!
    const admitted = out[2]!
    const othersLeased = out[6]!
    let later: number[] | null = null
    for (let i = 0; i < settle.length; i++) {
      const allowed = i < admitted
      const held = before + Math.min(i + 1, admitted)
      // Refused only for slots other replicas hold unused: it waits once for the soonest of their leases to
      // end (at most leaseMs) and is decided again, as a hold waits for budget other replicas hold.
      if (!allowed && !waited[i] && othersLeased > 0 && held - othersLeased < limits[i]!) {
        ;(later ??= []).push(i)
        continue
      }
      const resetAt = this.#resetAt(out, limits[i]!, held)
      settle[i]!({
        allowed,
        limit: limits[i]!,
        remaining: Math.max(0, limits[i]! - held),
        resetAt,
        retryAfter: allowed ? 0 : Math.max(1, Math.ceil((resetAt - Date.now()) / 1000)),
      })
    }
    if (later !== null) {
      const delay = Math.min(this.#o.leaseMs, Math.max(1, out[5]! - out[0]!)) + 5
      const retry = later
      a.deferred += retry.length
      setTimeout(() => {
        a.deferred -= retry.length
        a.limits.unshift(...retry.map((i) => limits[i]!))
        a.settle.unshift(...retry.map((i) => settle[i]!))
        a.waited.unshift(...retry.map(() => true))
        this.#next(account, a)
      }, delay)
    }
    // What is left of the kept slots (admissions went on out of them while the call was out), and the grant.
    a.slots += out[3]!
    a.renewAt = out[3]! > 0 ? a.slots >> 1 : -1
    a.base = before + admitted
    a.limit = limit
    a.resetAt = this.#resetAt(out, limit, a.base)
    a.usableUntil = sentAt + (this.#o.leaseMs * 3) / 4
    this.#next(account, a)
  }

  /** Requests that arrived while the call was out: out of the new lease if it has room, else the next call. */
  #next(account: string, a: AccountLease): void {
    const t = performance.now()
    while (a.settle.length > 0 && a.slots > 0 && a.limits[0] === a.limit && t < a.usableUntil) {
      a.limits.shift()
      a.waited.shift()
      a.settle.shift()!(this.#fromLease(account, a, t))
    }
    if (a.settle.length > 0) this.#queue(account)
  }

  /**
   * When the window admits again under `limit` with `held` counted, on our clock: the entry whose leaving makes
   * room, or, when the window is full of other replicas' leases, the soonest of them to end.
   */
  #resetAt(out: number[], limit: number, held: number): number {
    const serverNow = out[0]!
    let at = out[4]! + this.#o.windowMs
    if (held >= limit && out[5]! >= 0 && out[5]! < at) at = out[5]!
    return Date.now() + (at - serverNow)
  }

  /** Leases past their use are returned (their use reported); accounts idle since are forgotten. */
  #sweep(): void {
    const t = performance.now()
    for (const [account, a] of this.#accounts) {
      if (a.inflight || a.settle.length > 0 || a.deferred > 0 || t < a.usableUntil) continue
      if (a.slots > 0 || a.used.length > 0) void this.#send(account, a, 0, false)
      else this.#accounts.delete(account)
    }
  }

  #alone(account: string, now: number, limit: number, take: boolean): RateDecision {
    this.fallbacks++
    const share = Math.max(1, Math.ceil(limit / Math.max(1, this.#o.replicas())))
    const d = take ? this.fallback.take(account, now, share) : this.fallback.peek(account, now, share)
    return { ...d }
  }
}
