/**
 * Async image jobs (DESIGN.md §4): `POST /v1/async/images/{generations,edits}` admit a request exactly as the
 * sync surfaces do, hold its worst case, store it as a job and answer 202; the job then runs through the same
 * failover loop (upstream/failover.ts) with a JobSink (./job-sink.ts) in place of the client's reply, and its
 * answer is stored for `GET /v1/async/jobs/:jobId` to return.
 *
 * Billing: a job is billed once, when it completes, under the job's id as its request id: the ledger refuses a
 * second charge of one request id, so no path can bill a job twice. A job that fails costs nothing (the loop
 * releases its hold). A client that stops polling is still billed: the job does not depend on it.
 *
 * Restarts: every job is stored before its 202. A job that had not ended when the process stopped is resumed
 * at the next start: re-admitted (its key must still be live, its model served) and run again. If the journal
 * already holds its charge (the process died between the commit and the job's own record), it runs again
 * without a charge, so the client gets its images and pays once. A job that cannot be re-admitted is failed,
 * at no cost.
 */
import { randomUUID } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { readdir, stat } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import type { Authenticator, Principal } from '../auth/principal.js'
import { entryOf } from '../auth/key-cache.js'
import { rateLimitHeaders, type RateGate } from '../auth/rate-limit.js'
import { budgetFor } from '../billing/books.js'
import { FreeBudget, type Budget } from '../billing/budget.js'
import type { ImageUsage } from '../billing/cost.js'
import type { Books } from '../billing/books.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import { applyKeyPolicy } from '../pipeline/key-policy.js'
import type { Launch, Launcher } from '../pipeline/admission.js'
import type { SpooledUploads } from '../pipeline/multipart-admission.js'
import { RoutingPrefs } from '../routing/preferences.js'
import { select, type Selection } from '../routing/select.js'
import type { RoutingTable } from '../routing/table.js'
import type { Handler } from '../server/app.js'
import type { HeaderList, Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError, sendJson } from '../server/respond.js'
import type { JobOutcome, JobRecord, Store } from '../store/store.js'
import type { EngineSurface, SurfaceRequest } from '../surfaces/surface.js'
import { publishRefused, requestEnd, requestStart } from '../telemetry/events.js'
import { clientTrace, type ClientTrace } from '../telemetry/trace-context.js'
import { Failover, type EngineContext } from '../upstream/failover.js'
import { JobSink } from './job-sink.js'
import { jobBody, parseJobAnswer } from './job-json.js'
import { SpoolBody, removeSpoolFile } from './spool.js'

/** Seconds a client is told to wait before polling again (DESIGN.md §4). */
export const RETRY_AFTER_SECONDS = '5'

/** One kind of job: the surface it runs and how its request is stored and rebuilt. */
export interface JobKind<R extends SurfaceRequest> {
  /** Stored in the job row. */
  readonly name: string
  readonly surface: EngineSurface<R, ImageUsage>
  /** The request's parameters to store beside the body (JSON-safe). */
  params(req: R): Record<string, unknown>
  /** The stored body (JSON surfaces) or null when the body is a spooled file. */
  body(req: R): Buffer | null
  /** The request again, from its job row: what every run (first or resumed) sends. */
  rebuild(job: JobRecord, params: Record<string, unknown>): R
}

export interface JobRunnerOptions {
  readonly store: Store
  readonly table: RoutingTable
  readonly engine: EngineContext
  readonly ledger: Books
  readonly authenticate: Authenticator
  /** How long an ended job's result is kept (jobs.result_ttl_ms). */
  readonly resultTtlMs: number
  /** Jobs running at once; the others wait, pending, in arrival order. */
  readonly maxRunning: number
  /** Where async uploads are spooled. */
  readonly spoolDir: string
  /**
   * The spool directory is this store's alone: at start, uploads no unfinished job names are deleted. Not for a
   * store in memory, whose default directory every such router on the machine shares.
   */
  readonly ownsSpoolDir?: boolean
  /** The inference rate limiter: a poll's answer reports the account's standing (X-RateLimit-*) without counting. */
  readonly limiter?: RateGate
  /** Requests per minute for accounts without an override (a resumed job's principal). */
  readonly defaultRateLimit: number
  readonly now?: () => number
  /** Among replicas: how often the jobs of replicas that died are looked for (default 2 s). */
  readonly claimEveryMs?: number
}

