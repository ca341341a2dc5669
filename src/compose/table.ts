/**
 * The implementations of the router's parts by config value: the one place a kind is picked (DESIGN.md §7:
 * "the composition root picks implementations from config in one table"). A slot is a record from the value to
 * a factory; the key functions below say which config value picks it. Modules that cost memory are loaded only
 * by the entry that needs them. Store kinds are store/open.ts's table (the operator CLI opens stores too).
 */
import { randomUUID } from 'node:crypto'
import type { RateGate } from '../auth/rate-limit.js'
import { RateLimiter } from '../auth/rate-limit.js'
import type { Books } from '../billing/books.js'
import type { ChargeWriter } from '../billing/charge-writer.js'
import { LeasedLedger } from '../billing/leased-ledger.js'
import { Ledger } from '../billing/ledger.js'
import type { Config } from '../config/index.js'
import type { HealthBook } from '../health/health.js'
import { log } from '../log.js'
import { createFileSource } from '../registry/file-source.js'
import type { RegistrySource } from '../registry/types.js'
import type { Store } from '../store/store.js'
import type { RoutingTable } from '../routing/table.js'
import { startAccessLog, startPromptLog } from '../telemetry/access-log.js'
import { startMetrics, type Metrics } from '../telemetry/metrics.js'
import { publicOnlyGuard, type ConnectGuard } from '../upstream/connect-guard.js'
import { part, type Part } from './part.js'
import type { Settlement } from '../settlement/settlement.js'
import type { UploadSpool } from '../upstream/upload-spool.js'

/**
 * Registry sources by `registry.source` (DESIGN.md §7). The chain source is loaded only when configured: viem
 * costs a router that reads a file about 30 MB of memory.
 */
export const REGISTRY_SOURCES: Readonly<Record<Config['registry']['source'], (registry: Config['registry']) => RegistrySource | Promise<RegistrySource>>> = {
  file: (r) => createFileSource(r.path, r.watch),
  chain: async (r) =>
    (await import('../registry/chain-source.js')).createChainSource({
      rpcUrl: r.chain.rpc_url,
      contract: r.chain.contract as `0x${string}`,
      refreshMs: r.chain.refresh_ms,
      usdPer0g: r.chain.usd_per_0g,
      allowPrivateUrls: r.chain.allow_private_urls,
      overridesPath: r.path === '' ? null : r.path,
    }),
}

/**
 * What replicas share through Redis (DESIGN.md §6), by whether `redis.url` is set: the account's rate window in
 * this process or in Redis, and the health exchange with Redis only. Redis down at start is a degraded state,
 * not a failed start. Loaded only with a Redis to talk to: ioredis costs a router without one about 20 MB.
 */
export const COORDINATION: Readonly<Record<'local' | 'redis', (config: Config, parts: { store: Store; book: HealthBook }) => Promise<Part<RateGate>>>> = {
  local: async (config) => part(new RateLimiter(config.limits.requests_per_minute)),
  redis: async (config, { store, book }) => {
    const [{ RedisLink }, { SharedRateLimiter }, { LeasedRateLimiter }, { HealthExchange }] = await Promise.all([
      import('../coordination/redis.js'),
      import('../coordination/rate-window.js'),
      import('../coordination/rate-lease.js'),
      import('../coordination/health-exchange.js'),
    ])
    const redis = new RedisLink(config.redis.url)
    if (!(await redis.ready(2_000))) log.warn('redis: not reachable at start; serving without it until it is')
    const replicas = () => store.replica?.live ?? 1
    const { rate_lease_size: leaseSize, rate_lease_ms: leaseMs } = config.redis
    const limiter =
      leaseSize > 0
        ? new LeasedRateLimiter(redis, config.limits.requests_per_minute, { leaseSize, leaseMs, replicas })
        : new SharedRateLimiter(redis, config.limits.requests_per_minute, { replicas })
    const exchange = new HealthExchange(redis, book, { replicaId: store.replica?.id ?? randomUUID(), ewmaAlpha: config.routing.latency_ewma_alpha })
    return part<RateGate>(limiter, async () => {
      exchange.close()
      // Leases given back first: the other replicas need not wait for them to expire.
      if (limiter instanceof LeasedRateLimiter) await limiter.close().catch(() => {})
      await redis.close()
    })
  },
}

export const coordinationOf = (config: Config): keyof typeof COORDINATION => (config.redis.url === '' ? 'local' : 'redis')

/**
 * Who keeps the budgets, by what the store offers: one process alone on its store (the whole budget in memory),
 * or a replica leasing slices of it from a store that several share (the store has leases: PostgreSQL).
 */
