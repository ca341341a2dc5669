/**
 * The operations endpoints (spec §8): GET /healthz (the process answers), GET /readyz (the router can serve:
 * store reachable, registry loaded, at least one healthy provider, not draining; 503 with the reason
 * otherwise) and GET /metrics (Prometheus text). No credential: bind them to their own port
 * (`ops.separate_port`) to keep them off the API's interface.
 */
import type { RoutingTable } from '../routing/table.js'
import type { Handler, Route } from '../server/app.js'
import type { Store } from '../store/store.js'
import type { Metrics } from './metrics.js'

/** A wallet no account has: reading it is one indexed lookup that proves the store answers. */
const PROBE_WALLET = '0x0000000000000000000000000000000000000000'
const STORE_CHECK_MS = 2000

export interface OpsDeps {
  readonly table: RoutingTable
  readonly store: Store
  /** null when `ops.metrics` is off: /metrics answers 404. */
  readonly metrics: Metrics | null
  /** True once a drain began: /readyz turns 503 so a balancer stops sending. */
  readonly draining: () => boolean
  /** Why the registry source has no snapshot yet (a chain not read so far), null once it has one. */
  readonly registry?: () => string | null
}

const JSON_TYPE = ['Content-Type', 'application/json', 'Cache-Control', 'no-store']

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms)
  })
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}

/** Why the router is not ready, or null when it is. */
export async function notReadyReason(deps: OpsDeps): Promise<string | null> {
  if (deps.draining()) return 'draining'
  try {
    await withTimeout(deps.store.accounts.getAccount(PROBE_WALLET), STORE_CHECK_MS)
  } catch (err) {
    return `store unreachable: ${(err as Error)?.message ?? String(err)}`
  }
  const registry = deps.registry?.() ?? null
  if (registry !== null) return registry
  let providers = 0
  let healthy = 0
  const now = performance.now()
  for (const p of deps.table.providers()) {
    providers++
    if (p.health.isHealthy(now)) healthy++
  }
  if (providers === 0) return 'registry has no provider'
  if (healthy === 0) return `no healthy provider (${providers} unhealthy)`
  return null
}

export function createOpsRoutes(deps: OpsDeps): Route[] {
  const healthz: Handler = (head, reply) => {
    reply.send(200, [...JSON_TYPE, 'x-request-id', head.requestId], '{"status":"ok"}')
  }
  const readyz: Handler = (head, reply) => {
    notReadyReason(deps).then(
      (reason) => {
        if (reason === null) reply.send(200, [...JSON_TYPE, 'x-request-id', head.requestId], '{"status":"ready"}')
        else reply.send(503, [...JSON_TYPE, 'x-request-id', head.requestId], JSON.stringify({ status: 'not_ready', reason }))
      },
      (err: unknown) => reply.send(503, [...JSON_TYPE, 'x-request-id', head.requestId], JSON.stringify({ status: 'not_ready', reason: String(err) })),
    )
  }
  const routes: Route[] = [
    { method: 'get', pattern: '/healthz', handler: healthz },
    { method: 'get', pattern: '/readyz', handler: readyz },
  ]
  const metrics = deps.metrics
  if (metrics !== null) {
    const handler: Handler = (head, reply) => {
      metrics.render().then(
        (text) => reply.send(200, ['Content-Type', metrics.contentType, 'Cache-Control', 'no-store', 'x-request-id', head.requestId], text),
        (err: unknown) => reply.send(500, [...JSON_TYPE, 'x-request-id', head.requestId], JSON.stringify({ status: 'error', reason: String(err) })),
      )
    }
    routes.push({ method: 'get', pattern: '/metrics', handler })
  }
  return routes
}
