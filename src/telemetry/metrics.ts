/**
 * Prometheus metrics (spec §8, DESIGN.md §5) as a subscriber of the engine's diagnostics_channel events: the
 * engine never calls this module. Gauges of live state (provider health and latency, requests in flight) are
 * read when /metrics is scraped, not kept up to date on the hot path. Everything lives in a registry of its
 * own, so two routers in one process (tests) do not share counters.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client'
import type { RateCounts } from '../auth/rate-limit.js'
import type { ProviderEntry } from '../routing/offers.js'
import { loadedUwsBuild } from '../server/uws-build.js'
import type { RoutingTable } from '../routing/table.js'
import type { AttemptEvent, LedgerCommitEvent, RegistryRefreshEvent, RequestEndEvent, SettleEvent, TeeVerifyEvent, ThrottleEvent } from './events.js'
import { type CounterCell, CounterCells, type HistogramCell, level, SeriesHistogram } from './series.js'

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
  /** What streamed uploads hold now (upstream/upload-spool.ts). */
  readonly uploads?: { readonly memory: number; readonly disk: number; readonly files: number }
  /** Journal rows quarantined by the ledger fold (LedgerStore.quarantinedRows). */
  readonly ledgerQuarantined?: () => number
  /** Chain providers the router pays (src/settlement/): whether each is routable, and what it owes in neuron. */
  readonly settlement?: () => readonly { readonly address: string; readonly reason: string | null; readonly flagged: boolean; readonly unsettled: bigint; readonly results: ReadonlyMap<string, number> }[]
  /** The settlement rounds this process finished, and whether it holds the funding lock. */
  readonly settlementProgress?: () => { readonly rounds: number; readonly funder: boolean }
  /** Where the shared rate window's decisions were made (a replica with Redis: coordination/). */
  readonly rate?: () => RateCounts
}