interface Queued {
  readonly job: JobRecord
  readonly kind: JobKind<SurfaceRequest>
  readonly budget: Budget
  readonly selection: Selection
  readonly trace: ClientTrace
  /** Its body was dropped while it waited: read the job back from the store before it runs. */
  readonly reload?: boolean
}

/** The POST's own end for telemetry (an access log line, a metric): accepted, 202. The job's run is its own request. */
function publishAccepted(head: RequestHead, surface: string, model: string): void {
  const trace = clientTrace(head.traceparent, head.tracestate)
  // An admitted end follows a start: subscribers that pair them (the in-flight gauge, tracing's span) saw the end
  // alone, and the gauge fell below zero by one for every async job accepted.
  if (requestStart.hasSubscribers) {
    requestStart.publish({
      requestId: head.requestId,
      surface,
      model,
      stream: false,
      startedAt: head.startedAt,
      traceparent: trace.traceparent,
      tracestate: trace.tracestate,
    })
  }
  if (!requestEnd.hasSubscribers) return
  requestEnd.publish({
    requestId: head.requestId,
    admitted: true,
    surface,
    model,
    catalogModel: true,
    provider: null,
    status: 202,
    attempts: 0,
    durationMs: performance.now() - head.startedAt,
    error: null,
    ttfbMs: null,
    cost: 0n,
    traceparent: trace.traceparent,
    tracestate: trace.tracestate,
  })
}

/** The routing preferences as a job row keeps them (bigints as decimal strings). */
function prefsToJson(p: RoutingPrefs): Record<string, unknown> {
  const money = (v: bigint | null) => (v === null ? null : v.toString())
  return {
    address: p.address,
    sort: p.sort,
    sortSet: p.sortSet,
    tier: p.tier,
    allowFallbacks: p.allowFallbacks,
    requireParameters: p.requireParameters,
    maxPrompt: money(p.maxPrompt),
    maxCompletion: money(p.maxCompletion),
    maxImage: money(p.maxImage),
  }
}

function prefsFromJson(v: Record<string, unknown>): RoutingPrefs {
  const p = new RoutingPrefs()
  const money = (x: unknown) => (typeof x === 'string' ? BigInt(x) : null)
  p.address = String(v.address ?? '')
  p.sort = Number(v.sort ?? p.sort)
  p.sortSet = v.sortSet === true
  p.tier = Number(v.tier ?? p.tier)
  p.allowFallbacks = Number(v.allowFallbacks ?? p.allowFallbacks)
  p.requireParameters = Number(v.requireParameters ?? p.requireParameters)
  p.maxPrompt = money(v.maxPrompt)
  p.maxCompletion = money(v.maxCompletion)
  p.maxImage = money(v.maxImage)
  return p
}

export class JobRunner {
  readonly #o: JobRunnerOptions
  readonly #now: () => number
  readonly #kinds = new Map<string, JobKind<SurfaceRequest>>()
  readonly #queue: Queued[] = []
  /** Sinks of the jobs running now, to detach on close (their jobs stay unfinished and resume next start). */
  readonly #running = new Set<JobSink>()
  /** Queued jobs whose body is being read back from the store before they start (see #next). */
  #reading = 0
  #sweep: NodeJS.Timeout | null = null
  #claimTimer: NodeJS.Timeout | null = null
  #closed = false
  #draining = false
  #idle: (() => void)[] = []
  #spoolReady = false
  readonly #startedAt = Date.now()

  constructor(options: JobRunnerOptions) {
    this.#o = options
    this.#now = options.now ?? Date.now
  }

  /** Registers a kind of job; its name is what job rows refer to. */
  kind<R extends SurfaceRequest>(kind: JobKind<R>): JobKind<R> {
    this.#kinds.set(kind.name, kind as unknown as JobKind<SurfaceRequest>)
    return kind
  }

  /** The launcher of a JSON async surface: the admitted request becomes a job. */
  launcher<R extends SurfaceRequest>(kind: JobKind<R>): Launcher<R, ImageUsage> {
    return (launch) => this.#submit(kind, launch, null)
  }

