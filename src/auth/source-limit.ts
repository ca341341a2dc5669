/**
 * Counting per source address (auth/source-ip.ts decides the source) in fixed windows, in bounded memory: at most
 * `maxSources` sources are tracked, the least recently counted one forgotten first (a Map kept in recency order),
 * so a flood from ever new addresses costs a bounded table, never the heap. Forgetting a source can only let it
 * through early, never refuse one that is within its limit.
 *
 * Used twice: failed authentications (a source past its limit is refused before its key is even looked up, so a
 * key guesser costs no store read), and the console's sign-in routes (every request counts).
 */
import { RouterError } from '../errors.js'

/** Sources each throttle tracks at most: about 100 bytes each, so a few MB at worst. */
export const MAX_TRACKED_SOURCES = 50_000

interface Window {
  /** Epoch ms the window started. */
  start: number
  count: number
}

export interface SourceLimitSettings {
  /** Counts a source may reach in one window; the next one is refused until the window ends. */
  readonly limit: number
  readonly windowMs: number
  /** Sources tracked at most. */
  readonly maxSources: number
}

/** The 429 a refused source gets, prebuilt for each whole second of Retry-After up to a minute. */
export function limitErrors(message: (seconds: number) => string, windowMs: number): (seconds: number) => RouterError {
  const prebuilt: RouterError[] = []
  const top = Math.max(1, Math.ceil(windowMs / 1000))
  for (let s = 0; s <= Math.min(top, 3600); s++) prebuilt.push(new RouterError('rate_limit_exceeded', message(Math.max(1, s)), { 'Retry-After': String(Math.max(1, s)) }))
  return (seconds) => prebuilt[Math.min(Math.max(1, seconds), prebuilt.length - 1)]!
}

export class SourceLimit {
  readonly #settings: SourceLimitSettings
  readonly #windows = new Map<string, Window>()
  /** The latest end of a window that is over its limit: before it, some source may be refused. */
  #refusingUntil = 0

  constructor(settings: SourceLimitSettings) {
    this.#settings = settings
  }

  /** False when no source has been over its limit since the last window ended: no clock read needed. */
  get armed(): boolean {
    return this.#refusingUntil !== 0
  }

  /** False when no source can be refused now: the caller need not even work out the source. */
  refusing(now: number): boolean {
    if (this.#refusingUntil > now) return true
    this.#refusingUntil = 0
    return false
  }

  /** Seconds until `source` may count again, 0 when it may now. */
  retryAfter(source: string, now: number): number {
    const w = this.#windows.get(source)
    if (w === undefined || w.count < this.#settings.limit) return 0
    const end = w.start + this.#settings.windowMs
    return end > now ? Math.ceil((end - now) / 1000) : 0
  }

  /** Counts one for `source`; returns the seconds it must wait when this count is past its limit, else 0. */
  add(source: string, now: number): number {
    const s = this.#settings
    let w = this.#windows.get(source)
    if (w !== undefined) {
      // Re-inserted: the Map's order is recency, its first entry the one to forget.
      this.#windows.delete(source)
      if (now - w.start >= s.windowMs) {
        w.start = now
        w.count = 0
      }
    } else {
      if (this.#windows.size >= s.maxSources) this.#windows.delete(this.#windows.keys().next().value!)
      w = { start: now, count: 0 }
    }
    this.#windows.set(source, w)
    if (w.count >= s.limit) return Math.max(1, Math.ceil((w.start + s.windowMs - now) / 1000))
    w.count++
    if (w.count >= s.limit) this.#refusingUntil = Math.max(this.#refusingUntil, w.start + s.windowMs)
    return 0
  }

  /** Sources tracked now (for tests and /metrics). */
  get size(): number {
    return this.#windows.size
  }
}

/** One window for everyone: `limit` counts per `windowMs`. */
export class GlobalLimit {
  readonly #limit: number
  readonly #windowMs: number
  #start = 0
  #count = 0

  constructor(limit: number, windowMs: number) {
    this.#limit = limit
    this.#windowMs = windowMs
  }

  /** Counts one; returns the seconds to wait when past the limit, else 0. */
  add(now: number): number {
    if (now - this.#start >= this.#windowMs) {
      this.#start = now
      this.#count = 0
    }
    if (this.#count >= this.#limit) return Math.max(1, Math.ceil((this.#start + this.#windowMs - now) / 1000))
    this.#count++
    return 0
  }
}
