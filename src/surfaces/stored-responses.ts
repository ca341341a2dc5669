/**
 * The Responses surface's conversation state (issue 32), kept in the store so that it works across replicas:
 * before routing, a request's `previous_response_id` and `item_reference` items are resolved into the whole
 * input (prepare); once an answer's charge is durable, a `store: true` response is kept with its input and
 * output items (keep); `GET` and `DELETE /v1/responses/{id}` read and remove it, for its account only. An
 * unknown, expired, deleted or other account's id is 404 `response_not_found` alike.
 */
import type { Authenticator, Principal } from '../auth/principal.js'
import { rateLimitHeaders, type RateGate } from '../auth/rate-limit.js'
import type { ResponseCodec } from '../codecs/codec.js'
import type { ResponsesCodec } from '../codecs/responses-json-translation.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import type { Handler } from '../server/app.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError, sendJson } from '../server/respond.js'
import type { ResponseStore } from '../store/responses.js'
import type { Surface } from './surface.js'
import { responsesRecord, type ResponsesRequest } from './responses.js'

type Json = Record<string, any>

export interface StoredResponsesOptions {
  readonly store: ResponseStore
  /** How long a stored response is kept (responses.retention_ms). */
  readonly retentionMs: number
  /** The largest input a request may reach with its history (server.max_json_body_bytes): past it, 413. */
  readonly maxInputBytes: number
  readonly now?: () => number
}

export interface StoredResponsesRoutes extends StoredResponsesOptions {
  readonly authenticate: Authenticator
  readonly limiter?: RateGate
  /** How often expired responses are deleted (responses.sweep_interval_ms); 0: never (tests). */
  readonly sweepIntervalMs: number
}

function days(ms: number): string {
  const d = ms / 86_400_000
  return d >= 1 ? `${Math.round(d)} days` : `${Math.round(ms / 60_000)} min`
}

function notFound(id: string, retentionMs: number): RouterError {
  return new RouterError('response_not_found', `no stored response ${id} for this account (responses are kept ${days(retentionMs)} after they were made)`)
}

/** The Responses surface record with its state: prepare (resolve history) and keep (store the answer). */
export function createResponsesSurface(o: StoredResponsesOptions): Surface<ResponsesRequest> {
  const now = o.now ?? Date.now

  async function resolve(req: ResponsesRequest, accountId: string): Promise<RouterError | null> {
    const at = now()
    const [previous, found] = await Promise.all([
      req.previousId === null ? null : o.store.getResponse(accountId, req.previousId, at),
      req.references.length === 0 ? new Map<string, string>() : o.store.getItems(accountId, req.references, at),
    ])
    if (req.previousId !== null && previous === null) return notFound(req.previousId, o.retentionMs)
    let bytes = req.rawBytes
    const items: Json[] = []
    if (previous !== null) {
      // Bytes, not characters: the reservation counts every byte of the prompt as a token (billing/cost.ts).
      bytes += Buffer.byteLength(previous.input) + Buffer.byteLength(previous.output)
      if (bytes > o.maxInputBytes) return tooLarge(bytes)
      // A loop, not push(...items): a long history would pass more arguments than a call can take.
      for (const item of JSON.parse(previous.input) as Json[]) items.push(item)
      for (const item of JSON.parse(previous.output) as Json[]) items.push(item)
    }
    for (let i = 0; i < req.input.length; i++) {
      const item = req.input[i]!
      if (item.type !== 'item_reference') {
        items.push(item)
        continue
      }
      const text = found.get(item.id)
      if (text === undefined) return new RouterError('invalid_request', `input[${i}]: item_reference ${item.id} names no stored item of this account`)
      bytes += Buffer.byteLength(text)
      if (bytes > o.maxInputBytes) return tooLarge(bytes)
      items.push(JSON.parse(text) as Json)
    }
    req.items = items
    req.promptBytes = bytes
    return null
  }

  function tooLarge(bytes: number): RouterError {
    return new RouterError('request_too_large', `the input with its stored history is over ${bytes} bytes; the limit is ${o.maxInputBytes}`)
  }

  return {
    ...responsesRecord,
    prepare(req: ResponsesRequest, principal: Principal): Promise<RouterError | null> | null {
      req.accountId = principal.accountId
      // Nothing stored to read: no await at all (the common request).
      if (req.previousId === null && req.references.length === 0) return null
      return resolve(req, principal.accountId)
    },
    keep(req: ResponsesRequest, codec: ResponseCodec, trace: Record<string, unknown>): Promise<void> | null {
      if (!req.store) return null
      const answer = (codec as unknown as ResponsesCodec).kept()
      if (answer === null) return null
      const at = now()
      const items: { id: string; item: string }[] = []
      for (const item of answer.output) if (typeof item?.id === 'string' && item.id !== '') items.push({ id: item.id, item: JSON.stringify(item) })
      return o.store.putResponse({
        id: req.meta.id,
        accountId: req.accountId,
        model: req.model,
        createdAt: at,
        expiresAt: at + o.retentionMs,
        input: JSON.stringify(req.items),
        output: JSON.stringify(answer.output),
        response: JSON.stringify({ ...answer.response, x_svc_trace: trace }),
        items,
      })
    },
  }
}

