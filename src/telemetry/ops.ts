/**
 * The operations endpoints (spec §8): GET /healthz (the process answers), GET /readyz (the router can serve:
 * store reachable, its ledger fold not stuck, registry loaded, at least one healthy provider, not draining;
 * 503 with the reason otherwise) and GET /metrics (Prometheus text). No credential: bind them to their own port
 * (`ops.separate_port`) to keep them off the API's interface. Beside the API, /readyz names the reason in
 * generic words ("store unreachable"): the detail (an address, a driver's message) goes to the log, and to
 * /readyz on the ops port only.
 */
import { log } from '../log.js'
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
  /** The routes are served on their own port (`ops.separate_port`): /readyz gives the reason's detail too. */
  readonly detailed?: boolean
}

/** Why the router is not ready: `reason` in generic words (the API port's), `detail` with the particulars. */
export interface NotReady {
  readonly reason: string
  readonly detail: string
}

const notReady = (reason: string, detail = reason): NotReady => ({ reason, detail })

const JSON_TYPE = ['Content-Type', 'application/json', 'Cache-Control', 'no-store']

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms)
  })
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}

/** Why the router is not ready, or null when it is. */
export async function notReadyReason(deps: OpsDeps): Promise<NotReady | null> {
  if (deps.draining()) return notReady('draining')
  try {
    await withTimeout(deps.store.accounts.getAccount(PROBE_WALLET), STORE_CHECK_MS)
  } catch (err) {
    return notReady('store unreachable', `store unreachable: ${(err as Error)?.message ?? String(err)}`)
  }
  const stuck = deps.store.ledger.foldStuck === undefined ? null : await withTimeout(deps.store.ledger.foldStuck(), STORE_CHECK_MS).catch((err: Error) => err.message)
  if (stuck !== null) return notReady('ledger fold stuck', `ledger fold stuck: charges cannot be added into the totals: ${stuck}`)
  const registry = deps.registry?.() ?? null
  if (registry !== null) return notReady(registry)
  let providers = 0
  let healthy = 0
  const now = performance.now()
  for (const p of deps.table.providers()) {
    providers++
    if (p.health.isHealthy(now)) healthy++
  }
  if (providers === 0) return notReady('registry has no provider')
  if (healthy === 0) return notReady('no healthy provider', `no healthy provider (${providers} unhealthy)`)
  return null
}

export function createOpsRoutes(deps: OpsDeps): Route[] {
  const healthz: Handler = (head, reply) => {
    reply.send(200, [...JSON_TYPE, 'x-request-id', head.requestId], '{"status":"ok"}')
  }
  // The detail is logged when it changes, not at every probe.
  let logged: string | null = null
  const answer = (head: { requestId: string }, reply: Parameters<Handler>[1], state: NotReady | null): void => {
    if (state === null) {
      if (logged !== null) log.info('ready again', { was: logged })
      logged = null
      return reply.send(200, [...JSON_TYPE, 'x-request-id', head.requestId], '{"status":"ready"}')
    }
    if (state.detail !== logged) log.warn('not ready', { reason: state.detail })
    logged = state.detail
    const reason = deps.detailed === true ? state.detail : state.reason
    reply.send(503, [...JSON_TYPE, 'x-request-id', head.requestId], JSON.stringify({ status: 'not_ready', reason }))
  }
  const readyz: Handler = (head, reply) => {
    notReadyReason(deps).then(
      (state) => answer(head, reply, state),
      (err: unknown) => answer(head, reply, notReady('not ready', String(err))),
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
        (err: unknown) => {
          log.warn('metrics could not be rendered', { err: String(err) })
          const reason = deps.detailed === true ? String(err) : 'metrics could not be rendered'
          reply.send(500, [...JSON_TYPE, 'x-request-id', head.requestId], JSON.stringify({ status: 'error', reason }))
        },
      )
    }
    routes.push({ method: 'get', pattern: '/metrics', handler })
  }
  return routes
}
