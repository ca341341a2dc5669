/**
 * Live health and latency of providers, kept across registry reloads (stats are keyed by address and by
 * address + model, not by snapshot). Health is a circuit breaker read inline on every selection, so a provider
 * that just failed is skipped by the very next request without waiting for an index rebuild.
 */

export interface HealthSettings {
  readonly failureThreshold: number
  /** The first ejection's length; each further ejection in a row doubles it, up to maxCooldownMs. */
  readonly cooldownMs: number
  readonly ewmaAlpha: number
  /** Longest ejection (default 32 × cooldownMs). */
  readonly maxCooldownMs?: number
}

/** `health.uptime_window_ms`'s default. */
export const DEFAULT_UPTIME_WINDOW_MS = 300_000
/** The rolling window is kept as this many buckets of window / BUCKETS each. */
const BUCKETS = 12

/**
 * Successes and failures over a rolling window, in BUCKETS time buckets: a record is two array writes, and the
 * share covers the current bucket and the BUCKETS - 1 before it (between 11/12 of the window and all of it).
 */
export class UptimeWindow {
  readonly #width: number
  readonly #ok = new Uint32Array(BUCKETS)
  readonly #failed = new Uint32Array(BUCKETS)
  /** The bucket number (now / width) each slot counts for; -1: never used. */
  readonly #bucket = new Float64Array(BUCKETS).fill(-1)

  constructor(windowMs: number) {
    this.#width = Math.max(1, windowMs / BUCKETS)
  }

  record(now: number, ok: boolean): void {
    const b = Math.floor(now / this.#width)
    const i = b % BUCKETS
    if (this.#bucket[i] !== b) {
      this.#bucket[i] = b
      this.#ok[i] = 0
      this.#failed[i] = 0
    }
    if (ok) this.#ok[i]!++
    else this.#failed[i]!++
  }

