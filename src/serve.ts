/**
 * The composition root (STYLE.md "A composition root that is a list"; DESIGN.md §5-§8): config in, a listening
 * router out. The router is a list of parts in dependency order, each built by a factory of src/compose/ from
 * its config section and the parts before it; implementations are picked from config in compose/table.ts.
 * Stopping runs the list reversed.
 */
import type { Credentials } from './auth/credentials.js'
import type { SessionBook } from './auth/session.js'
import type { Books } from './billing/books.js'
import { billingPart, followBooksPart } from './compose/billing.js'
import { enginePart, healthPart, poolsPart, probesPart, recoveryPart, tablePart, teePart } from './compose/engine.js'
import { jobsPart } from './compose/jobs.js'
import { listenPart, type Listeners } from './compose/listen.js'
import { Lifecycle } from './compose/part.js'
import { followRegistryPart, registryPart, simulatorsPart } from './compose/registry.js'
import { apiPart } from './compose/routes.js'
import { keysPart, storePart } from './compose/store.js'
import { COORDINATION, coordinationOf, SETTLEMENT, settlementOf } from './compose/table.js'
import { telemetryPart } from './compose/telemetry.js'
import type { Config } from './config/index.js'
import type { JobRunner } from './jobs/runner.js'
import { log, setLogLevel } from './log.js'
import type { DevKeys } from './operator/bootstrap.js'
import type { RoutingTable } from './routing/table.js'
import type { Store } from './store/store.js'
import type { InFlight } from './upstream/drain.js'
import type { UpstreamPools } from './upstream/pools.js'
import { UploadSpool } from './upstream/upload-spool.js'
import { tmpdir } from 'node:os'

/** How long requests ended at the drain's deadline get to bill and send their error events. */
const CUT_GRACE_MS = 5000

export interface RunningRouter {
  readonly url: string
  readonly port: number
  /** Where /healthz, /readyz and /metrics answer: `url` unless `ops.separate_port`. */
  readonly opsUrl: string
  readonly table: RoutingTable
  readonly store: Store
  /** Issues and revokes keys with the router's cache kept in step (the test harness makes its keys here). */
  readonly credentials: Credentials
  /** The dev account's keys when this start bootstrapped one (`dev.bootstrap` on an empty store), else null. */
  readonly devKeys: DevKeys | null
  /** Budgets and charges of in-flight requests. */
  readonly ledger: Books
  /** The console's wallet sessions and sign-in nonces (in memory: auth/session.ts says why). */
  readonly sessions: SessionBook
  /** Inference requests started and not yet answered. */
  readonly inFlight: InFlight
  /**
   * Stops accepting (the API listener closes, /readyz turns 503, a request on a kept-alive connection gets
   * 503), waits up to `deadlineMs` for the requests in flight, then ends what is left as failed: a stream with
   * its error event, after billing what its provider produced. Resolves with how many were cut. close() next.
   */
  drain(deadlineMs: number): Promise<number>
  close(): Promise<void>
}

export async function serve(config: Config): Promise<RunningRouter> {
  setLogLevel(config.log.level, config.log.format)
  return serveWith(config)
}

/** Where streamed uploads wait past their memory bound (server.upload_*; upstream/upload-spool.ts). */
function uploadSpoolOf(server: Config['server']): UploadSpool {
  return new UploadSpool({
    dir: server.upload_spool_dir !== '' ? server.upload_spool_dir : tmpdir(),
    memoryBytes: server.upload_memory_bytes,
    memoryTotalBytes: server.upload_memory_total_bytes,
  })
}

/** The router's parts in dependency order; a start that fails stops what it built, the last part first. */
async function serveWith(config: Config): Promise<RunningRouter> {
  const life = new Lifecycle()
  try {
    const store = await life.add(storePart(config))
    const { auth, credentials, sourceOf, devKeys } = await life.add(keysPart(config, store))
    const { registry, snapshot } = await life.add(registryPart(config.registry))
    const settlement = await life.add(SETTLEMENT[settlementOf(config)](config, { store, registry }))
    const simulators = await life.add(simulatorsPart(snapshot))
    const pools = await life.add(poolsPart(config))
    const recovery = await life.add(recoveryPart())
    const tee = await life.add(teePart(config.tee, { pools, standing: registry.standing, recovery, snapshot }))
    const health = await life.add(healthPart(config))
    const table = await life.add(tablePart(config.routing, { snapshot: settlement?.filter(snapshot) ?? snapshot, health }))
    const limiter = await life.add(COORDINATION[coordinationOf(config)](config, { store, book: health.book }))
    const { writer, ledger } = await life.add(billingPart(config, store))
    const engine = await life.add(enginePart(config.routing, { pools, health, tee, payer: settlement }))
    const jobs = await life.add(jobsPart(config, { store, table, engine, ledger, auth, limiter }))
    await life.add(followBooksPart({ store, credentials, ledger }))
    await life.add(followRegistryPart({ registry, simulators, table, pools }))
    const uploads = uploadSpoolOf(config.server)
    const { metrics } = await life.add(telemetryPart(config, { table, writer, store, settlement, uploads, limiter }))
    const api = await life.add(apiPart(config, { store, auth, credentials, table, engine, ledger, limiter, jobs, sourceOf, recovery, unrouted: settlement, uploads }))
    await life.add(probesPart(config.health, { table, engine }))
    const listeners = await life.add(listenPart(config, { api, jobs, table, store, metrics, registry }))
    const { inFlight, sessions } = api
    const router = { table, store, credentials, devKeys, ledger, sessions, inFlight }
    return { ...router, ...urls(listeners), drain: (ms) => drain(ms, { ...listeners, inFlight, jobs, pools }), close: () => life.stop() }
  } catch (err) {
    await life.stop()
    throw err
  }
}

function urls({ app, opsApp }: Listeners): Pick<RunningRouter, 'url' | 'port' | 'opsUrl'> {
  return { url: app.url, port: app.port, opsUrl: opsApp === null ? app.url : opsApp.url }
}

/** RunningRouter.drain. */
async function drain(deadlineMs: number, { app, inFlight, jobs, pools }: Listeners & { inFlight: InFlight; jobs: JobRunner; pools: UpstreamPools }): Promise<number> {
  inFlight.draining = true
  app.stopListening()
  // Async jobs get the same deadline; what still runs then is detached and resumed by the next start.
  const [idle] = await Promise.all([inFlight.idle(deadlineMs), jobs.drain(deadlineMs)])
  await jobs.close()
  if (idle) return 0
  const cut = inFlight.count
  log.warn('drain deadline reached: ending the requests still in flight', { in_flight: cut })
  pools.failAll()
  // Their error events go out once what their providers produced is billed; a client still sending its body is
  // cut by close().
  await inFlight.idle(CUT_GRACE_MS)
  return cut
}
