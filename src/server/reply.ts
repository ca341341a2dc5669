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

/** Who a request body read whole goes to (Reply.readBodyTo): one object of the request's, not two closures. */
export interface BodyReceiver {
  body(body: Buffer): void
  bodyError(err: RouterError): void
}

export interface Reply extends ResponseSink {
  /** Reads the whole request body, or fails with 413 request_too_large past `limit` bytes. */
  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterError) => void): void
  /** readBody, answered to the methods of `receiver`. */
  readBodyTo(limit: number, receiver: BodyReceiver): void
  /**
   * The request body as a stream with flow control (for bodies that are passed on as they arrive). With `pool`,
   * chunks are pooled memory (upstream/chunk-pool.ts): held for the handler's call only.
   */
  bodySource(pool?: ChunkPool): BodySource
}

/** What watchAnswer runs around an answer (called as methods of the hooks object). */
export interface AnswerHooks {
  /** Before the answer's first byte (`send` or `begin`). */
  starting?(): void
  /** Once the answer is whole (after `send` or `end`), or the client went away first. */
  over?(): void
}

/**
 * `reply`, with `hooks` run as its answer starts and once the request is over (`over` runs once): for what a
 * stage holds until then (a request counted in flight, a spooled upload to delete, a streamed upload's memory to
 * give back). A class, not an object of closures: the drain's count wraps every inference request in one.
 */
export function watchAnswer(reply: Reply, hooks: AnswerHooks): Reply {
  return new WatchedReply(reply, hooks)
}

class WatchedReply implements Reply {
  readonly #inner: Reply
  readonly #hooks: AnswerHooks
  readonly #watchesEnd: boolean
  #ended = false
  #abortHandler: (() => void) | null = null

  constructor(inner: Reply, hooks: AnswerHooks) {
    this.#inner = inner
    this.#hooks = hooks
    this.#watchesEnd = hooks.over !== undefined
    if (this.#watchesEnd) {
      inner.onAborted(() => {
        this.#end()
        this.#abortHandler?.()
      })
    }
  }

  #end(): void {
    if (this.#ended || !this.#watchesEnd) return
    this.#ended = true
    this.#hooks.over!()
  }

  get aborted(): boolean {
    return this.#inner.aborted
  }

  get started(): boolean {
    return this.#inner.started
  }

  onAborted(handler: () => void): void {
    // Without an `over` hook nothing of this wrapper's listens: the handler goes to the reply as it is.
    if (!this.#watchesEnd) this.#inner.onAborted(handler)
    else this.#abortHandler = handler
  }

  send(status: number, headers: HeaderList, body: string | Uint8Array): void {
    this.#hooks.starting?.()
    this.#inner.send(status, headers, body)
    this.#end()
  }

  begin(status: number, headers: HeaderList): void {
    this.#hooks.starting?.()
    this.#inner.begin(status, headers)
  }

  write(chunk: string | Uint8Array): boolean {
    return this.#inner.write(chunk)
  }

  onWritable(handler: () => void): void {
    this.#inner.onWritable(handler)
  }

  end(chunk?: string | Uint8Array): void {
    this.#inner.end(chunk)
    this.#end()
  }

  cork(fn: () => void): void {
    this.#inner.cork(fn)
  }

  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterError) => void): void {
    this.#inner.readBody(limit, onBody, onError)
  }

  readBodyTo(limit: number, receiver: BodyReceiver): void {
    this.#inner.readBodyTo(limit, receiver)
  }

  bodySource(pool?: ChunkPool): BodySource {
    return this.#inner.bodySource(pool)
  }
}