  /** Percentage of successes within the window, 3 decimals; 100 when nothing was recorded in it. */
  share(now: number): number {
    const oldest = Math.floor(now / this.#width) - BUCKETS + 1
    let ok = 0
    let failed = 0
    for (let i = 0; i < BUCKETS; i++) {
      if (this.#bucket[i]! < oldest) continue
      ok += this.#ok[i]!
      failed += this.#failed[i]!
    }
    const total = ok + failed
    return total === 0 ? 100 : Math.round((ok / total) * 100_000) / 1000
  }
}

/**
 * Connection-level health of one provider origin: a circuit breaker with three states. Closed
 * (`unhealthyUntil` 0): routed to. Open (`unhealthyUntil` > now): skipped. Half-open (the backoff is over,
 * `unhealthyUntil` ≤ now): exactly one try, the trial (a request's attempt or a probe, whichever claims it
 * first), goes to the provider while every other request keeps skipping it; its success closes the breaker,
 * its failure opens it again for twice as long.
 */
export class ProviderHealth {
  consecutiveFailures = 0
  /** performance.now() until which the provider is skipped; 0 = closed (healthy). */
  unhealthyUntil = 0
  /** Ejections in a row without a success between them: the next backoff is cooldown × 2^ejections. */
  ejections = 0
  /** Half-open only: the one trial is under way. */
  trialTaken = false
  /** Told of each ejection made here, with its backoff in ms (the health exchange between replicas). */
  onEject: ((backoffMs: number) => void) | null = null
  readonly #uptime: UptimeWindow

  constructor(uptimeWindowMs = DEFAULT_UPTIME_WINDOW_MS) {
    this.#uptime = new UptimeWindow(uptimeWindowMs)
  }

  /** Percentage of successful requests and probes over the rolling window (100 when there was none). */
  uptime(now = performance.now()): number {
    return this.#uptime.share(now)
  }

  /** Whether a request may be routed here: closed, or half-open with its trial not yet taken. */
  isHealthy(now: number): boolean {
    return this.unhealthyUntil <= now && !this.trialTaken
  }

  /**
   * Half-open and nobody took the trial: the caller's try is the trial (it must call endTrial() when that try
   * is over). False in any other state: the try, if made, is an ordinary one.
   */
  claimTrial(now: number): boolean {
    if (this.unhealthyUntil === 0 || this.unhealthyUntil > now || this.trialTaken) return false
    this.trialTaken = true
    return true
  }

  /** The trial is over; if it neither succeeded nor failed (a 429, a client gone), the next try is the trial. */
  endTrial(): void {
    this.trialTaken = false
  }

  /**
   * Outlier ejection: `failureThreshold` failures in a row (connect errors, 5xx, timeouts, broken answers) eject
   * the provider for a backoff that doubles with each ejection in a row. In half-open one more failure ejects
   * it at once for the next, longer backoff. Failures of tries already under way while it is ejected do not
   * lengthen the ejection, nor do those of other tries while the half-open trial is under way (`trial`: this
   * is the trial's own outcome). Returns true when the provider just turned unhealthy.
   */
  recordFailure(now: number, settings: HealthSettings, trial = false): boolean {
    this.#uptime.record(now, false)
    this.consecutiveFailures++
    if (this.consecutiveFailures < settings.failureThreshold || this.unhealthyUntil > now) return false
    if (this.trialTaken && !trial) return false
    const max = settings.maxCooldownMs ?? settings.cooldownMs * 32
    this.unhealthyUntil = now + Math.min(settings.cooldownMs * 2 ** Math.min(this.ejections, 30), max)
    this.ejections++
    this.trialTaken = false
    this.onEject?.(this.unhealthyUntil - now)
    return true
  }

  /**
   * Another replica ejected this provider for `backoffMs`: skip it as long, without counting a failure of ours
   * (its own next trial, or ours after the backoff, decides again).
   */
  ejectedElsewhere(now: number, backoffMs: number): void {
    const until = now + backoffMs
    if (until <= this.unhealthyUntil) return
    this.unhealthyUntil = until
    this.trialTaken = false
  }

  /**
   * An answer. While ejected it only counts for uptime (a try under way when the provider was ejected, or a
   * probe, does not cut the backoff short), and so while another try holds the half-open trial; otherwise it
   * closes the breaker and resets the backoff. `trial`: this is the trial's own outcome.
   */
  recordSuccess(now: number, trial = false): void {
    this.#uptime.record(now, true)
    if (this.unhealthyUntil > now || (this.trialTaken && !trial)) return
    this.consecutiveFailures = 0
    this.unhealthyUntil = 0
    this.ejections = 0
    this.trialTaken = false
  }
}

/** Per provider and model: requests in flight and the EWMA of time to first byte. */
export class OfferStats {
  inflight = 0
  /** Milliseconds; NaN until the first observation. */
  ewmaTtfbMs = Number.NaN
  samples = 0

  observeTtfb(ms: number, alpha: number): void {
    this.ewmaTtfbMs = this.samples === 0 ? ms : this.ewmaTtfbMs + alpha * (ms - this.ewmaTtfbMs)
    this.samples++
  }
}

/** Stats that outlive registry snapshots. */
export class HealthBook {
  readonly #providers = new Map<string, ProviderHealth>()
  readonly #offers = new Map<string, OfferStats>()
  readonly #uptimeWindowMs: number
  /** Bumped on each latency observation; the index rebuilds when it moved. */
  latencyEpoch = 0
  #onEject: ((address: string, backoffMs: number) => void) | null = null

  constructor(uptimeWindowMs = DEFAULT_UPTIME_WINDOW_MS) {
    this.#uptimeWindowMs = uptimeWindowMs
  }

  provider(address: string): ProviderHealth {
    let h = this.#providers.get(address)
    if (h === undefined) {
      h = new ProviderHealth(this.#uptimeWindowMs)
      this.#watch(address, h)
      this.#providers.set(address, h)
    }
    return h
  }

  /** Calls `listener` on every ejection made by this process (not those heard from others). */
  onEject(listener: ((address: string, backoffMs: number) => void) | null): void {
    this.#onEject = listener
    for (const [address, h] of this.#providers) this.#watch(address, h)
  }

  #watch(address: string, h: ProviderHealth): void {
    const listener = this.#onEject
    h.onEject = listener === null ? null : (backoffMs) => listener(address, backoffMs)
  }

  /** Latency EWMAs of the offers with at least one observation here, by offer key (address + '\n' + model). */
  latencies(): Map<string, number> {
    const out = new Map<string, number>()
    for (const [key, s] of this.#offers) if (s.samples > 0) out.set(key, s.ewmaTtfbMs)
    return out
  }

  /** Latencies another replica observed: blended in as one observation each (a first one is taken as it is). */
  observeElsewhere(latencies: Iterable<[string, number]>, alpha: number): void {
    let moved = false
    for (const [key, ms] of latencies) {
      if (!Number.isFinite(ms) || ms < 0) continue
      const at = key.indexOf('\n')
      if (at <= 0) continue
      this.offer(key.slice(0, at), key.slice(at + 1)).observeTtfb(ms, alpha)
      moved = true
    }
    if (moved) this.latencyEpoch++
  }

  offer(address: string, modelId: string): OfferStats {
    const key = address + '\n' + modelId
    let s = this.#offers.get(key)
    if (s === undefined) {
      s = new OfferStats()
      this.#offers.set(key, s)
    }
    return s
  }

  /** Drops stats of providers no longer in the registry. */
  retain(addresses: ReadonlySet<string>): void {
    for (const address of this.#providers.keys()) if (!addresses.has(address)) this.#providers.delete(address)
    for (const key of this.#offers.keys()) {
      if (!addresses.has(key.slice(0, key.indexOf('\n')))) this.#offers.delete(key)
    }
  }
}
