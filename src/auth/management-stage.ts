/**
 * The common stages of the account and key endpoints, as beginInference is for inference: read the (small)
 * JSON body if the method has one, authenticate an `mk-` key holding the endpoint's scope, then run the
 * handler. A handler may throw a RouterError (a 400 naming the field, a 404); anything else becomes a 500
 * that is logged without its request.
 *
 * The body is read before authenticating because uWS delivers body data only to a handler attached during
 * the route callback: authentication may need an await, the body cannot wait for it.
 */
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import type { HeaderList, Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'
import type { Scope } from '../store/store.js'
import type { MgmtAuthenticator, MgmtPrincipal } from './authenticate.js'

/** Bodies of the key endpoints are a few fields; anything bigger is a mistake. */
export const MANAGEMENT_BODY_LIMIT = 64 * 1024

export interface ManagementStart {
  readonly head: RequestHead
  readonly reply: Reply
  readonly principal: MgmtPrincipal
  /** The raw body (POST, PATCH), null for methods without one. */
  readonly body: Buffer | null
  /** x-request-id: on every response of this request. */
  readonly headers: HeaderList
}

export type ManagementHandler = (start: ManagementStart) => Promise<void>

export function beginManagement(
  authenticate: MgmtAuthenticator,
  head: RequestHead,
  reply: Reply,
  scope: Scope,
  withBody: boolean,
  handler: ManagementHandler,
): void {
  const headers = ['x-request-id', head.requestId]
  const fail = (err: unknown): void => {
    const error = toRouterError(err)
    if (!(err instanceof RouterError)) log.error('management request failed', { path: head.path, err: String((err as Error)?.stack ?? err) })
    sendError(reply, error, head.requestId, headers)
  }
  const run = (principal: MgmtPrincipal | RouterError, body: Buffer | null): void => {
    if (principal instanceof RouterError) return fail(principal)
    handler({ head, reply, principal, body, headers }).catch(fail)
  }
  const authenticated = (body: Buffer | null): void => {
    let result: ReturnType<MgmtAuthenticator>
    try {
      result = authenticate(head, scope)
    } catch (err) {
      return fail(err)
    }
    if (result instanceof Promise) result.then((p) => run(p, body), fail)
    else run(result, body)
  }
  if (withBody) reply.readBody(MANAGEMENT_BODY_LIMIT, authenticated, fail)
  else authenticated(null)
}
