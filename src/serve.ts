/**
 * Composition root: config in, a listening router out. Wires the stages in the order of DESIGN.md §1 and
 * owns everything that must be closed on shutdown.
 */
import type { Books } from './billing/books.js'
import { ChargeWriter } from './billing/charge-writer.js'
import { LeasedLedger } from './billing/leased-ledger.js'
import { Ledger } from './billing/ledger.js'
import { createKeyAuthenticators, type KeyAuthenticators } from './auth/authenticate.js'
import { ConsoleOrigins } from './auth/console-origins.js'
import { Credentials } from './auth/credentials.js'
import { KeyCache } from './auth/key-cache.js'
import { SessionBook } from './auth/session.js'
import { createSessionAuthenticators } from './auth/session-auth.js'
import { createConsoleFiles } from './console/static-files.js'
import { RateLimiter, type RateGate } from './auth/rate-limit.js'
import type { Config } from './config/index.js'
import { HealthBook, type HealthSettings } from './health/health.js'
import { startProbes } from './health/probes.js'
import { log, setLogLevel } from './log.js'
import { createFileSource } from './registry/file-source.js'
import type { RegistrySnapshot, RegistrySource } from './registry/types.js'
import { TeeStanding } from './tee/standing.js'
import { TeeVerifier } from './tee/verify.js'
import { RoutingTable } from './routing/table.js'
import { listen, type Route } from './server/app.js'
import type { SimulatorHandle } from './simulator/simulator.js'
import { bootstrapDevAccount, type DevKeys } from './operator/bootstrap.js'
import { openStore } from './store/open.js'
import type { Store } from './store/store.js'
import { createAccount } from './surfaces/account.js'
import { createApiKeys } from './surfaces/api-keys.js'
import { createAuthSession } from './surfaces/auth-session.js'
import { createManagementKeys } from './surfaces/management-keys.js'
import { createCatalog } from './surfaces/catalog.js'
import { chatCompletions } from './surfaces/chat-completions.js'
import { messages } from './surfaces/messages.js'
import { createResponsesSurface, createStoredResponsesRoutes } from './surfaces/stored-responses.js'
import { imageGenerations } from './surfaces/images.js'
import { imageEdits } from './surfaces/image-edits.js'
import { transcriptions } from './surfaces/transcriptions.js'
import { asyncImageEdits, asyncImageGenerations, editJobs, generationJobs } from './surfaces/async-images.js'
import { JobRunner } from './jobs/runner.js'
import { createMultipartRoute, type MultipartDeps } from './pipeline/multipart-admission.js'
import { createInferenceRoute, type AdmissionDeps } from './pipeline/admission.js'
import { UpstreamPools } from './upstream/pools.js'
import { InFlight } from './upstream/drain.js'
import { startAccessLog, startPromptLog } from './telemetry/access-log.js'
import { startMetrics, type Metrics } from './telemetry/metrics.js'
import { UploadSpool } from './upstream/upload-spool.js'
import { createOpsRoutes } from './telemetry/ops.js'
import { randomUUID } from 'node:crypto'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import type { Tracing } from './telemetry/tracing.js'

/** How long requests ended at the drain's deadline get to bill and send their error events. */
const CUT_GRACE_MS = 5000

/** Charges per group-commit transaction at most. */
const CHARGE_BATCH = 256

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

/**
 * Registry sources by `registry.source` (DESIGN.md §7): the one place a source is picked. The chain source is
 * loaded only when configured: viem costs a router that reads a file about 30 MB of memory.
 */
const REGISTRY_SOURCES: Readonly<Record<Config['registry']['source'], (registry: Config['registry']) => RegistrySource | Promise<RegistrySource>>> = {
  file: (r) => createFileSource(r.path, r.watch),
  chain: async (r) =>
    (await import('./registry/chain-source.js')).createChainSource({
      rpcUrl: r.chain.rpc_url,
      contract: r.chain.contract as `0x${string}`,
      refreshMs: r.chain.refresh_ms,
      usdPer0g: r.chain.usd_per_0g,
      overridesPath: r.path === '' ? null : r.path,
    }),
}

