/**
 * The stages every inference surface runs before its own work, in order: authenticate, rate-limit, parse the
 * routing headers. The billing stage (reserve before forwarding, settle after) slots in after selection.
 */
import type { Authenticator, Principal } from '../auth/principal.js'
import { ResetClock, type RateLimiter } from '../auth/rate-limit.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import { parseRoutingHeaders, RoutingPrefs, tierName, UNSET } from '../routing/preferences.js'
import type { RoutingTable } from '../routing/table.js'
import type { HeaderList, Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'
import type { ExchangeContext } from '../upstream/exchange.js'

export interface InferenceDeps {
  readonly table: RoutingTable
  readonly exchange: ExchangeContext
  readonly limiter: RateLimiter
  readonly authenticate: Authenticator
  readonly maxJsonBodyBytes: number
}

/** What a surface receives once the common stages passed. */
export interface InferenceStart {
  readonly head: RequestHead
  readonly reply: Reply
  readonly principal: Principal
  readonly prefs: RoutingPrefs
  /** x-request-id and the X-RateLimit-* headers: on every response of this request. */
  readonly headers: HeaderList
}

const resetClock = new ResetClock()

/**
 * Runs the common stages and calls `next` with the whole JSON body once they passed and it has arrived;
 * otherwise answers with the first error. Synchronous whenever authentication is (a warm key cache).
 *
 * The body is read from the start, before authentication: uWS hands the body only to a reader attached during
 * the route callback, and a cache miss makes authentication finish later (a networked store's read outlives
 * the callback). A request refused early has its remaining body ignored.
 */
export function beginInference(
  deps: InferenceDeps,
  head: RequestHead,
  reply: Reply,
  next: (start: InferenceStart, body: Buffer) => void,
): void {
  let body: Buffer | null = null
  let admitted: InferenceStart | null = null
  let refused = false
  const refuse = (err: RouterError, headers: HeaderList): void => {
    if (refused) return
    refused = true
    sendError(reply, err, head.requestId, headers)
  }
  const admit = (start: InferenceStart): void => {
    if (refused) return
    admitted = start
    if (body !== null) next(start, body)
  }
  reply.readBody(
    deps.maxJsonBodyBytes,
    (raw) => {
      if (refused) return
      body = raw
      if (admitted !== null) next(admitted, raw)
    },
    (err) => refuse(err, admitted?.headers ?? ['x-request-id', head.requestId]),
  )

  const authed = deps.authenticate(head)
  if (authed instanceof Promise) {
    authed.then(
      (result) => afterAuth(deps, head, reply, result, admit, refuse),
      (err: unknown) => {
        log.error('authentication failed', { err: String(err) })
        refuse(toRouterError(err), ['x-request-id', head.requestId])
      },
    )
    return
  }
  afterAuth(deps, head, reply, authed, admit, refuse)
}

function afterAuth(
  deps: InferenceDeps,
  head: RequestHead,
  reply: Reply,
  authed: Principal | RouterError,
  admit: (start: InferenceStart) => void,
  refuse: (err: RouterError, headers: HeaderList) => void,
): void {
  if (authed instanceof RouterError) return refuse(authed, ['x-request-id', head.requestId])
  const rate = deps.limiter.take(authed.accountId, Date.now(), authed.rateLimit)
  const headers = [
    'x-request-id',
    head.requestId,
    'X-RateLimit-Limit-Requests',
    String(rate.limit),
    'X-RateLimit-Remaining-Requests',
    String(rate.remaining),
    'X-RateLimit-Reset-Requests',
    resetClock.iso(rate.resetAt),
  ]
  if (!rate.allowed) {
    const err = new RouterError('rate_limit_exceeded', `account request limit of ${rate.limit} per minute reached`, {
      'Retry-After': String(rate.retryAfter),
    })
    return refuse(err, headers)
  }
  const prefs = new RoutingPrefs()
  const bad = parseRoutingHeaders(head, prefs)
  if (bad !== null) return refuse(bad, headers)
  admit({ head, reply, principal: authed, prefs, headers })
}

/**
 * The key's own constraints (spec §5): its trust tier applies to every request and cannot be weakened, and its
 * allowed models bound what it may call. Run after the body's `provider` object was merged.
 */
export function applyKeyPolicy(principal: Principal, prefs: RoutingPrefs, model: string): RouterError | null {
  if (principal.allowedModels !== null && !principal.allowedModels.has(model)) {
    return new RouterError('model_not_allowed', `this key may not use model ${model}`)
  }
  if (principal.tier >= 0) {
    if (prefs.tier === UNSET) prefs.tier = principal.tier
    else if (prefs.tier < principal.tier) {
      return new RouterError('trust_mode_mismatch', `trust mode mismatch: key=${tierName(principal.tier)}, request=${tierName(prefs.tier)}`)
    }
  }
  return null
}

/** Parses a JSON request body that must be an object. */
export function parseJsonObject(body: Buffer): Record<string, unknown> | RouterError {
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch (err) {
    return new RouterError('invalid_request', `request body is not valid JSON: ${(err as Error).message}`)
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return new RouterError('invalid_request', 'request body must be a JSON object')
  }
  return value as Record<string, unknown>
}
