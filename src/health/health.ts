/**
 * Live health and latency of providers, kept across registry reloads (stats are keyed by address and by
 * address + model, not by snapshot). Health is a circuit breaker read inline on every selection, so a provider
 * that just failed is skipped by the very next request without waiting for an index rebuild.
 */

export interface HealthSettings {
  readonly failureThreshold: number
  readonly cooldownMs: number
  readonly ewmaAlpha: number
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

  /** Returns true when the provider just turned unhealthy (the index owner may want to know). */
  recordFailure(now: number, settings: HealthSettings): boolean {
    this.failedCount++
    this.consecutiveFailures++
    if (this.consecutiveFailures >= settings.failureThreshold) {
      const wasHealthy = this.unhealthyUntil <= now
      this.unhealthyUntil = now + settings.cooldownMs
      return wasHealthy
    }
    return false
  }

  recordSuccess(): void {
    this.okCount++
    this.consecutiveFailures = 0
    this.unhealthyUntil = 0
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
