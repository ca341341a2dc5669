/** Error and JSON answers in the DESIGN.md §4 envelope, with the headers every response carries. */
import { renderError, RouterError } from '../errors.js'
import type { HeaderList, ResponseSink } from '../upstream/sink.js'

const JSON_TYPE = ['Content-Type', 'application/json']

/**
 * Answers with the error envelope of `render` (the OpenAI-style one unless a surface has its own); `headers` are
 * added (request id, rate limit), then the error's own (Retry-After…).
 */
export function sendError(
  reply: ResponseSink,
  err: RouterError,
  requestId: string,
  headers: HeaderList,
  render: (err: RouterError, requestId: string) => string = renderError,
): void {
  const extra = err.headers === undefined ? [] : Object.entries(err.headers).flat()
  reply.send(err.status, [...JSON_TYPE, ...headers, ...extra], render(err, requestId))
}

export function sendJson(reply: ResponseSink, status: number, body: string | Uint8Array, headers: HeaderList): void {
  reply.send(status, [...JSON_TYPE, ...headers], body)
}
