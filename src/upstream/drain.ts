/**
 * The drain (spec §8, issue #13 §7): inference requests are counted from the route's first line to their
 * response's end (or the client's going away), so a shutdown can wait for exactly those. A request that
 * arrives once the drain began (on a kept-alive connection; the listener is closed) gets 503 at once.
 *
 * The count is kept by a thin Reply around the front end's: one object and a few forwarding calls per
 * request, no timer and no event.
 */
import { RouterError } from '../errors.js'
import type { Handler } from '../server/app.js'
import type { Reply } from '../server/reply.js'
import { sendError } from '../server/respond.js'
import { publishRefused } from '../telemetry/events.js'
import type { RouterError as RouterErrorType } from '../errors.js'
import type { ChunkPool } from './chunk-pool.js'
import type { BodySource } from './request-body.js'
import type { HeaderList } from './sink.js'

export class InFlight {
  count = 0
  draining = false
  #idle: (() => void)[] = []

  /** The route of inference `surface`, with its requests counted and refused once the drain began. */
  track(handler: Handler, surface: string): Handler {
    return (head, reply) => {
      if (this.draining) {
        const err = new RouterError('no_available_provider', 'the router is shutting down')
        sendError(reply, err, head.requestId, ['x-request-id', head.requestId, 'Connection', 'close'])
        publishRefused(head, surface, '', false, err.status, err.code)
        return
      }
      this.count++
      handler(head, new TrackedReply(reply, this))
    }
  }

  done(): void {
    this.count--
    if (this.count === 0 && this.#idle.length > 0) {
      const waiting = this.#idle
      this.#idle = []
      for (const fn of waiting) fn()
    }
  }

  /** Resolves true once no request is in flight, false if `ms` passed first. */
  idle(ms: number): Promise<boolean> {
    if (this.count === 0) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#idle = this.#idle.filter((fn) => fn !== onIdle)
        resolve(false)
      }, ms)
      const onIdle = (): void => {
        clearTimeout(timer)
        resolve(true)
      }
      this.#idle.push(onIdle)
    })
  }
}

class TrackedReply implements Reply {
  readonly #inner: Reply
  readonly #owner: InFlight
  #finished = false
  #abortHandler: (() => void) | null = null

  constructor(inner: Reply, owner: InFlight) {
    this.#inner = inner
    this.#owner = owner
    inner.onAborted(() => {
      this.#finish()
      this.#abortHandler?.()
    })
  }

  #finish(): void {
    if (this.#finished) return
    this.#finished = true
    this.#owner.done()
  }

  get aborted(): boolean {
    return this.#inner.aborted
  }

  get started(): boolean {
    return this.#inner.started
  }

  onAborted(handler: () => void): void {
    this.#abortHandler = handler
  }

  send(status: number, headers: HeaderList, body: string | Uint8Array): void {
    this.#inner.send(status, headers, body)
    this.#finish()
  }

  begin(status: number, headers: HeaderList): void {
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
    this.#finish()
  }

  cork(fn: () => void): void {
    this.#inner.cork(fn)
  }

  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterErrorType) => void): void {
    this.#inner.readBody(limit, onBody, onError)
  }

  bodySource(pool?: ChunkPool): BodySource {
    return this.#inner.bodySource(pool)
  }
}
