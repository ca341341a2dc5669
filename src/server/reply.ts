/**
 * How handlers answer a request without touching uWS: the HTTP response is the engine's response sink
 * (upstream/sink.ts), plus reading the request body. Every method is safe to call after the client went away
 * (it does nothing then); `aborted` tells whether it did.
 */
import type { RouterError } from '../errors.js'
import type { BodySource } from '../upstream/request-body.js'
import type { HeaderList, ResponseSink } from '../upstream/sink.js'

export type { HeaderList }

export interface Reply extends ResponseSink {
  /** Reads the whole request body, or fails with 413 request_too_large past `limit` bytes. */
  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterError) => void): void
  /** The request body as a stream with flow control (for bodies that are passed on as they arrive). */
  bodySource(): BodySource
}
