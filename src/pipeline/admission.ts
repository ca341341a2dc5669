/**
 * Admission, shared by every inference surface (DESIGN.md §5): authenticate → rate limit → routing headers →
 * body → key policy → selection → budget, then the failover loop. A surface only says how its body is read and
 * how an attempt is planned; everything here is the same for all of them.
 *
 * The body is read from the start, before authentication: uWS hands the body only to a reader attached during
 * the route callback, and a key-cache miss makes authentication finish later. A request refused early has its
 * remaining body ignored. Synchronous from the body's arrival to the first upstream write whenever the key and
 * the account's books are warm.
 */
import type { Authenticator, Principal } from '../auth/principal.js'
import { rateLimitHeaders, type RateDecision, type RateGate } from '../auth/rate-limit.js'
import { budgetFor } from '../billing/books.js'
import type { Usage } from '../billing/cost.js'
import type { Books } from '../billing/books.js'
import { readJsonBody } from '../codecs/json-body.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import { mergeBodyPreferences, parseRoutingHeaders, RoutingPrefs } from '../routing/preferences.js'
import { select, type Selection } from '../routing/select.js'
import type { RoutingTable } from '../routing/table.js'
import type { Handler } from '../server/app.js'
import type { BodyReceiver, HeaderList, Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'
import type { EngineSurface, Surface, SurfaceRequest } from '../surfaces/surface.js'
import { publishRefused, requestBody } from '../telemetry/events.js'
import { clientTrace } from '../telemetry/trace-context.js'
import { Failover, type EngineContext } from '../upstream/failover.js'
import { applyKeyPolicy } from './key-policy.js'

export interface AdmissionDeps {
  readonly table: RoutingTable
  readonly engine: EngineContext
  readonly ledger: Books
  readonly limiter: RateGate
  readonly authenticate: Authenticator
  readonly maxJsonBodyBytes: number
}

/** What the stages before the body produced. */
export interface Admitted {
  readonly principal: Principal
  readonly prefs: RoutingPrefs
  /** x-request-id and the X-RateLimit-* headers: on every answer of this request. */
  readonly headers: HeaderList
}



/** The route handler of a JSON inference surface. */
export function createInferenceRoute<R extends SurfaceRequest, U extends Usage>(
  deps: AdmissionDeps,
  surface: Surface<R, U>,
  launcher: Launcher<R, U> = answerNow(deps),
): Handler {
  const render = surface.renderError

  function onBody(head: RequestHead, reply: Reply, admitted: Admitted, raw: Buffer): void {
    if (requestBody.hasSubscribers) requestBody.publish({ requestId: head.requestId, surface: surface.name, body: raw })
    const body = readJsonBody(raw)
    if (body instanceof RouterError) return refuseBody(head, reply, surface, admitted.headers, body)
    const req = surface.parse(body, head)
    if (req instanceof RouterError) return refuseBody(head, reply, surface, admitted.headers, req)
    const prepared = surface.prepare?.(req, admitted.principal) ?? null
    if (prepared === null) return admitRequest(deps, surface, head, reply, admitted, req, launcher)
    const fail = (err: RouterError): void => refuseBody(head, reply, surface, admitted.headers, err)
    if (prepared instanceof RouterError) return fail(prepared)
    const admit = (err: RouterError | null): void => {
      if (reply.aborted) return
      if (err !== null) return fail(err)
      admitRequest(deps, surface, head, reply, admitted, req, launcher)
    }
    prepared.then(guard(head, reply, admitted.headers, render, admit), (err: unknown) => {
      log.error('preparing a request failed', { request_id: head.requestId, err: String(err) })
      fail(toRouterError(err))
    })
  }

  return function admitInference(head: RequestHead, reply: Reply): void {
    const admission = new JsonAdmission(head, reply, surface, onBody)
    reply.readBodyTo(deps.maxJsonBodyBytes, admission)
    admitHead(deps, head, reply, render, admission)
  }
}

/**
 * One JSON request from its arrival until both its body and the stages before the body are through: what the
 * body reader and admitHead answer to, as the methods of one object rather than a closure each per request.
 */
class JsonAdmission implements BodyReceiver, HeadReceiver {
  #raw: Buffer | null = null
  #admitted: Admitted | null = null
  #refused = false

  constructor(
    readonly head: RequestHead,
    readonly reply: Reply,
    readonly surface: Refusing,
    readonly onBody: (head: RequestHead, reply: Reply, admitted: Admitted, raw: Buffer) => void,
  ) {}

  body(raw: Buffer): void {
    this.#raw = raw
    this.#proceed()
  }

  bodyError(err: RouterError): void {
    this.refuse(err, this.#admitted?.headers ?? ['x-request-id', this.head.requestId])
  }

  admit(admitted: Admitted): void {
    this.#admitted = admitted
    this.#proceed()
  }

  refuse(err: RouterError, headers: HeaderList): void {
    if (this.#refused) return
    this.#refused = true
    sendError(this.reply, err, this.head.requestId, headers, this.surface.renderError)
    publishRefused(this.head, this.surface.name, '', false, err.status, err.code)
  }

  #proceed(): void {
    const raw = this.#raw
    const admitted = this.#admitted
    if (this.#refused || raw === null || admitted === null) return
    try {
      this.onBody(this.head, this.reply, admitted, raw)
    } catch (err) {
      crashed(this.head, this.reply, admitted.headers, this.surface.renderError, err)
      publishRefused(this.head, this.surface.name, '', false, 500, 'server_error')
    }
  }
}

/** What a refusal needs of a surface: its name (for the event) and its error envelope. */
type Refusing = Pick<Surface<SurfaceRequest>, 'name' | 'renderError'>

/** A request refused at its body (unreadable, or not what the surface accepts): no model is known yet. */
function refuseBody(head: RequestHead, reply: Reply, surface: Refusing, headers: HeaderList, err: RouterError): void {
  sendError(reply, err, head.requestId, headers, surface.renderError)
  publishRefused(head, surface.name, '', false, err.status, err.code)
}

/** A request refused after its body was read: its model is known, and whether the catalog has it. */
function refuseRequest(
  head: RequestHead,
  reply: Reply,
  surface: Refusing,
  headers: HeaderList,
  model: string,
  known: boolean,
  err: RouterError,
): void {
  sendError(reply, err, head.requestId, headers, surface.renderError)
  publishRefused(head, surface.name, model, known, err.status, err.code)
}

/** An admitted request and its candidates: what a launcher runs. */
export interface Launch<R extends SurfaceRequest, U extends Usage> {
  readonly head: RequestHead
  readonly reply: Reply
  readonly admitted: Admitted
  readonly surface: EngineSurface<R, U>
  readonly request: R
  readonly selection: Selection
}

/**
 * What runs an admitted request: the failover loop answering on the client's reply (answerNow), or an async
 * job that answers 202 and runs the same loop into a job sink (src/jobs/runner.ts).
 */
export type Launcher<R extends SurfaceRequest, U extends Usage> = (launch: Launch<R, U>) => void

/**
 * The launcher of every synchronous surface: the request's budget, then the failover loop writing to the
 * client's reply. `started` receives the loop once it runs (a multipart upload may still have to cancel it).
 */
export function answerNow<R extends SurfaceRequest, U extends Usage>(
  deps: Pick<AdmissionDeps, 'engine' | 'ledger'>,
  started?: (failover: Failover<R, U>) => void,
): Launcher<R, U> {
  return function runFailover({ head, reply, admitted, surface, request, selection }: Launch<R, U>): void {
    const failover = new Failover(
      deps.engine,
      {
        requestId: head.requestId,
        startedAt: head.startedAt,
        surface,
        request,
        baseHeaders: admitted.headers,
        selection,
        budget: budgetFor(deps.ledger, admitted.principal, head.requestId),
        trace: clientTrace(head.traceparent, head.tracestate),
      },
      reply,
    )
    started?.(failover)
    failover.start()
  }
}

/**
 * The stages after the body, shared by JSON and multipart surfaces: the body's `provider` object, key policy,
 * selection, the books, then `launcher` (the failover loop, at once or as a job).
 */
export function admitRequest<R extends SurfaceRequest, U extends Usage>(
  deps: AdmissionDeps,
  surface: EngineSurface<R, U>,
  head: RequestHead,
  reply: Reply,
  admitted: Admitted,
  req: R,
  launcher: Launcher<R, U>,
): void {
  const { principal, prefs, headers } = admitted
  const render = surface.renderError
  const index = deps.table.model(req.model)
  const known = index !== undefined
  try {
    mergeBodyPreferences(req.provider, prefs)
  } catch (err) {
    return refuseRequest(head, reply, surface, headers, req.model, known, toRouterError(err))
  }
  const policy = applyKeyPolicy(principal, prefs, req.model)
  if (policy !== null) return refuseRequest(head, reply, surface, headers, req.model, known, policy)

  if (index === undefined) {
    const err = new RouterError('model_not_found', `model ${req.model} is not in the catalog (see GET /v1/models)`)
    return refuseRequest(head, reply, surface, headers, req.model, known, err)
  }
  const type = index.offers[0]!.model.type
  if (type !== surface.modelType) {
    const err = new RouterError('model_not_supported_on_surface', `model ${req.model} is a ${type} model, not a ${surface.modelType} model`)
    return refuseRequest(head, reply, surface, headers, req.model, known, err)
  }
  const pinned = prefs.address === '' ? null : (deps.table.provider(prefs.address) ?? null)
  const selection = select(
    index,
    prefs,
    {
      dimension: surface.dimension,
      paramMask: req.paramMask,
      maxOutput: req.maxOutput,
      allowedProviders: principal.allowedProviders,
      now: performance.now(),
    },
    pinned,
  )
  if (selection instanceof RouterError) return refuseRequest(head, reply, surface, headers, req.model, known, selection)

  // The ledger reads a principal's books from the store once; after that admission is synchronous.
  const ledger = deps.ledger
  const warming = principal.keyId === null ? null : ledger.prepare(principal)
  if (warming === null) {
    // Admission may have waited (a key-cache miss, a shared rate window, a surface's prepare): a receiver that
    // left meanwhile gets nothing launched.
    if (reply.aborted) return
    return launcher({ head, reply, admitted, surface, request: req, selection })
  }
  const forward = (): void => {
    if (reply.aborted) return
    launcher({ head, reply, admitted, surface, request: req, selection })
  }
  warming.then(guard(head, reply, headers, render, forward), (err: unknown) => {
    log.error('billing: loading the account books failed', { err: String(err), account: principal.accountId })
    refuseRequest(head, reply, surface, headers, req.model, known, toRouterError(err))
  })
}

/** What admitHead answers to: every refusal, with the headers to answer it with, or what the stages admitted. */
export interface HeadReceiver {
  refuse(err: RouterError, headers: HeaderList): void
  admit(admitted: Admitted): void
}

/**
 * The stages before the body, shared by JSON and multipart admission: authenticate (a key-cache miss finishes
 * later), rate limit, routing headers. `to.admit` gets what they produced; `to.refuse` every refusal, with the
 * headers to answer it with.
 */
export function admitHead(
  deps: AdmissionDeps,
  head: RequestHead,
  reply: Reply,
  render: (err: RouterError, requestId: string) => string,
  to: HeadReceiver,
): void {
  const authed = deps.authenticate(head)
  if (authed instanceof Promise) {
    const bare = ['x-request-id', head.requestId]
    authed.then(
      guard(head, reply, bare, render, (principal: Principal | RouterError) => admitAuthed(deps, head, reply, render, to, principal)),
      (err: unknown) => {
        log.error('authentication failed', { err: String(err) })
        to.refuse(toRouterError(err), bare)
      },
    )
    return
  }
  admitAuthed(deps, head, reply, render, to, authed)
}

/** admitHead once the key is known: rate limit and routing headers. No closure unless the rate limit answers later. */
function admitAuthed(
  deps: AdmissionDeps,
  head: RequestHead,
  reply: Reply,
  render: (err: RouterError, requestId: string) => string,
  to: HeadReceiver,
  authed: Principal | RouterError,
): void {
  if (authed instanceof RouterError) return to.refuse(authed, ['x-request-id', head.requestId])
  const result = limitAndRoute(deps, head, authed)
  if (result instanceof Promise) {
    const bare = ['x-request-id', head.requestId]
    result.then(
      guard(head, reply, bare, render, (limited: Admitted | Refusal) => admitLimited(to, limited)),
      (err: unknown) => {
        log.error('rate limit failed', { err: String(err) })
        to.refuse(toRouterError(err), bare)
      },
    )
    return
  }
  admitLimited(to, result)
}

/** What the rate limit and the routing headers decided: refused with its headers, or admitted. */
function admitLimited(to: HeadReceiver, result: Admitted | Refusal): void {
  if (result instanceof Refusal) return to.refuse(result.err, result.headers)
  to.admit(result)
}

export class Refusal {
  constructor(
    readonly err: RouterError,
    readonly headers: HeaderList,
  ) {}
}

/**
 * Rate limit, then the routing headers: what admission knows before the body. Synchronous with this process's
 * window; a window shared by the replicas answers after its round trip.
 */
export function limitAndRoute(deps: AdmissionDeps, head: RequestHead, principal: Principal): Admitted | Refusal | Promise<Admitted | Refusal> {
  const rate = deps.limiter.take(principal.accountId, Date.now(), principal.rateLimit)
  if (rate instanceof Promise) return rate.then((decided) => routeWithin(head, principal, decided))
  return routeWithin(head, principal, rate)
}

function routeWithin(head: RequestHead, principal: Principal, rate: RateDecision): Admitted | Refusal {
  const headers = rateLimitHeaders(head.requestId, rate)
  if (!rate.allowed) {
    const err = new RouterError('rate_limit_exceeded', `account request limit of ${rate.limit} per minute reached`, {
      'Retry-After': String(rate.retryAfter),
    })
    return new Refusal(err, headers)
  }
  const prefs = new RoutingPrefs()
  const bad = parseRoutingHeaders(head, prefs)
  if (bad !== null) return new Refusal(bad, headers)
  return { principal, prefs, headers }
}

/**
 * `fn` wrapped so that whatever it throws ends this request with a 500 and nothing else: the uWS callback's own
 * net (server/app.ts) only covers the synchronous part of a request, and admission continues in promise callbacks.
 */
export function guard<A extends unknown[]>(
  head: RequestHead,
  reply: Reply,
  headers: HeaderList,
  render: Surface<SurfaceRequest>['renderError'],
  fn: (...args: A) => void,
): (...args: A) => void {
  return (...args: A) => {
    try {
      fn(...args)
    } catch (err) {
      crashed(head, reply, headers, render, err)
    }
  }
}

export function crashed(head: RequestHead, reply: Reply, headers: HeaderList, render: Surface<SurfaceRequest>['renderError'], err: unknown): void {
  log.error('request failed inside the router', { request_id: head.requestId, err: String((err as Error)?.stack ?? err) })
  if (!reply.started) sendError(reply, new RouterError('server_error', 'internal error'), head.requestId, headers, render)
  else reply.end()
}
