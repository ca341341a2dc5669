/**
 * The Reply over a uWS HttpResponse. uWS rules kept here so nobody else has to know them: onAborted is
 * attached before anything asynchronous, a response is never touched after abort or end, and every write
 * from outside the route callback happens inside cork().
 *
 * Slow clients: a write that meets backpressure arms uWS's fixed 10 s timeout, and only another write that
 * meets backpressure re-arms it; progress does not. A client reading a stream slowly through megabytes of
 * socket buffers can take longer than that between two writable events (measured: 3 s, then 10 s, then
 * cut, at 500 KB/s on loopback), so uWS would close a download that is moving. While a response waits for
 * writable, every STALL_CHECK_MS it is paused and resumed: that restarts uWS's timeout and asks the poll for
 * writable again. The wait itself is bounded by the send timeout (`server.send_timeout_ms`, as nginx's
 * send_timeout bounds a client that accepts nothing), after which the response is closed and onAborted runs.
 *
 * HEAD (`headOnly`): the same status and headers as the GET would get, with the Content-Length of the body it
 * would send, and no body. uWS does not know a HEAD answer has none (its end() writes the body, and the next
 * answer on the connection then starts inside it), and the Node 20 core's endWithoutBody(length) leaves the
 * response open; so the length is written as a header of ours and the answer ended by endWithoutBody() with no
 * length, which writes neither a body nor a Content-Length of its own.
 */
import type { HttpResponse } from './uws-build.js'
import { RouterError, statusLine } from '../errors.js'
import { release, type ChunkPool } from '../upstream/chunk-pool.js'
import { ChunkGatherer, GrowingBody } from '../codecs/body-chunks.js'
import type { BodySource } from '../upstream/request-body.js'
import type { BodyReceiver, HeaderList, Reply } from './reply.js'
import { decimalDigits } from '../vocabulary/http.js'

function noop(): void {}

function byteLength(body: string | Uint8Array): number {
  return typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength
}

/** The 413 of a body past `limit`, announced or counted. */
function bodyTooLarge(limit: number): RouterError {
  return new RouterError('request_too_large', `request body exceeds the limit of ${limit} bytes`)
}

/** How often a response waiting for writable restarts uWS's timeout (10 s, which ticks by 4 s). */
export const STALL_CHECK_MS = 3_000
/** The default longest a client may take to drain what was written before the response is closed as stalled. */
export const SEND_TIMEOUT_MS = 60_000

export class UwsReply implements Reply {
  readonly #res: HttpResponse
  #aborted = false
  #started = false
  #done = false
  #abortHandler: () => void = noop
  #writableHandler: (() => void) | null = null
  /** Set while a writable handler waits: the stall check timer and when the wait began. */
  #stall: NodeJS.Timeout | null = null
  #waitingSince = 0
  /** The request body is paused (a streamed upload waiting for its reader): an answer resumes it first. */
  #bodyPaused = false
  readonly #sendTimeoutMs: number
  /** The request's Content-Length as sent ('' when none): a body announced past a limit is refused unread. */
  readonly #declaredLength: string
  /** A HEAD request: the answer's head only (see above). */
  readonly #headOnly: boolean
  /** HEAD, a streamed answer: its status and headers, held until end() knows the length; and the bytes so far. */
  #heldHead: { status: number; headers: HeaderList } | null = null
  #headBytes = 0

  constructor(res: HttpResponse, sendTimeoutMs = SEND_TIMEOUT_MS, declaredLength = '', headOnly = false) {
    this.#res = res
    this.#sendTimeoutMs = sendTimeoutMs
    this.#declaredLength = declaredLength
    this.#headOnly = headOnly
    res.onAborted(() => {
      this.#aborted = true
      this.#stopStallTimer()
      const handler = this.#abortHandler
      this.#abortHandler = noop
      handler()
    })
  }

  get aborted(): boolean {
    return this.#aborted
  }

  get started(): boolean {
    return this.#started
  }

