/**
 * Per-account request limit over a sliding window (spec §8, DESIGN.md §4). Exact: each account keeps the
 * arrival times of its last `limit` admitted requests in a ring, so "how many in the last 60 s" is a count,
 * not an approximation. In memory, O(1) amortised per request, no store I/O.
 */

export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /**
   * Epoch ms when a request would next be admitted: the oldest request in the window leaves it. When the window
   * holds more than `limit` (the account's limit was lowered meanwhile), the one whose leaving brings the count
   * under the limit: the (count - limit + 1)th oldest.
   */
  resetAt: number
  /** Whole seconds until a retry can succeed (429 only). */
  retryAfter: number
}

/**
 * What admission asks of a rate limit: this process's window (RateLimiter), or one shared by every replica
 * (coordination/rate-window.ts), which answers after a round trip.
 */
export interface RateGate {
  /** Admits or refuses one request of `account` at `now` (epoch ms). `limit` overrides the default. */
  take(account: string, now: number, limit?: number): RateDecision | Promise<RateDecision>
  /** The account's standing as take() would report it, without counting a request. */
  peek(account: string, now: number, limit?: number): RateDecision | Promise<RateDecision>
  /** Where this replica's decisions were made so far (a gate shared through Redis: /metrics). */
  counts?(): RateCounts
}

/** Running totals of a shared gate: admissions out of a lease, script calls to Redis, decisions made alone. */
export interface RateCounts {
  readonly leased: number
  readonly redisCalls: number
  readonly alone: number
}

/** Arrival times of the admitted requests still in the window, oldest at `tail`, in a ring that grows on demand. */
class Window {
  times: Float64Array
  tail = 0
  count = 0

  constructor(capacity: number) {
    this.times = new Float64Array(capacity)
  }

  /**
   * When the window admits again under `limit` (windowMs after the arrival whose leaving makes room; see
   * RateDecision.resetAt). Not empty.
   */
  freeAt(limit: number, windowMs: number): number {
    const beyond = this.count >= limit ? this.count - limit : 0
    return this.times[(this.tail + beyond) % this.times.length]! + windowMs
  }

  /** Appends `now`, doubling the ring when it is full (at most to `limit` entries: more are never held). */
  push(now: number, limit: number): void {
    if (this.count === this.times.length) {
      const grown = new Float64Array(Math.min(Math.max(this.times.length * 2, INITIAL_CAPACITY), Math.max(limit, 1)))
      for (let i = 0; i < this.count; i++) grown[i] = this.times[(this.tail + i) % this.times.length]!
      this.times = grown
      this.tail = 0
    }
    this.times[(this.tail + this.count) % this.times.length] = now
    this.count++
  }
}

/**
 * A ring starts this small and doubles as an account fills its window: memory follows the requests actually
 * in the window, not the configured limit (a limit of 100,000,000/min must not cost 800 MB per account).
 */
const INITIAL_CAPACITY = 64

export class RateLimiter implements RateGate {
  readonly #windowMs: number
  readonly #defaultLimit: number
  readonly #windows = new Map<string, Window>()
  /** Reused for every decision: valid until the next take(). */
  readonly #decision: RateDecision = { allowed: true, limit: 0, remaining: 0, resetAt: 0, retryAfter: 0 }

  constructor(defaultLimit: number, windowMs = 60_000) {
    this.#defaultLimit = defaultLimit
    this.#windowMs = windowMs
  }

  /** Admits or refuses one request of `account` at `now` (epoch ms). `limit` overrides the default. */
  take(account: string, now: number, limit = this.#defaultLimit): RateDecision {
    let w = this.#windows.get(account)
    if (w === undefined) {
      w = new Window(Math.min(INITIAL_CAPACITY, Math.max(limit, 1)))
      this.#windows.set(account, w)
    }
    this.#expire(w, now)
    const d = this.#decision
    d.limit = limit
    if (w.count >= limit) {
      d.allowed = false
      d.remaining = 0
      d.resetAt = w.freeAt(limit, this.#windowMs)
      d.retryAfter = Math.max(1, Math.ceil((d.resetAt - now) / 1000))
      return d
    }
    w.push(now, limit)
    d.allowed = true
    d.remaining = limit - w.count
    d.resetAt = w.freeAt(limit, this.#windowMs)
    d.retryAfter = 0
    return d
  }

  /**
   * The account's standing at `now` as take() would report it, without counting a request: for answers that
   * carry the X-RateLimit-* headers but are no request of the limit's (a poll of an async job).
   */
  peek(account: string, now: number, limit = this.#defaultLimit): RateDecision {
    const w = this.#windows.get(account)
    if (w !== undefined) this.#expire(w, now)
    const held = w?.count ?? 0
    const d = this.#decision
    d.limit = limit
    d.allowed = held < limit
    d.remaining = Math.max(0, limit - held)
    d.resetAt = held > 0 ? w!.freeAt(limit, this.#windowMs) : now + this.#windowMs
    d.retryAfter = 0
    return d
  }

  /** Drops the arrivals that left the window by `now`. */
  #expire(w: Window, now: number): void {
    const horizon = now - this.#windowMs
    while (w.count > 0 && w.times[w.tail]! <= horizon) {
      w.tail = (w.tail + 1) % w.times.length
      w.count--
    }
  }
}

/** Caches the ISO text of a reset time: it only changes when the oldest request in the window leaves. */
export class ResetClock {
  #ms = -1
  #text = ''

  iso(ms: number): string {
    if (ms !== this.#ms) {
      this.#ms = ms
      this.#text = new Date(ms).toISOString()
    }
    return this.#text
  }
}

const resetClock = new ResetClock()

/** x-request-id and the X-RateLimit-* headers of spec §4.8 for `rate`: on every answer of an inference request. */
export function rateLimitHeaders(requestId: string, rate: RateDecision): string[] {
  return [
    'x-request-id',
    requestId,
    'X-RateLimit-Limit-Requests',
    String(rate.limit),
    'X-RateLimit-Remaining-Requests',
    String(rate.remaining),
    'X-RateLimit-Reset-Requests',
    resetClock.iso(rate.resetAt),
  ]
}
