/**
 * Prometheus metrics (spec §8, DESIGN.md §5) as a subscriber of the engine's diagnostics_channel events: the
 * engine never calls this module. Gauges of live state (provider health and latency, requests in flight) are
 * read when /metrics is scraped, not kept up to date on the hot path. Everything lives in a registry of its
 * own, so two routers in one process (tests) do not share counters.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { ProviderEntry } from '../routing/offers.js'
import type { RoutingTable } from '../routing/table.js'
import type { AttemptEvent, LedgerCommitEvent, RequestEndEvent, SettleEvent } from './events.js'

/** Ledger commits are fsyncs: finer at the low end than request latencies. */
const COMMIT_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
const ATTO_PER_USD = 10n ** 18n

export interface Metrics {
  readonly registry: Registry
  readonly contentType: string
  /** The Prometheus text exposition. */
  render(): Promise<string>
  /** Unsubscribes from the engine's events. */
  close(): void
}

/** Live state read at scrape time, beside the routing table. */
export interface MetricsSources {
  /** Charges waiting for, or inside, a group commit (ChargeWriter.queued). */
  readonly chargesQueued: () => number
}

export function startMetrics(table: RoutingTable, sources: MetricsSources): Metrics {
  const registry = new Registry()
  // Event-loop lag, RSS, heap, GC, handles: prom-client's process collectors (nodejs_eventloop_lag_seconds,
  // process_resident_memory_bytes, …).
  collectDefaultMetrics({ register: registry, prefix: 'svc_' })

  const requests = new Counter({
    name: 'svc_requests_total',
    help: 'Inference requests answered, by surface, HTTP status, answering provider and model.',
    labelNames: ['surface', 'status', 'provider', 'model'] as const,
    registers: [registry],
  })
  const duration = new Histogram({
    name: 'svc_request_duration_seconds',
    help: 'Time from arrival to the last byte of the answer.',
    labelNames: ['surface', 'model'] as const,
    buckets: SECONDS_BUCKETS,
    registers: [registry],
  })
  const ttfb = new Histogram({
    name: 'svc_time_to_first_token_seconds',
    help: 'Time from dispatch to the first byte of the answering provider.',
    labelNames: ['provider'] as const,
    buckets: SECONDS_BUCKETS,
    registers: [registry],
  })
  let inflightCount = 0
  new Gauge({
    name: 'svc_requests_in_flight',
    help: 'Inference requests started and not yet ended.',
    registers: [registry],
    collect() {
      this.set(inflightCount)
    },
  })
  const attempts = new Counter({
    name: 'svc_upstream_attempts_total',
    help: 'Tries against providers, by provider and outcome (ok, or the failure reason).',
    labelNames: ['provider', 'outcome'] as const,
    registers: [registry],
  })
  const failovers = new Counter({
    name: 'svc_failovers_total',
    help: 'Requests that moved on from one provider to another (one per extra attempt).',
    registers: [registry],
  })
  const charges = new Counter({
    name: 'svc_charges_total',
    help: 'Charges settled, by durability (durable=false: the charge could not be recorded).',
    labelNames: ['durable'] as const,
    registers: [registry],
  })
  const billedUsd = new Counter({
    name: 'svc_billed_usd_total',
    help: 'USD billed by durable charges.',
    registers: [registry],
  })
  const commits = new Histogram({
    name: 'svc_ledger_commit_seconds',
    help: 'Group-commit transactions of charges: time from the store call to its outcome, by outcome.',
    labelNames: ['ok'] as const,
    buckets: COMMIT_BUCKETS,
    registers: [registry],
  })
  const committed = new Counter({
    name: 'svc_ledger_committed_charges_total',
    help: 'Charges in group-commit transactions, by outcome (ok=false: the transaction failed).',
    labelNames: ['ok'] as const,
    registers: [registry],
  })
  new Gauge({
    name: 'svc_ledger_charges_queued',
    help: 'Charges settled and not yet committed to the store (group-commit queue and the batch being written).',
    registers: [registry],
    collect() {
      this.set(sources.chargesQueued())
    },
  })
  const providersOf = (): Iterable<ProviderEntry> => table.providers()
  new Gauge({
    name: 'svc_provider_healthy',
    help: '1 when the provider is healthy (routed to), 0 while it is ejected.',
    labelNames: ['provider'] as const,
    registers: [registry],
    collect() {
      this.reset()
      const now = performance.now()
      for (const p of providersOf()) this.set({ provider: p.address }, p.health.isHealthy(now) ? 1 : 0)
    },
  })
  new Gauge({
    name: 'svc_provider_uptime_ratio',
    help: 'Share of successful requests and probes of the provider over the rolling window (health.uptime_window_ms), 0..1.',
    labelNames: ['provider'] as const,
    registers: [registry],
    collect() {
      this.reset()
      for (const p of providersOf()) this.set({ provider: p.address }, p.health.uptime() / 100)
    },
  })
  new Gauge({
    name: 'svc_provider_latency_seconds',
    help: 'EWMA of time to first byte per provider and model (absent until observed).',
    labelNames: ['provider', 'model'] as const,
    registers: [registry],
    collect() {
      this.reset()
      for (const [model, index] of table.models()) {
        for (const o of index.offers) {
          if (!Number.isNaN(o.stats.ewmaTtfbMs)) this.set({ provider: o.provider.address, model }, o.stats.ewmaTtfbMs / 1000)
        }
      }
    },
  })

  const onStart = (_m: unknown): void => {
    inflightCount++
  }
  const onCommit = (m: unknown): void => {
    const e = m as LedgerCommitEvent
    const ok = e.ok ? 'true' : 'false'
    commits.observe({ ok }, e.durationMs / 1000)
    committed.inc({ ok }, e.charges)
  }
  const onAttempt = (m: unknown): void => {
    const e = m as AttemptEvent
    attempts.inc({ provider: e.provider, outcome: e.error ?? 'ok' })
  }
  const onSettle = (m: unknown): void => {
    const e = m as SettleEvent
    charges.inc({ durable: e.durable ? 'true' : 'false' })
    if (e.durable && e.cost > 0n) billedUsd.inc(Number(e.cost) / Number(ATTO_PER_USD))
  }
  const onEnd = (m: unknown): void => {
    const e = m as RequestEndEvent
    // A request refused by admission had no start event.
    if (e.admitted) inflightCount--
    const model = e.catalogModel ? e.model : ''
    requests.inc({ surface: e.surface, status: String(e.status), provider: e.provider ?? '', model })
    duration.observe({ surface: e.surface, model }, e.durationMs / 1000)
    if (e.ttfbMs !== null && e.provider !== null) ttfb.observe({ provider: e.provider }, e.ttfbMs / 1000)
    if (e.attempts > 1) failovers.inc(e.attempts - 1)
  }
  const subs: [string, (m: unknown) => void][] = [
    ['svc-router:request:start', onStart],
    ['svc-router:attempt:end', onAttempt],
    ['svc-router:settle', onSettle],
    ['svc-router:request:end', onEnd],
    ['svc-router:ledger:commit', onCommit],
  ]
  for (const [name, fn] of subs) subscribe(name, fn)

  return {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    close() {
      for (const [name, fn] of subs) unsubscribe(name, fn)
    },
  }
}
