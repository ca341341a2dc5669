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

/** Connection-level health of one provider origin. */
export class ProviderHealth {
  consecutiveFailures = 0
  /** performance.now() until which the provider is skipped; 0 = healthy. */
  unhealthyUntil = 0
  /** Answers and failures since start, for the catalog's uptime figure. */
  okCount = 0
  failedCount = 0

  /** Percentage of tries that got an answer (100 before any try). */
  uptime(): number {
    const total = this.okCount + this.failedCount
    return total === 0 ? 100 : Math.round((this.okCount / total) * 100_000) / 1000
  }

  isHealthy(now: number): boolean {
    return this.unhealthyUntil <= now
  }

  /** Ejections in a row without a success between them: the next backoff is cooldown × 2^ejections. */
  ejections = 0

  /**
   * Outlier ejection: `failureThreshold` failures in a row (connect errors, 5xx, timeouts, broken answers) eject
   * the provider for a backoff that doubles with each ejection in a row. Once the backoff ends the provider is
   * half-open: it is routed to again, one more failure ejects it at once for the next, longer backoff, and one
   * success closes the breaker and resets the backoff. Failures of tries already under way while it is ejected
   * do not lengthen the ejection. Returns true when the provider just turned unhealthy.
   */
  recordFailure(now: number, settings: HealthSettings): boolean {
    this.failedCount++
    this.consecutiveFailures++
    if (this.consecutiveFailures < settings.failureThreshold || this.unhealthyUntil > now) return false
    const max = settings.maxCooldownMs ?? settings.cooldownMs * 32
    this.unhealthyUntil = now + Math.min(settings.cooldownMs * 2 ** Math.min(this.ejections, 30), max)
    this.ejections++
    return true
  }

  recordSuccess(): void {
    this.okCount++
    this.consecutiveFailures = 0
    this.unhealthyUntil = 0
    this.ejections = 0
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
  /** Bumped on each latency observation; the index rebuilds when it moved. */
  latencyEpoch = 0

  provider(address: string): ProviderHealth {
    let h = this.#providers.get(address)
    if (h === undefined) {
      h = new ProviderHealth()
      this.#providers.set(address, h)
    }
    return h
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
