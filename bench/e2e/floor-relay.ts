/**
 * The floor of the e2e run: the smallest relay that can be built on svc-router's stack (uWebSockets.js in
 * front, one undici Pool behind), doing no routing, auth, trace or billing. Whatever latency it adds over
 * direct is what the runtime and the two libraries cost by themselves; svc-router's added latency above it is
 * its own work.
 *
 *   node dist/bench/e2e/floor-relay.js <upstream-origin> [<port>]
 *
 * It is meant as the baseline an expert would write, not a strawman: the request body is copied out of uWS
 * once, the upstream answer is streamed to the client chunk by chunk as it arrives (every write corked), with
 * backpressure both ways (a slow client pauses the upstream read; a client that goes away aborts it). An
 * upstream answer with a Content-Length (JSON) keeps that framing (uWS tryEnd: one write carries head, body and
 * end, as nginx and svc-router send it); one without (SSE) is relayed chunked. No per-request logging.
 */
import { STATUS_CODES } from 'node:http'
import { Pool, type Dispatcher } from 'undici'
import uWS from 'uWebSockets.js'

const CHAT_PATH = '/v1/chat/completions'
const MAX_BODY = 4 * 1024 * 1024

const [upstreamArg, portArg] = process.argv.slice(2)
if (upstreamArg === undefined) {
  process.stderr.write('usage: node dist/bench/e2e/floor-relay.js <upstream-origin> [<port>]\n')
  process.exit(2)
}
const origin = new URL(upstreamArg).origin
const port = portArg === undefined ? 0 : Number(portArg)

// The same pool shape as svc-router's (src/upstream/pools.ts) with the run's 1,024 connections.
const pool = new Pool(origin, {
  connections: 1024,
  pipelining: 1,
  keepAliveTimeout: 60_000,
  keepAliveMaxTimeout: 600_000,
  headersTimeout: 120_000,
  bodyTimeout: 60_000,
  connect: { timeout: 10_000 },
})

const statusLines = new Map<number, string>()
function statusLine(status: number): string {
  let line = statusLines.get(status)
  if (line === undefined) {
    line = `${status} ${STATUS_CODES[status] ?? 'Unknown'}`
    statusLines.set(status, line)
  }
  return line
}

/** One client request relayed upstream: the undici handler, holding the uWS response it answers on. */
class Relay implements Dispatcher.DispatchHandler {
  readonly #res: uWS.HttpResponse
  /** undici's abort (onConnect) and resume of a paused read (onHeaders). */
  #abortRequest: ((err?: Error) => void) | null = null
  #resumeRead: (() => void) | null = null
  #paused = false
  #aborted = false
  /** The upstream status and content type, written with the first bytes of the body (one write, not two). */
  #status = 0
  #contentType = ''
  #headSent = false
  #done = false
  /** Content-Length of the upstream answer, or -1 (relayed chunked). */
  #total = -1
  /** Content-Length framing: the chunk uWS did not wholly take, and the write offset it starts at. */
  #pending: Buffer | null = null
  #pendingAt = 0

  constructor(res: uWS.HttpResponse) {
    this.#res = res
  }

  clientAborted(): void {
    this.#aborted = true
    this.#abortRequest?.(new Error('client disconnected'))
  }

