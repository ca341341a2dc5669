/**
 * Active health probes (issue #13 §1): every `intervalMs`, each provider of the registry gets one GET of
 * `path` (relative to its base URL) through its own keep-alive pool, so a provider nobody sends traffic to is
 * still known to be up or down. An answer below 500 within `timeoutMs` is a success, and its time to first
 * byte feeds the latency EWMA of the provider's offers; anything else counts against it like a failed request.
 */
import { log } from '../log.js'
import type { RoutingTable } from '../routing/table.js'
import { upstreamPath } from '../upstream/attempt.js'
import { basePath, type UpstreamPools } from '../upstream/pools.js'
import type { HealthBook, HealthSettings } from './health.js'

export interface ProbeSettings {
  readonly intervalMs: number
  readonly path: string
  readonly timeoutMs: number
}

/** Starts probing; returns the stop. */
export function startProbes(table: RoutingTable, book: HealthBook, pools: UpstreamPools, health: HealthSettings, settings: ProbeSettings): () => void {
  const inProgress = new Set<string>()

  async function probe(address: string, url: string): Promise<void> {
    const entry = table.provider(address)
    if (entry === undefined) return
    const started = performance.now()
    // In half-open, a probe may be the one trial (health.ts); otherwise its outcome still counts.
    const trial = entry.health.claimTrial(started)
    let ok = false
    try {
      const res = await pools.get(url).request({
        path: settings.path.startsWith('/v1/') ? upstreamPath(basePath(url), entry.record.api_path, settings.path) : basePath(url) + settings.path,
        method: 'GET',
        headersTimeout: settings.timeoutMs,
        bodyTimeout: settings.timeoutMs,
        signal: AbortSignal.timeout(settings.timeoutMs),
      })
      const ttfb = performance.now() - started
      await res.body.dump()
      ok = res.statusCode < 500
      if (ok) {
        for (const [, index] of table.models()) {
          for (const o of index.offers) if (o.provider.address === address) o.stats.observeTtfb(ttfb, health.ewmaAlpha)
        }
        book.latencyEpoch++
      }
    } catch {
      ok = false
    }
    const now = performance.now()
    // An answer while ejected only counts for uptime (a provider may list its models and still fail
    // completions): it closes the breaker only once the backoff is over, as the half-open trial.
    if (ok) entry.health.recordSuccess(now, trial)
    else if (entry.health.recordFailure(now, health, trial)) log.warn('provider ejected by its health probe', { provider: address })
    if (trial) entry.health.endTrial()
  }

  const tick = (): void => {
    for (const p of table.providers()) {
      if (inProgress.has(p.address)) continue
      inProgress.add(p.address)
      probe(p.address, p.url)
        .catch((err: unknown) => log.error('health probe failed', { provider: p.address, err: String(err) }))
        .finally(() => inProgress.delete(p.address))
    }
  }
  const timer = setInterval(tick, settings.intervalMs)
  timer.unref()
  return () => clearInterval(timer)
}
