/**
 * Composition root: config in, a listening router out. Wires the stages in the order of DESIGN.md §1 and
 * owns everything that must be closed on shutdown.
 */
import { createOpenAuthenticator } from './auth/principal.js'
import { RateLimiter } from './auth/rate-limit.js'
import type { Config } from './config/index.js'
import { HealthBook } from './health/health.js'
import { log, setLogLevel } from './log.js'
import { loadRegistryFile, watchRegistryFile, type RegistryWatcher } from './registry/file-source.js'
import type { RegistrySnapshot } from './registry/types.js'
import { RoutingTable } from './routing/table.js'
import { listen, type Route } from './server/app.js'
import { startSimulator, type SimulatorHandle } from './simulator/simulator.js'
import { createCatalog } from './surfaces/catalog.js'
import { createChatCompletions } from './surfaces/chat-completions.js'
import type { InferenceDeps } from './surfaces/inference.js'
import { UpstreamPools } from './upstream/pools.js'

export interface RunningRouter {
  readonly url: string
  readonly port: number
  readonly table: RoutingTable
  close(): Promise<void>
}

/** Boots the simulated providers a registry asks for (`simulate:`), keyed by address; returns the running set. */
async function reconcileSimulators(snapshot: RegistrySnapshot, running: Map<string, SimulatorHandle>): Promise<void> {
  const wanted = new Set<string>()
  for (const provider of snapshot.providers) {
    if (provider.simulate === null) continue
    wanted.add(provider.address)
    if (running.has(provider.address)) continue
    const url = new URL(provider.url)
    const sim = await startSimulator({
      host: url.hostname,
      port: Number(url.port),
      name: provider.address.slice(0, 10),
      ttftMs: provider.simulate.ttft_ms,
      tokensPerS: provider.simulate.tokens_per_s,
      models: provider.models.map((m) => m.id),
    })
    running.set(provider.address, sim)
    log.info('simulated provider started', { address: provider.address, url: sim.url })
  }
  for (const [address, sim] of running) {
    if (!wanted.has(address)) {
      running.delete(address)
      await sim.close()
    }
  }
}

export async function serve(config: Config): Promise<RunningRouter> {
  setLogLevel(config.log.level)
  const snapshot = loadRegistryFile(config.registry.path, 1)
  const simulators = new Map<string, SimulatorHandle>()
  await reconcileSimulators(snapshot, simulators)

  const book = new HealthBook()
  const table = new RoutingTable(snapshot, book, {
    indexThreads: config.routing.index_threads,
    statsRebuildMs: config.routing.stats_rebuild_ms,
  })
  const pools = new UpstreamPools({
    connections: config.upstream.connections_per_provider,
    connectTimeoutMs: config.upstream.connect_timeout_ms,
    keepAliveTimeoutMs: config.upstream.keep_alive_timeout_ms,
    headersTimeoutMs: config.upstream.headers_timeout_ms,
    bodyTimeoutMs: config.upstream.body_timeout_ms,
  })

  let watcher: RegistryWatcher | null = null
  if (config.registry.watch) {
    watcher = watchRegistryFile(config.registry.path, {
      onChange(next) {
        reconcileSimulators(next, simulators)
          .then(() => table.update(next))
          .then(() => {
            pools.retain(new Set(next.providers.map((p) => p.url)))
            log.info('registry reloaded', { version: next.version, providers: next.providers.length })
          })
          .catch((err: unknown) => log.error('registry reload failed; keeping the previous registry', { err: String(err) }))
      },
      onError(err) {
        log.error('registry file rejected; keeping the previous registry', { err: err.message })
      },
    }, { firstVersion: snapshot.version })
  }

  const deps: InferenceDeps = {
    table,
    exchange: {
      pools,
      book,
      health: {
        failureThreshold: config.routing.failure_threshold,
        cooldownMs: config.routing.unhealthy_cooldown_ms,
        ewmaAlpha: config.routing.latency_ewma_alpha,
      },
      maxAttempts: config.routing.max_attempts,
    },
    limiter: new RateLimiter(config.limits.requests_per_minute),
    authenticate: createOpenAuthenticator(config.limits.requests_per_minute),
    maxJsonBodyBytes: config.server.max_json_body_bytes,
  }
  const catalog = createCatalog(table)
  const routes: Route[] = [
    { method: 'post', pattern: '/v1/chat/completions', handler: createChatCompletions(deps) },
    { method: 'get', pattern: '/v1/models', handler: catalog.listModels },
    { method: 'get', pattern: '/v1/providers', handler: catalog.listProviders },
  ]
  const app = await listen(config.server.host, config.server.port, routes)

  return {
    url: app.url,
    port: app.port,
    table,
    async close() {
      app.close()
      watcher?.close()
      await table.close()
      await pools.close()
      await Promise.all([...simulators.values()].map((s) => s.close()))
      simulators.clear()
    },
  }
}