/** GET and DELETE /v1/responses/:id, and the sweep of expired responses. */
export function createStoredResponsesRoutes(o: StoredResponsesRoutes): { get: Handler; remove: Handler; close(): void } {
  const now = o.now ?? Date.now
  const timer = o.sweepIntervalMs > 0 ? setInterval(sweep, o.sweepIntervalMs) : null
  timer?.unref()

  function sweep(): void {
    o.store.removeExpiredResponses(now()).catch((err: unknown) => log.error('responses: removing expired responses failed', { err: String(err) }))
  }

  /** Authenticates (an sk- key), then runs `then` with the principal and the headers of the answer. */
  function withPrincipal(head: RequestHead, reply: Reply, then: (principal: Principal, headers: string[]) => void): void {
    const bare = ['x-request-id', head.requestId]
    const onAuth = (authed: Principal | RouterError): void => {
      if (authed instanceof RouterError) return sendError(reply, authed, head.requestId, bare)
      // The account's standing, as on every inference answer; reading a stored response is not a request of the limit's.
      if (o.limiter === undefined) return then(authed, bare)
      const standing = o.limiter.peek(authed.accountId, Date.now(), authed.rateLimit)
      if (!(standing instanceof Promise)) return then(authed, rateLimitHeaders(head.requestId, standing))
      standing.then(
        (rate) => then(authed, rateLimitHeaders(head.requestId, rate)),
        (err: unknown) => sendError(reply, toRouterError(err), head.requestId, bare),
      )
    }
    let authed
    try {
      authed = o.authenticate(head)
    } catch (err) {
      return sendError(reply, toRouterError(err), head.requestId, bare)
    }
    if (authed instanceof Promise) authed.then(onAuth, (err: unknown) => sendError(reply, toRouterError(err), head.requestId, bare))
    else onAuth(authed)
  }

  const failed = (reply: Reply, head: RequestHead, headers: string[], what: string) => (err: unknown) => {
    log.error(`responses: ${what} failed`, { request_id: head.requestId, err: String(err) })
    sendError(reply, new RouterError('server_error', `the response could not be ${what === 'reading' ? 'read' : 'deleted'}`), head.requestId, headers)
  }

  return {
    get(head: RequestHead, reply: Reply): void {
      withPrincipal(head, reply, (principal, headers) => {
        const id = head.params?.[0] ?? ''
        o.store.getResponse(principal.accountId, id, now()).then((found) => {
          if (found === null) return sendError(reply, notFound(id, o.retentionMs), head.requestId, headers)
          sendJson(reply, 200, found.response, headers)
        }, failed(reply, head, headers, 'reading'))
      })
    },
    remove(head: RequestHead, reply: Reply): void {
      withPrincipal(head, reply, (principal, headers) => {
        const id = head.params?.[0] ?? ''
        o.store.deleteResponse(principal.accountId, id, now()).then((removed) => {
          if (!removed) return sendError(reply, notFound(id, o.retentionMs), head.requestId, headers)
          sendJson(reply, 200, JSON.stringify({ id, object: 'response.deleted', deleted: true }), headers)
        }, failed(reply, head, headers, 'deleting'))
      })
    },
    close(): void {
      if (timer !== null) clearInterval(timer)
    },
  }
}