  onAborted(handler: () => void): void {
    this.#abortHandler = handler
  }

  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterError) => void): void {
    this.readBodyTo(limit, { body: onBody, bodyError: onError })
  }

  readBodyTo(limit: number, receiver: BodyReceiver): void {
    let body: GrowingBody | null = null
    // Announced past the limit: refused now, not once the client has sent up to the limit of it. The rest of
    // the body is read and dropped either way.
    let failed = decimalDigits(this.#declaredLength, 15) > limit
    this.#res.onData((chunk, isLast) => {
      if (failed) return
      if ((body?.size ?? 0) + chunk.byteLength > limit) {
        failed = true
        receiver.bodyError(bodyTooLarge(limit))
        return
      }
      // uWS reuses `chunk` once this callback returns, so it is copied; a body in one piece is copied once.
      if (isLast && body === null) {
        receiver.body(Buffer.from(new Uint8Array(chunk)))
        return
      }
      ;(body ??= new GrowingBody(limit)).append(new Uint8Array(chunk))
      if (isLast) receiver.body(body.bytes())
    })
    if (failed) receiver.bodyError(bodyTooLarge(limit))
  }

  bodySource(pool?: ChunkPool): BodySource {
    const res = this.#res
    const live = (): boolean => !this.#aborted && !this.#done
    let whole = false
    return {
      onChunk: (handler) => {
        // uWS reuses `chunk` once this callback returns: each one is copied (small reads gathered first), into
        // the pool's memory when given one, and then held for the handler's call only (whoever keeps it takes
        // a hold of its own).
        const gather = new ChunkGatherer()
        const emit = (bytes: Uint8Array, last: boolean): void => {
          if (pool === undefined) return handler(Buffer.from(bytes), last)
          const copy = pool.copy(bytes)
          try {
            handler(copy, last)
          } finally {
            release(copy)
          }
        }
        res.onData((chunk, isLast) => {
          if (isLast) whole = true
          if (this.#aborted) return
          gather.push(new Uint8Array(chunk), isLast, emit)
          // Read past pause() (README "Known issues"): uWS re-armed its 10 s idle timeout for the bytes it
          // counted, on a socket that stays paused while the provider catches up; pausing again turns it off,
          // or the connection would be closed under an upload that is merely waiting.
          if (this.#bodyPaused && !whole && live()) res.pause()
        })
      },
      // Once the body is whole, flow control is over: uWS's resume() would arm its 10 s idle timeout again
      // (pause() and the last chunk turn it off), and an answer that takes longer would have the connection
      // closed under it. A body paused when its last chunk came (read past pause) stays so until the answer.
      pause: () => {
        if (!live() || whole) return
        this.#bodyPaused = true
        res.pause()
      },
      resume: () => {
        if (!live() || whole) return
        this.#bodyPaused = false
        res.resume()
      },
    }
  }

  /**
   * The status line and the headers in two calls into uWS whatever their number: every call costs a crossing
   * and a UTF-8 copy of each string argument, and an answer carries six to nine headers (x-request-id, the
   * rate limit's three, the content type, the provider's id). uWS writes `name: value\r\n` for a header, so
   * the first name with the rest joined into its value is the same bytes. Every name and value here is the
   * router's own or checked before it gets here (no CR or LF), as it had to be header by header.
   */
  #writeHead(status: number, headers: HeaderList): void {
    const res = this.#res
    res.writeStatus(statusLine(status))
    const n = headers.length
    if (n >= 2) {
      let value = headers[1]!
      for (let i = 2; i < n; i += 2) value += '\r\n' + headers[i]! + ': ' + headers[i + 1]!
      res.writeHeader(headers[0]!, value)
    }
    this.#started = true
  }

  /** An answer that ends before the upload did: the rest of it is read (and dropped), or the socket would hang. */
  #unpauseBody(): void {
    if (!this.#bodyPaused) return
    this.#bodyPaused = false
    this.#res.resume()
  }

  send(status: number, headers: HeaderList, body: string | Uint8Array): void {
    if (this.#aborted || this.#done) return
    this.#unpauseBody()
    this.#done = true
    if (this.#headOnly) return this.#endHead(status, headers, byteLength(body))
    this.#res.cork(() => {
      this.#writeHead(status, headers)
      // A 413 (or any answer) may go out before the client finished sending. The connection stays open: uWS
      // reads the rest as this request's body by its framing (Content-Length or chunks), so it is never taken
      // for a new request, and a client still writing would see EPIPE or a reset, never the answer, if it closed.
      this.#res.end(body)
    })
  }

  begin(status: number, headers: HeaderList): void {
    if (this.#aborted || this.#done) return
    if (this.#headOnly) {
      this.#heldHead = { status, headers }
      this.#started = true
      return
    }
    this.#res.cork(() => this.#writeHead(status, headers))
  }

  /** HEAD: the head with the body's length, and no body. */
  #endHead(status: number, headers: HeaderList, length: number): void {
    this.#res.cork(() => {
      this.#writeHead(status, [...headers, 'Content-Length', String(length)])
      this.#res.endWithoutBody()
    })
  }

  write(chunk: string | Uint8Array): boolean {
    if (this.#aborted || this.#done) return true
    if (this.#headOnly) {
      this.#headBytes += byteLength(chunk)
      return true
    }
    let ok = true
    this.#res.cork(() => {
      ok = this.#res.write(chunk)
    })
    return ok
  }

  onWritable(handler: () => void): void {
    if (this.#aborted || this.#done) return
    const first = this.#writableHandler === null
    this.#writableHandler = handler
    if (!first) return
    this.#res.onWritable(() => {
      const h = this.#writableHandler
      this.#writableHandler = null
      this.#stopStallTimer()
      if (h !== null) h()
      return true
    })
    this.#waitingSince = performance.now()
    this.#stall = setInterval(() => this.#onStall(), Math.min(STALL_CHECK_MS, this.#sendTimeoutMs))
  }

  #onStall(): void {
    if (this.#aborted || this.#done) return this.#stopStallTimer()
    if (performance.now() - this.#waitingSince >= this.#sendTimeoutMs) {
      // close() runs the abort handler: the caller cancels its upstream as for a client that went away.
      this.#stopStallTimer()
      this.#res.close()
      return
    }
    // pause() then resume() restarts uWS's timeout and asks the poll for writable again.
    this.#res.pause()
    this.#res.resume()
  }

  #stopStallTimer(): void {
    if (this.#stall === null) return
    clearInterval(this.#stall)
    this.#stall = null
  }

  end(chunk?: string | Uint8Array): void {
    if (this.#aborted || this.#done) return
    this.#unpauseBody()
    this.#done = true
    this.#stopStallTimer()
    if (this.#headOnly) {
      const held = this.#heldHead ?? { status: 200, headers: [] }
      return this.#endHead(held.status, held.headers, this.#headBytes + (chunk === undefined ? 0 : byteLength(chunk)))
    }
    this.#res.cork(() => {
      if (chunk === undefined) this.#res.end()
      else this.#res.end(chunk)
    })
  }

  cork(fn: () => void): void {
    if (this.#aborted || this.#done) {
      fn()
      return
    }
    this.#res.cork(fn)
  }
}
