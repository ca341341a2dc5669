/**
 * The data plane's parts (DESIGN.md §5): the upstream pools, the TEE checks, provider health, the routing table
 * and the engine context the failover loop runs with, and the active health probes.
 */
import type { ProviderPayer } from '../settlement/settlement.js'
import type { Config } from '../config/index.js'
import { HealthBook, type HealthSettings } from '../health/health.js'
import { startProbes } from '../health/probes.js'
import type { RegistrySnapshot } from '../registry/types.js'
import { RoutingTable } from '../routing/table.js'
import type { TeeStanding } from '../tee/standing.js'
import { SignerRecovery } from '../tee/signer-recovery.js'
import { TeeVerifier } from '../tee/verify.js'
import type { EngineContext } from '../upstream/failover.js'
import { UpstreamPools } from '../upstream/pools.js'
import { part, type Part } from './part.js'
import { connectGuardOf } from './table.js'

export function poolsPart(config: Pick<Config, 'upstream' | 'registry'>): Part<UpstreamPools> {
  const upstream = config.upstream
  const pools = new UpstreamPools({
    connections: upstream.connections_per_provider,
    connectTimeoutMs: upstream.connect_timeout_ms,
    keepAliveTimeoutMs: upstream.keep_alive_timeout_ms,
    headersTimeoutMs: upstream.headers_timeout_ms,
    bodyTimeoutMs: upstream.body_timeout_ms,
    totalTimeoutMs: upstream.total_timeout_ms,
    maxConcurrent: upstream.max_concurrent_per_provider,
    queue: upstream.queue_per_provider,
    queueTimeoutMs: upstream.queue_timeout_ms,
    guard: connectGuardOf(config.registry),
  })
  return part(pools, () => pools.close())
}

/** The signature worker pool, shared by TEE answers' checks and console sign-ins (started on first use). */
export function recoveryPart(): Part<SignerRecovery> {
  const recovery = new SignerRecovery()
  return part(recovery, () => recovery.close())
}

export function teePart(tee: Config['tee'], parts: { pools: UpstreamPools; standing: TeeStanding; recovery: SignerRecovery; snapshot: RegistrySnapshot }): Part<TeeVerifier> {
  const verifier = new TeeVerifier(parts.pools, parts.standing, { verifyTimeoutMs: tee.verify_timeout_ms, sampleRate: tee.sample_rate }, parts.recovery)
  // With TEE providers from the start, their recovery worker starts now rather than under the first check.
  if (parts.snapshot.providers.some((p) => p.tee_signer !== '')) void verifier.ready()
  return part(verifier, () => verifier.close())
}

export interface Health {
  readonly book: HealthBook
  readonly settings: HealthSettings
}

export function healthPart(config: Pick<Config, 'health' | 'routing'>): Part<Health> {
  return part({
    book: new HealthBook(config.health.uptime_window_ms),
    settings: {
      failureThreshold: config.routing.failure_threshold,
      cooldownMs: config.routing.unhealthy_cooldown_ms,
      maxCooldownMs: config.routing.max_unhealthy_cooldown_ms,
      ewmaAlpha: config.routing.latency_ewma_alpha,
    },
  })
}

export function tablePart(routing: Config['routing'], parts: { snapshot: RegistrySnapshot; health: Health }): Part<RoutingTable> {
  const table = new RoutingTable(parts.snapshot, parts.health.book, {
    indexThreads: routing.index_threads,
    statsRebuildMs: routing.stats_rebuild_ms,
  })
  return part(table, () => table.close())
}

/** What every attempt of every surface runs with, the async jobs' included. */
export function enginePart(routing: Config['routing'], parts: { pools: UpstreamPools; health: Health; tee: TeeVerifier; payer: ProviderPayer | null }): Part<EngineContext> {
  return part({ pools: parts.pools, book: parts.health.book, health: parts.health.settings, maxAttempts: routing.max_attempts, tee: parts.tee, payer: parts.payer })
}

export function probesPart(health: Config['health'], parts: { table: RoutingTable; engine: EngineContext }): Part<null> {
  if (!health.probes) return part(null)
  const { table, engine } = parts
  const stop = startProbes(table, engine.book, engine.pools, engine.health, {
    intervalMs: health.probe_interval_ms,
    path: health.probe_path,
    timeoutMs: health.probe_timeout_ms,
  })
  return part(null, stop)
}
