/**
 * The listeners, last: the jobs a previous process left unfinished are resumed first, then /healthz, /readyz
 * and /metrics listen beside the API or on `ops.port`, then the API.
 */
import type { Config } from '../config/index.js'
import type { JobRunner } from '../jobs/runner.js'
import type { RoutingTable } from '../routing/table.js'
import { listen, type AppHandle } from '../server/app.js'
import type { Store } from '../store/store.js'
import type { Metrics } from '../telemetry/metrics.js'
import { createOpsRoutes } from '../telemetry/ops.js'
import type { Api } from './routes.js'
import { part, type Part } from './part.js'

export interface ListenParts {
  readonly api: Api
  readonly jobs: JobRunner
  readonly table: RoutingTable
  readonly store: Store
  readonly metrics: Metrics | null
  readonly registry: { notReadyReason(): string | null }
}

export interface Listeners {
  readonly app: AppHandle
  /** Null: the ops routes answer on the API's port. */
  readonly opsApp: AppHandle | null
}

export async function listenPart(config: Pick<Config, 'server' | 'ops'>, parts: ListenParts): Promise<Part<Listeners>> {
  const { api, jobs, table, store, metrics, registry } = parts
  const opsRoutes = createOpsRoutes({
    table,
    store,
    metrics,
    draining: () => api.inFlight.draining,
    registry: () => registry.notReadyReason(),
    detailed: config.ops.separate_port,
  })
  await jobs.resume()
  const maxHeaderBytes = config.server.max_head_bytes
  const opsApp = config.ops.separate_port ? await listen(config.ops.host, config.ops.port, opsRoutes, { maxHeaderBytes }) : null
  let app: AppHandle
  try {
    const routes = opsApp === null ? [...api.routes, ...opsRoutes] : api.routes
    app = await listen(config.server.host, config.server.port, routes, { sendTimeoutMs: config.server.send_timeout_ms, maxHeaderBytes })
  } catch (err) {
    opsApp?.close()
    throw err
  }
  api.listening(config.server.host, app.port)
  return part({ app, opsApp }, () => {
    app.close()
    opsApp?.close()
  })
}