/** Boots the simulated providers a registry asks for (`simulate:`), keyed by address; returns the running set. */
async function reconcileSimulators(snapshot: RegistrySnapshot, running: Map<string, SimulatorHandle>): Promise<void> {
  const wanted = new Set<string>()
  for (const provider of snapshot.providers) {
    if (provider.simulate === null) continue
    wanted.add(provider.address)
    if (running.has(provider.address)) continue
    const url = new URL(provider.url)
    // Loaded only for a registry that asks for simulated providers (the demo): it brings viem for their TEE keys.
    const { startSimulator } = await import('./simulator/simulator.js')
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
  setLogLevel(config.log.level, config.log.format)
  // Opened first: a store that cannot be opened (or is newer than this code) stops the start before anything runs.
  const store = await openStore(config.store, { replica: config.replicas })
  // A replica serves keys from memory only while it cannot have missed another replica's change (replicas.ts).
  const cache = new KeyCache(store.keys, { defaultRateLimit: config.limits.requests_per_minute, trusted: store.replica?.trusted })
  // The operator CLI writes to the same store from another process: drop the cached keys it changed.
  const stopWatchingStore = store.changes.subscribe((change) => cache.applyChange(change))
  const auth = createKeyAuthenticators(cache, store.keys)
  const credentials = new Credentials(store, cache)
  let devKeys: DevKeys | null = null
  try {
    if (config.dev.bootstrap) {
      devKeys = await bootstrapDevAccount(store, credentials, { wallet: config.dev.wallet, depositUsd: config.dev.deposit_usd })
    }
    return await serveWith(config, { store, credentials, auth, devKeys, stopWatchingStore })
  } catch (err) {
    stopWatchingStore()
    await store.close()
    throw err
  }
}

/** What differs between one process alone on its store and a replica among several (DESIGN.md §6). */
interface Coordination {
  readonly ledger: Books
  readonly limiter: RateGate
  close(): Promise<void>
}

/**
 * The one place that picks them, from config: budgets in memory (Ledger) or leased from a store that several
 * replicas share (LeasedLedger, when the store has leases); the rate window in this process or in Redis; the
 * health exchange with Redis only. Redis down at start is a degraded state, not a failed start.
 */
async function coordinate(config: Config, store: Store, writer: ChargeWriter, book: HealthBook): Promise<Coordination> {
  // Loaded only with a Redis to talk to: ioredis costs a router without one about 20 MB of memory.
  const shared = config.redis.url === '' ? null : await connectRedis(config.redis.url)
  const redis = shared?.redis ?? null
  if (redis !== null && !(await redis.ready(2_000))) log.warn('redis: not reachable at start; serving without it until it is')
  const ledger = store.leases !== undefined
    ? new LeasedLedger(store.leases, writer, { budgetWaitMs: config.limits.budget_wait_ms, lingerMs: config.replicas.lease_linger_ms })
    : new Ledger(store.ledger, writer, { budgetWaitMs: config.limits.budget_wait_ms })
  const stopLosing = ledger instanceof LeasedLedger ? store.replica?.onLeasesLost(() => ledger.leasesLost()) : undefined
  const limiter = shared === null
    ? new RateLimiter(config.limits.requests_per_minute)
    : new shared.SharedRateLimiter(shared.redis, config.limits.requests_per_minute, { replicas: () => store.replica?.live ?? 1 })
  const exchange = shared === null ? null : new shared.HealthExchange(shared.redis, book, { replicaId: store.replica?.id ?? randomUUID(), ewmaAlpha: config.routing.latency_ewma_alpha })
  return {
    ledger,
    limiter,
    async close() {
      stopLosing?.()
      exchange?.close()
      if (ledger instanceof LeasedLedger) await ledger.close()
      await redis?.close()
    },
  }
}

/** The link to Redis at `url`, and the classes that use it: their modules (and ioredis) loaded only now. */
async function connectRedis(url: string) {
  const [{ RedisLink }, { SharedRateLimiter }, { HealthExchange }] = await Promise.all([
    import('./coordination/redis.js'),
    import('./coordination/rate-window.js'),
    import('./coordination/health-exchange.js'),
  ])
  return { redis: new RedisLink(url), SharedRateLimiter, HealthExchange }
}

interface AuthParts {
  readonly store: Store
  readonly credentials: Credentials
  readonly auth: KeyAuthenticators
  readonly devKeys: DevKeys | null
  readonly stopWatchingStore: () => void
}

/** The rest of the start, once the store is open; `serve` closes the store if this throws. */
async function serveWith(config: Config, { store, credentials, auth, devKeys, stopWatchingStore }: AuthParts): Promise<RunningRouter> {
  // What the table routes on: the source's snapshot, with providers whose TEE signatures failed lowered
  // (tee/standing.ts). Either changing republishes it whole under a new version.
  const source = await REGISTRY_SOURCES[config.registry.source](config.registry)
  let routedVersion = 0
  const standing = new TeeStanding(() => publishRegistry('tee standing changed'))
  let sourceSnapshot = await source.start({
    onChange(next) {
      sourceSnapshot = next
      publishRegistry('registry reloaded')
    },
    onError(err) {
      log.error('registry source rejected; keeping the previous registry', { err: err.message })
    },
  })
  const snapshot = standing.lower(sourceSnapshot, ++routedVersion)
  const simulators = new Map<string, SimulatorHandle>()
  await reconcileSimulators(snapshot, simulators)

  const book = new HealthBook(config.health.uptime_window_ms)
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
    totalTimeoutMs: config.upstream.total_timeout_ms,
    maxConcurrent: config.upstream.max_concurrent_per_provider,
    queue: config.upstream.queue_per_provider,
    queueTimeoutMs: config.upstream.queue_timeout_ms,
  })

  function publishRegistry(why: string): void {
    const next = standing.lower(sourceSnapshot, ++routedVersion)
    reconcileSimulators(next, simulators)
      .then(() => table.update(next))
      .then(() => {
        pools.retain(new Set(next.providers.map((p) => p.url)))
        log.info(why, { version: next.version, providers: next.providers.length })
      })
      .catch((err: unknown) => log.error('registry update failed; keeping the previous registry', { err: String(err) }))
  }
  const tee = new TeeVerifier(pools, standing, { verifyTimeoutMs: config.tee.verify_timeout_ms, sampleRate: config.tee.sample_rate })
  // With TEE providers from the start, their recovery worker starts now rather than under the first check.
  if (snapshot.providers.some((p) => p.tee_signer !== '')) void tee.ready()

  const healthSettings: HealthSettings = {
    failureThreshold: config.routing.failure_threshold,
    cooldownMs: config.routing.unhealthy_cooldown_ms,
    maxCooldownMs: config.routing.max_unhealthy_cooldown_ms,
    ewmaAlpha: config.routing.latency_ewma_alpha,
  }
  const stopProbes = config.health.probes
    ? startProbes(table, book, pools, healthSettings, {
        intervalMs: config.health.probe_interval_ms,
        path: config.health.probe_path,
        timeoutMs: config.health.probe_timeout_ms,
      })
    : null

  // Billing: charges go to the store by group commit; budgets live in the ledger's memory, rebuilt from the
  // store's durable totals on start (reservations of requests that died with a previous process are gone).
  const writer = new ChargeWriter(store.ledger, { maxBatch: CHARGE_BATCH })
  const coordination = await coordinate(config, store, writer, book)
  const { ledger, limiter } = coordination
  const stopWatchingRevocations = credentials.onApiKeyRevoked((keyId) => ledger.keyRevoked(keyId))
  const stopWatchingUpdates = credentials.onApiKeyUpdated((key) => {
    ledger.keyChanged?.(key.id)
    ledger.keyLimitChanged?.(key.id, key.creditLimit)
  })
  const stopWatchingLedger = store.changes.subscribe((change) => {
    const reread = change.kind === 'funds' ? ledger.refreshAccount(change.accountId) : change.kind === 'unknown' ? ledger.refresh() : null
    reread?.catch((err: unknown) => log.error('billing: re-reading the books after an external change failed', { err: String(err) }))
    // A key another process changed may have been revoked, or its limit changed: its requests waiting for room
    // must not be sent, or must fit the new limit. A key with no book here has none waiting, and its next
    // request reads it afresh.
    if (change.kind === 'key') ledger.keyChanged?.(change.keyId)
    if (change.kind === 'key' && ledger.hasKey(change.keyId)) {
      store.keys.getApiKey(change.accountId, change.keyId).then(
        (key) => {
          if (key === null) return
          if (key.revoked) ledger.keyRevoked(key.id)
          else ledger.keyLimitChanged?.(key.id, key.creditLimit)
        },
        (err: unknown) => log.error('billing: reading a key changed by another process failed', { err: String(err) }),
      )
    }
  })
  const deps: AdmissionDeps = {
    table,
    engine: {
      pools,
      book,
      health: healthSettings,
      maxAttempts: config.routing.max_attempts,
      tee,
    },
    ledger,
    limiter,
    authenticate: auth.inference,
    maxJsonBodyBytes: config.server.max_json_body_bytes,
  }
  const uploadSpool = new UploadSpool({
    dir: config.server.upload_spool_dir !== '' ? config.server.upload_spool_dir : tmpdir(),
    memoryBytes: config.server.upload_memory_bytes,
    memoryTotalBytes: config.server.upload_memory_total_bytes,
  })
  const multipartDeps: MultipartDeps = {
    ...deps,
    maxMultipartBodyBytes: config.server.max_multipart_body_bytes,
    replayBufferBytes: config.upstream.replay_buffer_bytes,
    uploadSpool,
  }
  // Async image jobs run through the same engine into a job sink; the ones a previous process left unfinished
  // are resumed below, before the listener opens.
  const inMemory = basename(config.store.path) === ':memory:'
  const jobs = new JobRunner({
    store,
    table,
    engine: deps.engine,
    ledger,
    authenticate: auth.inference,
    resultTtlMs: config.jobs.result_ttl_ms,
    maxRunning: config.jobs.max_running,
    spoolDir: config.jobs.spool_dir !== '' ? config.jobs.spool_dir : inMemory ? join(tmpdir(), 'svc-router-jobs') : join(dirname(config.store.path), 'jobs'),
    ownsSpoolDir: !inMemory,
    limiter,
    defaultRateLimit: config.limits.requests_per_minute,
  })
  const asyncGenerations = jobs.kind(generationJobs)
  const asyncEdits = jobs.kind(editJobs)
  // Every inference route is wrapped in inFlight.track so that a drain knows what it waits for.
  const inFlight = new InFlight()
  const catalog = createCatalog(table)
  const sessions = new SessionBook()
  // The account and key endpoints take an mk- key or a console session; /v1/management-keys only a session.
  const consoleAuth = createSessionAuthenticators(sessions, auth)
  const apiKeys = createApiKeys({ authenticate: consoleAuth.management, credentials, store, used: (key) => ledger.used(key.id, key.resetPeriod) })
  const account = createAccount({ authenticate: consoleAuth.management, store, reserved: (accountId) => ledger.reserved(accountId) })
  const mgmtKeys = createManagementKeys({ authenticate: consoleAuth.sessionOnly, credentials, store })
  // Where the console is reached: configured, or the listening address once it is known (below).
  let consoleOrigins = config.server.public_origins.length > 0 ? ConsoleOrigins.of(config.server.public_origins) : null
  const signIn = createAuthSession({ sessions, store, origins: () => consoleOrigins! })
  const consoleFiles = createConsoleFiles()
  // POST /v1/responses and its stored state (GET/DELETE), in the store beside everything else.
  const responsesState = { store: store.responses, retentionMs: config.responses.retention_ms, maxInputBytes: config.server.max_json_body_bytes }
  const responses = createResponsesSurface(responsesState)
  const storedResponses = createStoredResponsesRoutes({ ...responsesState, authenticate: auth.inference, limiter, sweepIntervalMs: config.responses.sweep_interval_ms })
  const routes: Route[] = [
    { method: 'post', pattern: '/v1/chat/completions', handler: inFlight.track(createInferenceRoute(deps, chatCompletions), chatCompletions.name) },
    {
      method: 'post',
      pattern: '/v1/messages',
      handler: inFlight.track(createInferenceRoute(deps, messages), messages.name),
      renderError: messages.renderError,
    },
    { method: 'post', pattern: '/v1/responses', handler: inFlight.track(createInferenceRoute(deps, responses), responses.name) },
    { method: 'get', pattern: '/v1/responses/:id', handler: storedResponses.get },
    { method: 'del', pattern: '/v1/responses/:id', handler: storedResponses.remove },
    { method: 'post', pattern: '/v1/images/generations', handler: inFlight.track(createInferenceRoute(deps, imageGenerations), imageGenerations.name) },
    { method: 'post', pattern: '/v1/images/edits', handler: inFlight.track(createMultipartRoute(multipartDeps, imageEdits), imageEdits.name) },
    { method: 'post', pattern: '/v1/audio/transcriptions', handler: inFlight.track(createMultipartRoute(multipartDeps, transcriptions), transcriptions.name) },
    {
      method: 'post',
      pattern: '/v1/async/images/generations',
      handler: inFlight.track(createInferenceRoute(deps, asyncImageGenerations, jobs.launcher(asyncGenerations)), asyncImageGenerations.name),
    },
    {
      method: 'post',
      pattern: '/v1/async/images/edits',
      handler: inFlight.track(createMultipartRoute(multipartDeps, asyncImageEdits, jobs.spooled(asyncEdits)), asyncImageEdits.name),
    },
    { method: 'get', pattern: '/v1/async/jobs/:jobId', handler: jobs.poll },
    { method: 'get', pattern: '/v1/models', handler: catalog.listModels },
    { method: 'get', pattern: '/v1/providers', handler: catalog.listProviders },
    { method: 'get', pattern: '/v1/api-keys', handler: apiKeys.list },
    { method: 'post', pattern: '/v1/api-keys', handler: apiKeys.create },
    { method: 'patch', pattern: '/v1/api-keys/:id', handler: apiKeys.update },
    { method: 'del', pattern: '/v1/api-keys/:id', handler: apiKeys.revoke },
    { method: 'get', pattern: '/v1/account/balance', handler: account.balance },
    { method: 'get', pattern: '/v1/account/funds', handler: account.funds },
    { method: 'get', pattern: '/v1/account/usage/stats', handler: account.usageStats },
    { method: 'get', pattern: '/v1/management-keys', handler: mgmtKeys.list },
    { method: 'post', pattern: '/v1/management-keys', handler: mgmtKeys.create },
    { method: 'patch', pattern: '/v1/management-keys/:id', handler: mgmtKeys.update },
    { method: 'del', pattern: '/v1/management-keys/:id', handler: mgmtKeys.revoke },
    { method: 'get', pattern: '/v1/auth/nonce', handler: signIn.nonce },
    { method: 'post', pattern: '/v1/auth/verify', handler: signIn.verify },
    { method: 'get', pattern: '/v1/auth/session', handler: signIn.session },
    { method: 'post', pattern: '/v1/auth/logout', handler: signIn.logout },
    { method: 'get', pattern: '/console', handler: consoleFiles },
    { method: 'get', pattern: '/console/*', handler: consoleFiles },
  ]
  // Telemetry subscribes to the engine's events (DESIGN.md §5); with both off, nothing is published at all.
  const metrics: Metrics | null = config.ops.metrics ? startMetrics(table, { chargesQueued: () => writer.queued, uploads: uploadSpool }) : null
  const stopAccessLog = config.log.access_log ? startAccessLog() : null
  // Prompts only when the operator asked for both (telemetry/access-log.ts).
  const stopPromptLog = config.log.prompts && config.log.level === 'debug' ? startPromptLog() : null
  // Tracing only with an endpoint: the OpenTelemetry SDK is not even loaded otherwise (telemetry/tracing.ts).
  let tracing: Tracing | null = null
  if (config.tracing.otlp_endpoint !== '') {
    const { startTracing } = await import('./telemetry/tracing.js')
    tracing = await startTracing({ endpoint: config.tracing.otlp_endpoint, serviceName: config.tracing.service_name })
  }
  const opsRoutes = createOpsRoutes({ table, store, metrics, draining: () => inFlight.draining, registry: () => source.notReadyReason() })

  /** Everything serveWith started, in the order it must stop; the store is the caller's (serve closes it). */
  async function stopServing(): Promise<void> {
    stopProbes?.()
    storedResponses.close()
    metrics?.close()
    stopAccessLog?.()
    stopPromptLog?.()
    await tracing?.close()
    source.close()
    stopWatchingLedger()
    stopWatchingRevocations()
    stopWatchingUpdates()
    // Jobs still running are detached (resumed at the next start); what they billed is written just below.
    await jobs.close()
    // Charges settled before the close are written before the store goes; then unused leases go back.
    await writer.close()
    await coordination.close()
    await table.close()
    await tee.close()
    await pools.close()
    await Promise.all([...simulators.values()].map((s) => s.close()))
    simulators.clear()
  }

  let app: Awaited<ReturnType<typeof listen>>
  let opsApp: Awaited<ReturnType<typeof listen>> | null = null
  try {
    await jobs.resume()
    const maxHeaderBytes = config.server.max_head_bytes
    if (config.ops.separate_port) opsApp = await listen(config.ops.host, config.ops.port, opsRoutes, { maxHeaderBytes })
    else routes.push(...opsRoutes)
    app = await listen(config.server.host, config.server.port, routes, { sendTimeoutMs: config.server.send_timeout_ms, maxHeaderBytes })
    consoleOrigins ??= ConsoleOrigins.listening(config.server.host, app.port)
  } catch (err) {
    opsApp?.close()
    await stopServing()
    throw err
  }

  return {
    url: app.url,
    port: app.port,
    opsUrl: opsApp === null ? app.url : opsApp.url,
    table,
    store,
    credentials,
    devKeys,
    ledger,
    sessions,
    inFlight,
    async drain(deadlineMs) {
      inFlight.draining = true
      app.stopListening()
      // Async jobs get the same deadline; what still runs then is detached and resumed by the next start.
      const [idle] = await Promise.all([inFlight.idle(deadlineMs), jobs.drain(deadlineMs)])
      await jobs.close()
      if (idle) return 0
      const cut = inFlight.count
      log.warn('drain deadline reached: ending the requests still in flight', { in_flight: cut })
      pools.failAll()
      // Their error events go out once what their providers produced is billed; a client still sending its
      // body is cut by close().
      await inFlight.idle(CUT_GRACE_MS)
      return cut
    },
    async close() {
      app.close()
      opsApp?.close()
      await stopServing()
      stopWatchingStore()
      await store.close()
    },
  }
}