  // undici's first handler interface, as svc-router's attempt handler uses it: no wrapper objects per request
  // and no object of every response header (the newer interface builds both).
  onConnect(abort: (err?: Error) => void): void {
    this.#abortRequest = abort
    if (this.#aborted) abort(new Error('client disconnected'))
  }

  onHeaders(statusCode: number, raw: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true // an interim response (1xx): the final one follows, as in the router
    this.#resumeRead = resume
    this.#status = statusCode
    let length = ''
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!
      if (name.length === 12 && name.toString('latin1').toLowerCase() === 'content-type') this.#contentType = raw[i + 1]!.toString('latin1')
      else if (name.length === 14 && name.toString('latin1').toLowerCase() === 'content-length') length = raw[i + 1]!.toString('latin1')
    }
    this.#total = length === '' ? -1 : Number(length)
    if (!Number.isSafeInteger(this.#total) || this.#total < 0) this.#total = -1
    return true
  }

  #pause(): void {
    this.#paused = true
  }

  #resume(): void {
    if (!this.#paused) return
    this.#paused = false
    this.#resumeRead?.()
  }

  onData(chunk: Buffer): boolean {
    this.#relay(chunk)
    return !this.#paused
  }

  /** Only inside a cork. */
  #writeHead(): void {
    if (this.#headSent) return
    this.#headSent = true
    this.#res.writeStatus(statusLine(this.#status))
    if (this.#contentType !== '') this.#res.writeHeader('content-type', this.#contentType)
  }

  #relay(chunk: Buffer): void {
    if (this.#aborted || this.#done) return
    const res = this.#res
    if (this.#total < 0) {
      let ok = true
      res.cork(() => {
        this.#writeHead()
        ok = res.write(chunk)
      })
      if (!ok) {
        // uWS buffered the chunk; stop reading upstream until the client has drained it.
        this.#pause()
        res.onWritable(() => {
          this.#resume()
          return true
        })
      }
      return
    }
    let at = 0
    let ok = true
    let done = false
    res.cork(() => {
      this.#writeHead()
      at = res.getWriteOffset()
      ;[ok, done] = res.tryEnd(chunk, this.#total)
    })
    if (done) {
      this.#done = true
      return
    }
    if (ok) return
    // tryEnd keeps nothing it could not send: hold the rest, stop reading upstream, send it from onWritable.
    this.#pending = chunk
    this.#pendingAt = at
    this.#pause()
    res.onWritable((offset) => {
      const pending = this.#pending
      if (pending === null) return true
      const [sent, finished] = res.tryEnd(pending.subarray(offset - this.#pendingAt), this.#total)
      if (finished) this.#done = true
      if (!sent && !finished) return false
      this.#pending = null
      // Also when finished: undici has yet to read the end of the message (and free the connection).
      this.#resume()
      return true
    })
  }

  onComplete(): void {
    if (this.#aborted || this.#done) return
    // With a Content-Length, undici has checked it: every byte went to tryEnd, whose last call ended the
    // response or left a rest that onWritable sends and ends. What remains is a chunked (or empty) body.
    if (this.#total > 0) return
    this.#done = true
    this.#res.cork(() => {
      this.#writeHead()
      this.#res.end()
    })
  }

  onError(err: Error): void {
    if (this.#aborted || this.#done) return
    this.#done = true
    if (this.#headSent) {
      // Bytes are out already: all that is left is to break the connection so the client sees a short answer.
      this.#res.close()
      return
    }
    this.#res.cork(() => this.#res.writeStatus('502 Bad Gateway').writeHeader('content-type', 'text/plain').end(`upstream error: ${err.message}\n`))
  }
}

function relay(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
  const r = new Relay(res)
  // First, before anything asynchronous: uWS requires it, and it is how a client that leaves aborts upstream.
  res.onAborted(() => r.clientAborted())
  // The request head is only valid during this callback.
  const contentType = req.getHeader('content-type')
  const headers = contentType === '' ? [] : ['content-type', contentType]
  let parts: Buffer[] | null = null
  let size = 0
  let refused = false
  res.onData((chunk, isLast) => {
    if (refused) return
    size += chunk.byteLength
    if (size > MAX_BODY) {
      refused = true
      res.cork(() => res.writeStatus('413 Payload Too Large').end('request body too large\n', true))
      return
    }
    // uWS neuters `chunk` once this callback returns: copy it (once, for a body in one piece).
    const copy = Buffer.from(new Uint8Array(chunk))
    if (!isLast) {
      ;(parts ??= []).push(copy)
      return
    }
    const body = parts === null ? copy : Buffer.concat([...parts, copy], size)
    pool.dispatch({ origin, path: CHAT_PATH, method: 'POST', headers, body }, r)
  })
}

const app = uWS.App()
app.post(CHAT_PATH, relay)
app.any('/*', (res) => {
  res.cork(() => res.writeStatus('404 Not Found').writeHeader('content-type', 'text/plain').end('not found\n'))
})
app.listen('127.0.0.1', port, (listenSocket) => {
  if (listenSocket === false) {
    process.stderr.write(`floor relay: cannot listen on 127.0.0.1:${port}\n`)
    process.exit(1)
  }
  const bound = uWS.us_socket_local_port(listenSocket as unknown as uWS.us_socket)
  process.stdout.write(`floor relay listening on http://127.0.0.1:${bound}\n`)
})

// A clean exit on SIGTERM, so `node --cpu-prof` writes its profile (the stage breakdown of run.ts profiles the
// relay as it profiles svc-router); the default action would kill the process before that.
process.once('SIGTERM', () => process.exit(0))
