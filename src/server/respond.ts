/** Error and JSON answers in the DESIGN.md §4 envelope, with the headers every response carries. */
import { renderError, RouterError } from '../errors.js'
import type { HeaderList, Reply } from './reply.js'

const JSON_TYPE = ['Content-Type', 'application/json']

/**
 * Answers with the error envelope; `headers` are added (request id, rate limit), then the error's own
 * (Retry-After…). An inference error after selection passes its `x_svc_trace` block.
 */
export function sendError(reply: Reply, err: RouterError, requestId: string, headers: HeaderList, trace?: Record<string, unknown>): void {
  const extra = err.headers === undefined ? [] : Object.entries(err.headers).flat()
  reply.send(err.status, [...JSON_TYPE, ...headers, ...extra], renderError(err, requestId, trace))
}

export function sendJson(reply: Reply, status: number, body: string | Uint8Array, headers: HeaderList): void {
  reply.send(status, [...JSON_TYPE, ...headers], body)
}
