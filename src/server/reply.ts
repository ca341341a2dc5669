/**
 * How handlers answer a request without touching uWS: the HTTP response is the engine's response sink
 * (upstream/sink.ts), plus reading the request body. Every method is safe to call after the client went away
 * (it does nothing then); `aborted` tells whether it did.
 */
import type { RouterError } from '../errors.js'
import type { ChunkPool } from '../upstream/chunk-pool.js'
import type { BodySource } from '../upstream/request-body.js'
import type { HeaderList, ResponseSink } from '../upstream/sink.js'

export type { HeaderList }

export interface Reply extends ResponseSink {
  /** Reads the whole request body, or fails with 413 request_too_large past `limit` bytes. */
  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterError) => void): void
  /**
   * The request body as a stream with flow control (for bodies that are passed on as they arrive). With `pool`,
   * chunks are pooled memory (upstream/chunk-pool.ts): held for the handler's call only.
   */
  bodySource(pool?: ChunkPool): BodySource
}

/** What watchAnswer runs around an answer. */
export interface AnswerHooks {
  /** Before the answer's first byte (`send` or `begin`). */
  readonly starting?: () => void
  /** Once the answer is whole (after `send` or `end`), or the client went away first. */
  readonly over?: () => void
}

/**
 * `reply`, with `hooks` run as its answer starts and once the request is over: for what an admission holds
 * until then (a spooled upload to delete, a streamed upload's memory to give back).
 */
export function watchAnswer(reply: Reply, hooks: AnswerHooks): Reply {
  const { starting, over } = hooks
  if (over !== undefined) reply.onAborted(over)
  return {
    get aborted() {
      return reply.aborted
    },
    get started() {
      return reply.started
    },
    onAborted:
      over === undefined
        ? (handler) => reply.onAborted(handler)
        : (handler) =>
            reply.onAborted(() => {
              over()
              handler()
            }),
    send(status, headers, body) {
      starting?.()
      reply.send(status, headers, body)
      over?.()
    },
    begin(status, headers) {
      starting?.()
      reply.begin(status, headers)
    },
    write: (chunk) => reply.write(chunk),
    onWritable: (handler) => reply.onWritable(handler),
    end(chunk) {
      reply.end(chunk)
      over?.()
    },
    cork: (fn) => reply.cork(fn),
    readBody: (limit, onBody, onError) => reply.readBody(limit, onBody, onError),
    bodySource: (pool) => reply.bodySource(pool),
  }
}