  /** Spooling and launching for a multipart async surface: the job is accepted once the upload is on disk. */
  spooled<R extends SurfaceRequest>(kind: JobKind<R>): SpooledUploads<R, ImageUsage, SpoolBody> {
    return {
      spool: (intake) => new SpoolBody(intake, join(this.#o.spoolDir, randomUUID() + '.upload'), this.#prepareSpool),
      launcher: (spool) => (launch) => {
        spool.whenWritten((err) => {
          // Discarded: refused (413, a scan error), and that refusal was the answer.
          if (launch.reply.aborted || spool.discarded) return
          if (err !== null) return this.#refuse(launch, new RouterError('server_error', 'the upload could not be stored'))
          this.#submit(kind, launch, spool)
        })
      },
    }
  }

  /** Makes the spool directory, once: run by the first admitted upload, just before its file is created. */
  readonly #prepareSpool = (): void => {
    if (this.#spoolReady) return
    mkdirSync(this.#o.spoolDir, { recursive: true, mode: 0o700 })
    this.#spoolReady = true
  }

  #refuse(launch: Launch<SurfaceRequest, ImageUsage>, err: RouterError): void {
    sendError(launch.reply, err, launch.head.requestId, launch.admitted.headers, launch.surface.renderError)
    publishRefused(launch.head, launch.surface.name, launch.request.model, true, err.status, err.code)
  }

  /** Holds the job's worst case at its first candidate, stores it, answers 202, then queues it to run. */
  #submit<R extends SurfaceRequest>(kindR: JobKind<R>, launchR: Launch<R, ImageUsage>, spool: SpoolBody | null): void {
    const kind = kindR as unknown as JobKind<SurfaceRequest>
    const launch = launchR as unknown as Launch<SurfaceRequest, ImageUsage>
    const { head, reply, admitted, request, selection } = launch
    const first = selection.first
    if (this.#closed || first === null) {
      spool?.discard()
      return this.#refuse(launch, new RouterError('no_available_provider', this.#closed ? 'the router is shutting down' : `no provider is available for model ${request.model}`))
    }
    const id = randomUUID()
    const principal = admitted.principal
    const budget = budgetFor(this.#o.ledger, principal, id)
    const accepted = (refused: RouterError | null): void => {
      if (refused !== null) {
        spool?.discard()
        return this.#refuse(launch, refused)
      }
      if (reply.aborted || (spool !== null && !spool.claim())) {
        // Nobody will ever learn this job's id: it is not created.
        budget.release()
        return
      }
      const now = this.#now()
      const job: JobRecord = {
        id,
        accountId: principal.accountId,
        keyId: principal.keyId,
        surface: kind.name,
        model: request.model,
        providerAddress: first.provider.address,
        params: JSON.stringify({ ...kind.params(request), prefs: prefsToJson(launch.admitted.prefs), bytes: spool?.bytes ?? 0, contentType: head.contentType }),
        body: kind.body(request),
        bodyPath: spool?.path ?? null,
        createdAt: now,
        status: 'pending',
        updatedAt: now,
        provider: null,
        result: null,
        trace: null,
        error: null,
        resKey: '',
      }
      this.#o.store.jobs.createJob(job).then(
        () => {
          const headers: HeaderList = [...admitted.headers, 'Retry-After', RETRY_AFTER_SECONDS]
          sendJson(reply, 202, JSON.stringify({ jobId: id, status: 'pending', provider_address: first.provider.address }), headers)
          publishAccepted(head, launch.surface.name, request.model)
          this.#enqueue({ job, kind, budget, selection, trace: clientTrace(head.traceparent, head.tracestate) })
        },
        (err: unknown) => {
          log.error('jobs: storing a new job failed', { request_id: head.requestId, err: String(err) })
          budget.release()
          if (spool !== null) removeSpoolFile(spool.path)
          this.#refuse(launch, new RouterError('server_error', 'the job could not be stored'))
        },
      )
    }
    let held
    try {
      held = budget.hold(kind.surface.worstCase(request, first))
    } catch (err) {
      spool?.discard()
      return this.#refuse(launch, toRouterError(err))
    }
    if (held instanceof Promise) held.then(accepted, (err: unknown) => accepted(toRouterError(err)))
    else accepted(held)
  }

  #enqueue(q: Queued): void {
    if (this.#closed || this.#draining) {
      // Stays pending in the store: the next start resumes it.
      if (q.budget.open) q.budget.release()
      return
    }
    if (this.#busy < this.#o.maxRunning) return this.#start(q)
    // A waiting job keeps its hold, not its body: that is read back from the store when its turn comes, so a
    // long queue costs rows on disk, not request bodies in memory.
    this.#queue.push(q.job.body === null ? q : { ...q, job: { ...q.job, body: null }, reload: true })
  }

  #next(): void {
    while (!this.#closed && !this.#draining && this.#busy < this.#o.maxRunning && this.#queue.length > 0) {
      const q = this.#queue.shift()!
      if (q.reload !== true) {
        this.#start(q)
        continue
      }
      // Its slot is taken now, while the body is read back.
      this.#reading++
      const settle = (job: JobRecord | null): void => {
        this.#reading--
        const runnable = job !== null && (job.status === 'pending' || job.status === 'processing')
        if (runnable && !this.#closed && !this.#draining) this.#start({ ...q, job, reload: false })
        else if (q.budget.open) q.budget.release()
        this.#next()
        this.#wakeIdle()
      }
      this.#o.store.jobs.getJob(q.job.id).then(settle, (err: unknown) => {
        log.error('jobs: reading a queued job back failed; it runs at the next start', { job: q.job.id, err: String(err) })
        settle(null)
      })
    }
  }

  /** Slots taken: jobs running, and queued ones whose body is being read back. */
  get #busy(): number {
    return this.#running.size + this.#reading
  }

  #start({ job, kind, budget, selection, trace }: Queued): void {
    let request: SurfaceRequest
    try {
      request = kind.rebuild(job, JSON.parse(job.params) as Record<string, unknown>)
    } catch (err) {
      if (budget.open) budget.release()
      return this.#fail(job, `the job could not be read back: ${String(err)}`)
    }
    const sink = new JobSink((status, headers, body) => {
      this.#running.delete(sink)
      this.#ended(job, status, headers, body)
      this.#next()
      this.#wakeIdle()
    })
    this.#running.add(sink)
    this.#o.store.jobs.markProcessing(job.id, this.#now()).catch((err: unknown) => log.warn('jobs: marking a job processing failed', { job: job.id, err: String(err) }))
    const failover = new Failover(
      this.#o.engine,
      { requestId: job.id, startedAt: performance.now(), surface: kind.surface, request, baseHeaders: [], selection, budget, trace },
      sink,
    )
    failover.start()
  }

  /** The engine's answer, as the job's outcome. */
  #ended(job: JobRecord, status: number, headers: HeaderList, body: Buffer): void {
    this.#record(job, parseJobAnswer(status, headers, body, this.#now()))
  }

  #fail(job: JobRecord, message: string): void {
    log.warn('jobs: job failed before it could run', { job: job.id, reason: message })
    this.#record(job, { status: 'failed', provider: null, result: null, trace: null, error: message, resKey: '', at: this.#now() })
  }

  /** Stores how the job ended; its spooled upload goes once that is recorded (a job left unfinished still needs it). */
  #record(job: JobRecord, outcome: JobOutcome): void {
    this.#o.store.jobs.finishJob(job.id, outcome).then(
      () => {
        if (job.bodyPath !== null) removeSpoolFile(job.bodyPath)
      },
      (err: unknown) => log.error('jobs: recording how a job ended failed; it runs again at the next start', { job: job.id, err: String(err) }),
    )
  }

  /**
   * Resumes every job that had not ended when the last process stopped, and starts the sweep of expired results.
   * Called once at start, before the listener opens.
   */
  async resume(): Promise<number> {
    const unfinished = await this.#o.store.jobs.unfinishedJobs()
    // Every unfinished job's upload is kept, whichever replica runs it.
    if (this.#o.ownsSpoolDir === true) await this.#removeOrphans(unfinished)
    const jobs = await this.#claim(unfinished)
    await this.#resumeAll(jobs)
    await this.sweep()
    const replica = this.#o.store.replica
    if (replica !== undefined && this.#o.store.jobs.claimUnfinished !== undefined) {
      // The jobs of a replica that died are taken over once the others removed it (replicas.dead_after_ms).
      this.#claimTimer = setInterval(() => {
        this.#claim(null)
          .then((claimed) => this.#resumeAll(claimed))
          .catch((err: unknown) => log.warn('jobs: taking over the jobs of a dead replica failed', { err: String(err) }))
      }, this.#o.claimEveryMs ?? 2_000)
      this.#claimTimer.unref()
    }
    const every = Math.max(1000, Math.min(60_000, this.#o.resultTtlMs))
    this.#sweep = setInterval(() => {
      this.sweep().catch((err: unknown) => log.error('jobs: removing expired jobs failed', { err: String(err) }))
    }, every)
    this.#sweep.unref()
    return jobs.length
  }

  /**
   * The unfinished jobs this process runs: all of them alone on the store; among replicas, those it takes
   * over atomically (no owner, or an owner no longer registered: claimUnfinished), so each runs once.
   */
  async #claim(unfinished: JobRecord[] | null): Promise<JobRecord[]> {
    const store = this.#o.store
    const replica = store.replica
    if (replica === undefined || store.jobs.claimUnfinished === undefined) return unfinished ?? (await store.jobs.unfinishedJobs())
    return store.jobs.claimUnfinished(replica.id, await replica.liveIds())
  }

  async #resumeAll(jobs: readonly JobRecord[]): Promise<void> {
    if (this.#closed) return
    for (const job of jobs) {
      try {
        await this.#resumeOne(job)
      } catch (err) {
        this.#fail(job, `the job could not be resumed: ${String((err as Error)?.message ?? err)}`)
      }
    }
    if (jobs.length > 0) log.info('jobs: resumed unfinished jobs', { jobs: jobs.length })
  }

  /**
   * Deletes the spooled uploads no unfinished job names: what a process that stopped mid-upload, or between a
   * job's end and its file's deletion, left behind (nothing else ever reads them). Only files written before
   * this start: one written since is no leftover of a past process.
   */
  async #removeOrphans(jobs: readonly JobRecord[]): Promise<void> {
    const dir = this.#o.spoolDir
    let names: string[]
    try {
      names = await readdir(dir)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') log.warn('jobs: could not list the spool directory', { dir, err: String(err) })
      return
    }
    const live = new Set<string>()
    for (const job of jobs) if (job.bodyPath !== null) live.add(resolve(job.bodyPath))
    let removed = 0
    for (const name of names) {
      if (!name.endsWith('.upload')) continue
      const path = resolve(dir, name)
      if (live.has(path)) continue
      try {
        if ((await stat(path)).mtimeMs >= this.#startedAt) continue
      } catch {
        continue
      }
      removeSpoolFile(path)
      removed++
    }
    if (removed > 0) log.info('jobs: removed spooled uploads that no job owns', { files: removed })
  }

  async #resumeOne(job: JobRecord): Promise<void> {
    const kind = this.#kinds.get(job.surface)
    if (kind === undefined) return this.#fail(job, `unknown job kind ${job.surface}`)
    const params = JSON.parse(job.params) as Record<string, unknown>
    const prefs = prefsFromJson((params.prefs ?? {}) as Record<string, unknown>)
    const principal = await this.#principal(job)
    if (principal instanceof RouterError) return this.#fail(job, principal.message)
    const policy = applyKeyPolicy(principal, prefs, job.model)
    if (policy !== null) return this.#fail(job, policy.message)
    const index = this.#o.table.model(job.model)
    if (index === undefined) return this.#fail(job, `model ${job.model} is no longer in the catalog`)
    const pinned = prefs.address === '' ? null : (this.#o.table.provider(prefs.address) ?? null)
    const selection = select(
      index,
      prefs,
      { dimension: kind.surface.dimension, paramMask: 0, maxOutput: -1, allowedProviders: principal.allowedProviders, now: performance.now() },
      pinned,
    )
    if (selection instanceof RouterError) return this.#fail(job, selection.message)
    let budget: Budget
    if (await this.#o.store.jobs.jobCharged(job.id)) {
      // Billed before the crash: it runs again without a second charge.
      budget = new FreeBudget()
    } else {
      if (principal.keyId !== null) await this.#o.ledger.prepare(principal)
      budget = budgetFor(this.#o.ledger, principal, job.id)
    }
    this.#enqueue({ job, kind, budget, selection, trace: clientTrace('', '') })
  }

  /** The paying key as it is now: a job whose key was revoked or expired meanwhile does not run. */
  async #principal(job: JobRecord): Promise<Principal | RouterError> {
    if (job.keyId === null) {
      return { accountId: job.accountId, keyId: null, tier: -1, allowedModels: null, allowedProviders: null, rateLimit: this.#o.defaultRateLimit, creditLimit: null, resetPeriod: 'never' }
    }
    const store = this.#o.store
    const [key, account] = await Promise.all([store.keys.getApiKey(job.accountId, job.keyId), store.accounts.getAccount(job.accountId)])
    if (key === null || account === null) return new RouterError('invalid_api_key', 'the key that submitted this job no longer exists')
    if (key.revoked) return new RouterError('invalid_api_key', 'the key that submitted this job was revoked before it ran')
    if (key.expiresAt !== null && key.expiresAt <= this.#now()) return new RouterError('invalid_api_key', 'the key that submitted this job expired before it ran')
    const entry = entryOf({ kind: 'api', key, account }, this.#o.defaultRateLimit)
    return entry.kind === 'api' ? entry.principal : new RouterError('invalid_api_key', 'not an sk- key')
  }

  /** Removes jobs whose result outlived jobs.result_ttl_ms, and their spooled uploads. */
  async sweep(): Promise<number> {
    const removed = await this.#o.store.jobs.removeEndedJobs(this.#now() - this.#o.resultTtlMs)
    for (const job of removed) if (job.bodyPath !== null) removeSpoolFile(job.bodyPath)
    return removed.length
  }

  /** GET /v1/async/jobs/:jobId: the owner's job, or 404 job_not_found (another account's, expired, unknown). */
  readonly poll: Handler = (head: RequestHead, reply: Reply): void => {
    let bare = ['x-request-id', head.requestId]
    const fail = (err: RouterError): void => sendError(reply, err, head.requestId, bare)
    const withPrincipal = (authed: Principal | RouterError): void => {
      if (authed instanceof RouterError) return fail(authed)
      // The account's standing, as on every inference answer; a poll is not a request of the limit's.
      const limiter = this.#o.limiter
      const peeked = limiter?.peek(authed.accountId, Date.now(), authed.rateLimit)
      // Copied: this process's window reuses its decision object, and the job is read before it is used.
      const standing = peeked === undefined || peeked instanceof Promise ? peeked : { ...peeked }
      const id = head.params?.[0] ?? ''
      Promise.all([standing, this.#o.store.jobs.getJob(id)]).then(
        ([rate, job]) => {
          if (rate !== undefined) bare = rateLimitHeaders(head.requestId, rate)
          if (job === null || job.accountId !== authed.accountId || !this.#matchesQuery(job, head.query) || this.#expired(job)) {
            return fail(new RouterError('job_not_found', `no job ${id} for this account (results are kept ${Math.round(this.#o.resultTtlMs / 60_000)} min)`))
          }
          const headers = job.status === 'pending' || job.status === 'processing' ? [...bare, 'Retry-After', RETRY_AFTER_SECONDS] : job.resKey === '' ? bare : [...bare, 'SVC-Res-Key', job.resKey]
          sendJson(reply, 200, jobBody(job), headers)
        },
        (err: unknown) => {
          log.error('jobs: reading a job failed', { err: String(err) })
          fail(new RouterError('server_error', 'the job could not be read'))
        },
      )
    }
    let authed
    try {
      authed = this.#o.authenticate(head)
    } catch (err) {
      return fail(toRouterError(err))
    }
    if (authed instanceof Promise) authed.then(withPrincipal, (err: unknown) => fail(toRouterError(err)))
    else withPrincipal(authed)
  }

  #expired(job: JobRecord): boolean {
    return (job.status === 'completed' || job.status === 'failed') && job.updatedAt + this.#o.resultTtlMs <= this.#now()
  }

  /** The `provider_address` and `model` query parameters the original clients send must match the job. */
  #matchesQuery(job: JobRecord, query: string): boolean {
    if (query.length === 0) return true
    const q = new URLSearchParams(query)
    const address = q.get('provider_address')
    if (address !== null && address !== '') {
      const a = address.toLowerCase()
      if (a !== job.providerAddress && a !== job.provider) return false
    }
    const model = q.get('model')
    return model === null || model === '' || model === job.model
  }

  /** Jobs waiting for a slot or running. */
  get active(): number {
    return this.#busy + this.#queue.length
  }

  /**
   * The router is stopping: no job starts any more (waiting ones stay pending for the next start) and this
   * resolves once the running ones ended, or after `ms`; close() then detaches what still runs.
   */
  drain(ms: number): Promise<boolean> {
    this.#draining = true
    for (const q of this.#queue.splice(0)) if (q.budget.open) q.budget.release()
    if (this.#busy === 0) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms)
      this.#idle.push(() => {
        clearTimeout(timer)
        resolve(true)
      })
    })
  }

  #wakeIdle(): void {
    if (this.#busy !== 0 || this.#idle.length === 0) return
    const idle = this.#idle
    this.#idle = []
    for (const fn of idle) fn()
  }

  /**
   * Stops running jobs: queued ones stay pending and running ones are detached (their attempt is cancelled and
   * nothing is recorded for them), so the next start resumes them all. What a provider already produced and
   * was billed is never billed again (see the file's comment).
   */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#sweep !== null) clearInterval(this.#sweep)
    if (this.#claimTimer !== null) clearInterval(this.#claimTimer)
    for (const q of this.#queue.splice(0)) if (q.budget.open) q.budget.release()
    const running = [...this.#running]
    this.#running.clear()
    for (const sink of running) sink.detach()
    this.#wakeIdle()
  }
}