export const BOOKS: Readonly<Record<'alone' | 'leased', (config: Config, parts: { store: Store; writer: ChargeWriter }) => Part<Books>>> = {
  alone: (config, { store, writer }) => part(new Ledger(store.ledger, writer, { budgetWaitMs: config.limits.budget_wait_ms })),
  leased: (config, { store, writer }) => {
    const ledger = new LeasedLedger(store.leases!, writer, { budgetWaitMs: config.limits.budget_wait_ms, lingerMs: config.replicas.lease_linger_ms })
    const stopLosing = store.replica?.onLeasesLost(() => ledger.leasesLost())
    return part<Books>(ledger, async () => {
      stopLosing?.()
      await ledger.close()
    })
  },
}

export const booksOf = (store: Store): keyof typeof BOOKS => (store.leases === undefined ? 'alone' : 'leased')

/**
 * Paying providers on the ledger (DESIGN.md §8, src/settlement/), by whether `settlement` names a payer key: none
 * (chain providers are sent requests unpaid), or the payer, which gates the registry (only paid providers are
 * routed). Loaded only with a key: viem and the settlement rounds cost nothing otherwise.
 */
/** What settlement needs of the registry part (compose/registry.ts): to filter its snapshots, and to publish again. */
interface GatedRegistry {
  gate(gate: Settlement): void
  republish(why: string): void
}

export const SETTLEMENT: Readonly<Record<'none' | 'payer', (config: Config, parts: { store: Store; registry: GatedRegistry }) => Promise<Part<Settlement | null>>>> = {
  none: async (config) => {
    if (config.registry.source === 'chain') log.warn('settlement: no payer key (settlement.key_file or key_env): chain providers are sent requests unpaid')
    return part(null)
  },
  payer: async (config, { store, registry }) => {
    const { createSettlementPart } = await import('../settlement/index.js')
    const settlement = createSettlementPart(config, { onRoutableChange: () => registry.republish('paid providers changed'), books: store.settlement })
    if (settlement === null) return part(null)
    registry.gate(settlement)
    return part(settlement, () => settlement.stop())
  },
}

export const settlementOf = (config: Config): keyof typeof SETTLEMENT => (config.settlement.key_file === '' && config.settlement.key_env === '' ? 'none' : 'payer')

/** What a telemetry subscriber is given; it subscribes to the engine's events (DESIGN.md §5). */
export interface TelemetrySources {
  readonly table: RoutingTable
  readonly writer: ChargeWriter
  readonly store: Store
  /** The payer of chain providers, when there is one. */
  readonly settlement?: Settlement | null
  /** What streamed uploads hold (the /metrics gauges). */
  readonly uploads: UploadSpool
  /** The account rate window: shared through Redis, it counts where its decisions were made. */
  readonly limiter: RateGate
}

interface Subscriber {
  /** Whether the config asks for it; with none asked for, nothing is published at all. */
  readonly wanted: (config: Config) => boolean
  readonly start: (config: Config, sources: TelemetrySources) => { close(): void | Promise<void> } | Promise<{ close(): Promise<void> }>
}

/** The telemetry subscribers, in the order they start and stop. */
export const TELEMETRY = {
  metrics: {
    wanted: (c) => c.ops.metrics,
    start: (_c, { table, writer, store, settlement, uploads, limiter }): Metrics =>
      startMetrics(table, {
        chargesQueued: () => writer.queued,
        ledgerQuarantined: () => store.ledger.quarantinedRows?.() ?? 0,
        uploads,
        ...(limiter.counts !== undefined && { rate: () => limiter.counts!() }),
        ...(settlement != null && { settlement: () => settlement.states(), settlementProgress: () => settlement.progress() }),
      }),
  },
  accessLog: { wanted: (c) => c.log.access_log, start: () => ({ close: startAccessLog() }) },
  // Prompts only when the operator asked for both (telemetry/access-log.ts).
  promptLog: { wanted: (c) => c.log.prompts && c.log.level === 'debug', start: () => ({ close: startPromptLog() }) },
  // Tracing only with an endpoint: the OpenTelemetry SDK is not even loaded otherwise (telemetry/tracing.ts).
  tracing: {
    wanted: (c) => c.tracing.otlp_endpoint !== '',
    start: async (c) => (await import('../telemetry/tracing.js')).startTracing({ endpoint: c.tracing.otlp_endpoint, serviceName: c.tracing.service_name }),
  },
} satisfies Record<string, Subscriber>

/**
 * What every connection to a provider is judged by: the ledger's providers are anyone with a stake (DESIGN.md
 * §8), so public unicast addresses only unless `registry.chain.allow_private_urls`; the file registry is the
 * operator's own word.
 */
export function connectGuardOf(registry: Config['registry']): ConnectGuard | null {
  return registry.source === 'chain' && !registry.chain.allow_private_urls ? publicOnlyGuard() : null
}
