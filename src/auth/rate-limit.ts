/**
 * Per-account request limit over a sliding window (spec §8, DESIGN.md §4). Exact: each account keeps the
 * arrival times of its last `limit` admitted requests in a ring, so "how many in the last 60 s" is a count,
 * not an approximation. In memory, O(1) amortised per request, no store I/O.
 */

export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /** Epoch ms when the oldest request in the window leaves it (a slot frees up). */
  resetAt: number
  /** Whole seconds until a retry can succeed (429 only). */
  retryAfter: number
}

class Window {
  times: Float64Array
  tail = 0
  count = 0

  constructor(limit: number) {
    this.times = new Float64Array(Math.max(1, limit))
  }
}

export class RateLimiter {
  readonly #windowMs: number
  readonly #defaultLimit: number
  readonly #windows = new Map<string, Window>()
  /** Reused for every decision: valid until the next take(). */
  readonly #decision: RateDecision = { allowed: true, limit: 0, remaining: 0, resetAt: 0, retryAfter: 0 }

  constructor(defaultLimit: number, windowMs = 60_000) {
    this.#defaultLimit = defaultLimit
    this.#windowMs = windowMs
  }

  get defaultLimit(): number {
    return this.#defaultLimit
  }

  /** Admits or refuses one request of `account` at `now` (epoch ms). `limit` overrides the default. */
  take(account: string, now: number, limit = this.#defaultLimit): RateDecision {
    let w = this.#windows.get(account)
    if (w === undefined || w.times.length !== Math.max(1, limit)) {
      w = this.#resize(w, limit)
      this.#windows.set(account, w)
    }
    const cap = w.times.length
    const horizon = now - this.#windowMs
    while (w.count > 0 && w.times[w.tail]! <= horizon) {
      w.tail = (w.tail + 1) % cap
      w.count--
    }
    const d = this.#decision
    d.limit = limit
    if (w.count >= limit) {
      d.allowed = false
      d.remaining = 0
      d.resetAt = w.times[w.tail]! + this.#windowMs
      d.retryAfter = Math.max(1, Math.ceil((d.resetAt - now) / 1000))
      return d
    }
    w.times[(w.tail + w.count) % cap] = now
    w.count++
    d.allowed = true
    d.remaining = limit - w.count
    d.resetAt = w.times[w.tail]! + this.#windowMs
    d.retryAfter = 0
    return d
  }

  /** A new ring for a changed limit, keeping the newest arrivals that still fit. */
  #resize(old: Window | undefined, limit: number): Window {
    const w = new Window(limit)
    if (old === undefined) return w
    const keep = Math.min(old.count, w.times.length)
    for (let i = old.count - keep; i < old.count; i++) {
      w.times[w.count++] = old.times[(old.tail + i) % old.times.length]!
    }
    return w
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