export function startMetrics(table: RoutingTable, sources: MetricsSources): Metrics {
  const registry = new Registry()
  // Event-loop lag, RSS, heap, GC, handles: prom-client's process collectors (nodejs_eventloop_lag_seconds,
  // process_resident_memory_bytes, …).
  collectDefaultMetrics({ register: registry, prefix: 'svc_' })

  // The per-request series are cells (series.ts): an event updates fields, prom-client sees the sums on scrape.
  const requestCells = new CounterCells()
  new Counter({
    name: 'svc_requests_total',
    help: 'Inference requests answered, by surface, HTTP status, answering provider and model.',
    labelNames: ['surface', 'status', 'provider', 'model'] as const,
    registers: [registry],
    collect() {
      requestCells.flush(this)
    },
  })
  const duration = new SeriesHistogram('svc_request_duration_seconds', 'Time from arrival to the last byte of the answer.', SECONDS_BUCKETS, registry)
  const ttfb = new SeriesHistogram(
    'svc_time_to_first_token_seconds',
    'Time from dispatch to the first byte of the answering provider.',
    SECONDS_BUCKETS,
    registry,
  )
  const settlement = sources.settlement
  if (settlement !== undefined) {
    new Gauge({
      name: 'svc_settlement_provider_routable',
      help: 'Chain providers the router pays: 1 while paid for and routable, 0 while not (the log says why, once per change).',
      labelNames: ['provider', 'flagged'],
      registers: [registry],
      collect() {
        this.reset()
        for (const p of settlement()) this.set({ provider: p.address, flagged: String(p.flagged) }, p.reason === null ? 1 : 0)
      },
    })
    new Gauge({
      name: 'svc_settlement_unsettled_0g',
      help: 'What each paid provider served and has not settled yet, in 0G (by the router\'s meter).',
      labelNames: ['provider'],
      registers: [registry],
      collect() {
        this.reset()
        for (const p of settlement()) this.set({ provider: p.address }, Number(p.unsettled) / 1e18)
      },
    })
    new Counter({
      name: 'svc_settlement_results_total',
      help: 'TEESettlementResult events of the providers\' settlements for the payer, by status (partial: the sub-account fell short; others: refused by the contract).',
      labelNames: ['provider', 'status'],
      registers: [registry],
      collect() {
        this.reset()
        for (const p of settlement()) for (const [status, n] of p.results) this.inc({ provider: p.address, status }, n)
      },
    })
  }
  const progress = sources.settlementProgress
  if (progress !== undefined) {
    new Counter({
      name: 'svc_settlement_rounds_total',
      help: 'Settlement rounds this process finished (reading the sub-accounts, funding when it is the funder, signing tokens).',
      registers: [registry],
      collect() {
        this.reset()
        this.inc(progress().rounds)
      },
    })
    new Gauge({
      name: 'svc_settlement_funder',
      help: 'Whether this process funded the sub-accounts in its last round (1: it holds the funding lock; one replica at a time).',
      registers: [registry],
      collect() {
        this.set(progress().funder ? 1 : 0)
      },
    })
  }
  const rate = sources.rate
  if (rate !== undefined) {
    new Counter({
      name: 'svc_rate_window_total',
      help:
        "The account rate window's work on this replica, by kind: leased (requests admitted out of this replica's lease, " +
        'no Redis command), redis_calls (script calls to Redis: takes, returns and peeks), alone (decisions on this ' +
        "replica's share of the limit while Redis was unreachable).",
      labelNames: ['kind'] as const,
      registers: [registry],
      collect() {
        const c = rate()
        this.reset()
        this.inc({ kind: 'leased' }, c.leased)
        this.inc({ kind: 'redis_calls' }, c.redisCalls)
        this.inc({ kind: 'alone' }, c.alone)
      },
    })
  }
  let inflightCount = 0
  new Gauge({
    name: 'svc_requests_in_flight',
    help: 'Inference requests started and not yet ended.',
    registers: [registry],
    collect() {
      this.set(inflightCount)
    },
  })
  const attemptCells = new CounterCells()
  new Counter({
    name: 'svc_upstream_attempts_total',
    help: 'Tries against providers, by provider and outcome (ok, or the failure reason).',
    labelNames: ['provider', 'outcome'] as const,
    registers: [registry],
    collect() {
      attemptCells.flush(this)
    },
  })
  let failoverCount = 0
  new Counter({
    name: 'svc_failovers_total',
    help: 'Requests that moved on from one provider to another (one per extra attempt).',
    registers: [registry],
    collect() {
      this.inc(failoverCount)
      failoverCount = 0
    },
  })
  const chargeCells = new CounterCells()
  const durableCharges = chargeCells.cell({ durable: 'true' })
  const lostCharges = chargeCells.cell({ durable: 'false' })
  new Counter({
    name: 'svc_charges_total',
    help: 'Charges settled, by durability (durable=false: the charge could not be recorded).',
    labelNames: ['durable'] as const,
    registers: [registry],
    collect() {
      chargeCells.flush(this)
    },
  })
  let billedPending = 0
  new Counter({
    name: 'svc_billed_usd_total',
    help: 'USD billed by durable charges.',
    registers: [registry],
    collect() {
      this.inc(billedPending)
      billedPending = 0
    },
  })
  const commits = new SeriesHistogram(
    'svc_ledger_commit_seconds',
    'Group-commit transactions of charges: time from the store call to its outcome, by outcome.',
    COMMIT_BUCKETS,
    registry,
  )
  const commitsOk = commits.cell({ ok: 'true' })
  const commitsFailed = commits.cell({ ok: 'false' })
  const committedCells = new CounterCells()
  const committedOk = committedCells.cell({ ok: 'true' })
  const committedFailed = committedCells.cell({ ok: 'false' })
  new Counter({
    name: 'svc_ledger_committed_charges_total',
    help: 'Charges in group-commit transactions, by outcome (ok=false: the transaction failed).',
    labelNames: ['ok'] as const,
    registers: [registry],
    collect() {
      committedCells.flush(this)
    },
  })
  new Gauge({
    name: 'svc_build_info',
    help: 'Always 1: the Node.js version and ABI, and the uWebSockets.js build the front end runs on (its package, version and binary sha256).',
    labelNames: ['node', 'abi', 'uws_build', 'uws_version', 'uws_sha256'] as const,
    registers: [registry],
    collect() {
      this.reset()
      const uws = loadedUwsBuild()
      this.set(
        {
          node: process.version,
          abi: process.versions.modules,
          uws_build: uws?.candidate.name ?? 'not loaded',
          uws_version: uws?.version ?? '',
          uws_sha256: uws?.sha256 ?? '',
        },
        1,
      )
    },
  })
  new Gauge({
    name: 'svc_ledger_charges_queued',
    help: 'Charges settled and not yet committed to the store (group-commit queue and the batch being written).',
    registers: [registry],
    collect() {
      this.set(sources.chargesQueued())
    },
  })
  const uploads = sources.uploads
  if (uploads !== undefined) {
    new Gauge({
      name: 'svc_upload_buffered_bytes',
      help: 'Bytes of streamed uploads the router holds, by where: memory (in-memory parts and chunks waiting to be written) or disk (spool files).',
      labelNames: ['where'] as const,
      registers: [registry],
      collect() {
        this.set({ where: 'memory' }, uploads.memory)
        this.set({ where: 'disk' }, uploads.disk)
      },
    })
    new Gauge({
      name: 'svc_upload_spool_files',
      help: 'Temporary files of streamed uploads open now (server.upload_spool_dir).',
      registers: [registry],
      collect() {
        this.set(uploads.files)
      },
    })
  }
  new Gauge({
    name: 'svc_ledger_quarantined_rows',
    help: 'Journal rows the ledger fold left out of the totals, whole or for their usage counts (SQLite; see ledger_quarantine).',
    registers: [registry],
    collect() {
      this.set(sources.ledgerQuarantined?.() ?? 0)
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

  const refreshCells = new CounterCells()
  new Counter({
    name: 'svc_registry_refreshes_total',
    help: 'Reads of the registry source (the chain sweeps), by source and outcome (error: the last snapshot stayed).',
    labelNames: ['source', 'outcome'] as const,
    registers: [registry],
    collect() {
      refreshCells.flush(this)
    },
  })
  const teeCells = new CounterCells()
  new Counter({
    name: 'svc_tee_verifications_total',
    help: 'TEE signature checks of answers, by provider, outcome (verified or the reason not) and kind (requested or sampled).',
    labelNames: ['provider', 'outcome', 'kind'] as const,
    registers: [registry],
    collect() {
      teeCells.flush(this)
    },
  })
  const throttleCells = new CounterCells()
  new Counter({
    name: 'svc_throttled_total',
    help: 'Requests refused (429) by a throttle of their source address or of everyone, before any key was looked up: auth_failures (failed authentications), sign_in_source, sign_in_global.',
    labelNames: ['throttle'] as const,
    registers: [registry],
    collect() {
      throttleCells.flush(this)
    },
  })
  const throttleIndex = new Map<string, CounterCell>()
  const onThrottle = (m: unknown): void => {
    const e = m as ThrottleEvent
    let c = throttleIndex.get(e.throttle)
    if (c === undefined) throttleIndex.set(e.throttle, (c = throttleCells.cell({ throttle: e.throttle })))
    c.pending++
  }
  // Rare events (a sweep every few seconds, a verification per asking request): a string key is cheap enough.
  const refreshIndex = new Map<string, CounterCell>()
  const onRefresh = (m: unknown): void => {
    const e = m as RegistryRefreshEvent
    const key = `${e.source}|${e.outcome}`
    let c = refreshIndex.get(key)
    if (c === undefined) refreshIndex.set(key, (c = refreshCells.cell({ source: e.source, outcome: e.outcome })))
    c.pending++
  }
  const teeIndex = new Map<string, CounterCell>()
  const onTee = (m: unknown): void => {
    const e = m as TeeVerifyEvent
    const kind = e.sampled ? 'sampled' : 'requested'
    const key = `${e.provider}|${e.outcome}|${kind}`
    let c = teeIndex.get(key)
    if (c === undefined) teeIndex.set(key, (c = teeCells.cell({ provider: e.provider, outcome: e.outcome, kind })))
    c.pending++
  }

  const onStart = (_m: unknown): void => {
    inflightCount++
  }
  const onCommit = (m: unknown): void => {
    const e = m as LedgerCommitEvent
    commits.observe(e.ok ? commitsOk : commitsFailed, e.durationMs / 1000)
    ;(e.ok ? committedOk : committedFailed).pending += e.charges
  }
  // Cells by label values, one Map level per label: provider → outcome.
  // Each index is fronted by the cell of the last event's labels: under load most events repeat the one before
  // (one surface, provider and model), and a match costs string compares where the walk costs a hash lookup per
  // label.
  const attemptIndex = new Map<string, Map<unknown, CounterCell>>()
  let lastAttempt: { provider: string; outcome: string; cell: CounterCell } | null = null
  const onAttempt = (m: unknown): void => {
    const e = m as AttemptEvent
    const outcome = e.error ?? 'ok'
    if (lastAttempt !== null && lastAttempt.provider === e.provider && lastAttempt.outcome === outcome) {
      lastAttempt.cell.pending++
      return
    }
    const byOutcome = level(attemptIndex, e.provider)
    let c = byOutcome.get(outcome)
    if (c === undefined) byOutcome.set(outcome, (c = attemptCells.cell({ provider: e.provider, outcome })))
    c.pending++
    lastAttempt = { provider: e.provider, outcome, cell: c }
  }
  const onSettle = (m: unknown): void => {
    const e = m as SettleEvent
    if (!e.durable) {
      lostCharges.pending++
      return
    }
    durableCharges.pending++
    if (e.cost > 0n) billedPending += Number(e.cost) / Number(ATTO_PER_USD)
  }
  // surface → status → provider → model, and surface → model, and provider.
  const requestIndex = new Map<string, Map<unknown, Map<unknown, Map<unknown, CounterCell>>>>()
  const durationIndex = new Map<string, Map<unknown, HistogramCell>>()
  const ttfbIndex = new Map<string, HistogramCell>()
  let lastEnd: { surface: string; status: number; provider: string; model: string; req: CounterCell; d: HistogramCell } | null = null
  let lastTtfb: { provider: string; cell: HistogramCell } | null = null
  const onEnd = (m: unknown): void => {
    const e = m as RequestEndEvent
    // A request refused by admission had no start event.
    if (e.admitted) inflightCount--
    const model = e.catalogModel ? e.model : ''
    const provider = e.provider ?? ''
    let req: CounterCell
    let d: HistogramCell
    const last = lastEnd
    if (last !== null && last.status === e.status && last.surface === e.surface && last.provider === provider && last.model === model) {
      req = last.req
      d = last.d
    } else {
      const byModel = level(level(level(requestIndex, e.surface), e.status), provider)
      let r = byModel.get(model)
      if (r === undefined) {
        byModel.set(model, (r = requestCells.cell({ surface: e.surface, status: String(e.status), provider, model })))
      }
      const durations = level(durationIndex, e.surface)
      let c = durations.get(model)
      if (c === undefined) durations.set(model, (c = duration.cell({ surface: e.surface, model })))
      req = r
      d = c
      lastEnd = { surface: e.surface, status: e.status, provider, model, req, d }
    }
    req.pending++
    duration.observe(d, e.durationMs / 1000)
    if (e.ttfbMs !== null && e.provider !== null) {
      let f: HistogramCell | undefined
      if (lastTtfb !== null && lastTtfb.provider === e.provider) f = lastTtfb.cell
      else {
        f = ttfbIndex.get(e.provider)
        if (f === undefined) ttfbIndex.set(e.provider, (f = ttfb.cell({ provider: e.provider })))
        lastTtfb = { provider: e.provider, cell: f }
      }
      ttfb.observe(f, e.ttfbMs / 1000)
    }
    if (e.attempts > 1) failoverCount += e.attempts - 1
  }
  const subs: [string, (m: unknown) => void][] = [
    ['svc-router:request:start', onStart],
    ['svc-router:attempt:end', onAttempt],
    ['svc-router:settle', onSettle],
    ['svc-router:request:end', onEnd],
    ['svc-router:ledger:commit', onCommit],
    ['svc-router:registry:refresh', onRefresh],
    ['svc-router:tee:verify', onTee],
    ['svc-router:throttle', onThrottle],
  ]
  for (const [name, fn] of subs) subscribe(name, fn)

  return {
    registry,
    contentType: registry.contentType,
    // prom-client 15 writes NaN as "Nan" (lib/util.js), which the text format does not know (it is "NaN"): the
    // event-loop lag gauges are NaN until their first sample, so a scrape right after start had such lines.
    render: () => registry.metrics().then((text) => text.replaceAll(' Nan\n', ' NaN\n')),
    close() {
      for (const [name, fn] of subs) unsubscribe(name, fn)
    },
  }
}
