/**
 * The floor of the e2e run: the smallest relay that can be built on svc-router's stack (uWebSockets.js in
 * front, one undici Pool behind), doing no routing, auth, trace or billing. Whatever latency it adds over
 * direct is what the runtime and the two libraries cost by themselves; svc-router's added latency above it is
 * its own work.
 *
 *   node dist/bench/e2e/floor-relay.js <upstream-origin> [<port>] [--bill <sqlite file>]
 *
 * It is meant as the baseline an expert would write, not a strawman: the request body is copied out of uWS
 * once, the upstream answer is streamed to the client chunk by chunk as it arrives (every write corked), with
 * backpressure both ways (a slow client pauses the upstream read; a client that goes away aborts it). An
 * upstream answer with a Content-Length (JSON) keeps that framing (uWS tryEnd: one write carries head, body and
 * end, as nginx and svc-router send it); one without (SSE) is relayed chunked. No per-request logging.
 *
 * With `--bill` it is the floor plus only the work the spec and DESIGN.md require of any router on a JSON answer,
 * each piece done the cheapest way this stack allows, so that what svc-router adds above *it* is what could
 * still be saved: the key looked up in a Map (no hashing), the request body parsed to read its model, a hold on
 * the account's balance, the answer parsed for its usage, the cost priced in integer atto-USD, one row appended
 * to a journal before the last byte (floor-journal.ts: SQLite in WAL mode, group-committed once per turn of the
 * loop, on the OS with `--sync normal`, the default, or flushed by a thread-pool fdatasync with `--sync full`;
 * or with `--bill-pg <url>` PostgreSQL, one transaction per batch, synchronous_commit on) and the `x_svc_trace` member spliced in front of the answer's closing brace. A
 * stream asks the provider for its usage (`stream_options.include_usage`), is relayed a run of whole events at
 * a time with the provider's `[DONE]` held back, is billed from the usage event, and ends with a trace event and
 * `[DONE]` once the charge is committed. No routing, rate limit, key policy, failover, telemetry, error
 * envelopes or checks of the events: less than svc-router must do, so its cost is a lower bound.
 */
import { PgJournal, SqliteJournal, type Journal } from './floor-journal.js'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import { buildConnector, Pool, type Dispatcher } from 'undici'
import { release, uploadChunks, watchWrites } from '../../src/upstream/chunk-pool.js'
import { uwsBuild, type HttpRequest, type HttpResponse, type us_socket } from '../../src/server/uws-build.js'

const CHAT_PATH = '/v1/chat/completions'
const UPLOAD_PATH = '/v1/audio/transcriptions'
const MAX_BODY = 4 * 1024 * 1024

const args = process.argv.slice(2)
/** `--name value`, taken out of args; null when absent, '' when its value is missing. */
function option(name: string): string | null {
  const at = args.indexOf(name)
  return at === -1 ? null : (args.splice(at, 2)[1] ?? '')
}
const billPath = option('--bill')
const billPg = option('--bill-pg')
const syncArg = option('--sync') ?? 'normal'
const [upstreamArg, portArg] = args
if (upstreamArg === undefined || billPath === '' || billPg === '' || (billPath !== null && billPg !== null) || (syncArg !== 'normal' && syncArg !== 'full')) {
  process.stderr.write('usage: node dist/bench/e2e/floor-relay.js <upstream-origin> [<port>] [--bill <sqlite file> [--sync normal|full] | --bill-pg <postgres url>]\n')
  process.exit(2)
}
const sync: 'normal' | 'full' = syncArg
const origin = new URL(upstreamArg).origin
const port = portArg === undefined ? 0 : Number(portArg)

const connector = buildConnector({ timeout: 10_000 })
// The same pool shape as svc-router's (src/upstream/pools.ts) with the run's 1,024 connections.
const pool = new Pool(origin, {
  connections: 1024,
  pipelining: 1,
  keepAliveTimeout: 60_000,
  keepAliveMaxTimeout: 600_000,
  headersTimeout: 120_000,
  bodyTimeout: 60_000,
  // Each socket holds a pooled upload chunk until it has written it (chunk-pool.ts), as svc-router's do.
  connect: (options, callback) =>
    connector(options, (err, socket) => {
      if (err === null && socket !== null) watchWrites(socket as Socket)
      ;(callback as (err: Error | null, socket: unknown) => void)(err, socket)
    }),
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

/** `--bill`: 0.10 and 0.30 USD per million tokens, in atto-USD per token (the run's svc-router prices). */
const PROMPT_PRICE = 100_000_000_000n
const COMPLETION_PRICE = 300_000_000_000n
const ATTO = 10n ** 18n
/** The worst case a hold reserves: the body's bytes as prompt tokens, this many completion tokens. */
const HOLD_COMPLETION = 4096n

interface Account {
  balance: bigint
  held: bigint
}

/** What a billed request carries from its head to its charge. */
interface Bill {
  readonly account: Account
  readonly stream: boolean
  readonly model: string
  readonly requestId: string
  readonly hold: bigint
  readonly startedAt: number
}

/** The run's one key (the Authorization header direct and the relay are sent), funded for any run. */
const accounts = new Map<string, Account>([['Bearer sk-bench-provider', { balance: 10n ** 30n, held: 0n }]])
const requestIdPrefix = `req_${Date.now().toString(36)}_`
let requestCount = 0

function usd(atto: bigint): string {
  return `${atto / ATTO}.${(atto % ATTO).toString().padStart(18, '0')}`
}

interface Usage {
  readonly prompt_tokens?: unknown
  readonly completion_tokens?: unknown
}

const journal: Journal | null = billPg !== null ? new PgJournal(billPg) : billPath === null ? null : new SqliteJournal(billPath, sync)
const INCLUDE_USAGE = Buffer.from(',"stream_options":{"include_usage":true}')

/** One client request relayed upstream: the undici handler, holding the uWS response it answers on. */
class Relay implements Dispatcher.DispatchHandler {
  readonly #res: HttpResponse
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
  /** `--bill`: the request's hold and identity, and the JSON answer's chunks (null: relayed as it comes). */
  #bill: Bill | null = null
  #parts: Buffer[] | null = null
  /** `--bill`, a stream: the start of an event not wholly received yet, and the usage read from the events. */
  #sse: { rest: Buffer | null; usage: Usage | null } | null = null

  constructor(res: HttpResponse) {
    this.#res = res
  }

  /** Bills this request: `bill.hold` is on its account already. */
  billAs(bill: Bill): void {
    this.#bill = bill
  }

  /** Gives the hold back (once). */
  #release(): void {
    const bill = this.#bill
    if (bill === null) return
    this.#bill = null
    bill.account.held -= bill.hold
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
    // A billed JSON answer is held whole: its usage is read and its trace spliced in before it goes out.
    if (this.#bill !== null && statusCode === 200) {
      if (this.#total >= 0) this.#parts = []
      else if (this.#bill.stream) this.#sse = { rest: null, usage: null }
    }
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
    if (this.#parts !== null) {
      this.#parts.push(chunk)
      return true
    }
    if (this.#sse !== null) {
      this.#events(this.#sse, chunk)
      return !this.#paused
    }
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
    if (this.#parts !== null) return this.#settleAnswer(this.#parts.length === 1 ? this.#parts[0]! : Buffer.concat(this.#parts))
    if (this.#sse !== null) return this.#settleStream(this.#sse.usage)
    this.#release()
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
    this.#release()
    if (this.#aborted || this.#done) return
    this.#done = true
    if (this.#headSent) {
      // Bytes are out already: all that is left is to break the connection so the client sees a short answer.
      this.#res.close()
      return
    }
    this.#res.cork(() => this.#res.writeStatus('502 Bad Gateway').writeHeader('content-type', 'text/plain').end(`upstream error: ${err.message}\n`))
  }

  /** `--bill`, a stream: the whole events of `chunk` relayed ([DONE] held back), the usage read where it is. */
  #events(sse: { rest: Buffer | null; usage: Usage | null }, chunk: Buffer): void {
    const buf = sse.rest === null ? chunk : Buffer.concat([sse.rest, chunk])
    const end = buf.lastIndexOf('\n\n')
    if (end === -1) {
      sse.rest = buf
      return
    }
    sse.rest = end + 2 < buf.length ? buf.subarray(end + 2) : null
    let events = buf.subarray(0, end + 2)
    const at = events.lastIndexOf('"usage":{')
    if (at !== -1) {
      const from = events.lastIndexOf('data:', at) + 5
      const to = events.indexOf('\n', at)
      try {
        sse.usage = (JSON.parse(events.toString('utf8', from, to)) as { usage?: Usage }).usage ?? null
      } catch {
        sse.usage = null
      }
    }
    const done = events.lastIndexOf('data: [DONE]')
    if (done !== -1) events = events.subarray(0, done)
    if (events.length > 0) this.#relay(events)
  }

  /** `--bill`: the usage priced and its charge appended; `answer` runs once it is committed, if the client is still there. */
  #charge(usage: Usage | null | undefined, answer: (trace: string) => void): void {
    const bill = this.#bill!
    const prompt = usage?.prompt_tokens
    const completion = usage?.completion_tokens
    if (!Number.isSafeInteger(prompt) || !Number.isSafeInteger(completion) || (prompt as number) < 0 || (completion as number) < 0) {
      return this.onError(new Error('the answer carries no usage'))
    }
    const input = BigInt(prompt as number) * PROMPT_PRICE
    const output = BigInt(completion as number) * COMPLETION_PRICE
    this.#release()
    bill.account.balance -= input + output
    journal!.enqueue({
      requestId: bill.requestId,
      model: bill.model,
      cost: input + output,
      prompt: prompt as number,
      completion: completion as number,
      committed: (failure) => {
        if (this.#aborted || this.#done) return
        if (failure !== null) return this.onError(new Error('not billed'))
        this.#done = true
        answer(
          JSON.stringify({
            request_id: bill.requestId,
            provider: origin,
            model: bill.model,
            billing: { input_cost: usd(input), output_cost: usd(output), total_cost: usd(input + output), currency: 'USD' },
            usage,
            attempts: [{ provider: origin, status: 200 }],
            latency_ms: Math.round((performance.now() - bill.startedAt) * 1000) / 1000,
          }),
        )
      },
    })
  }

  /** `--bill`, a JSON answer: sent with its trace spliced in front of the closing brace once its charge is committed. */
  #settleAnswer(body: Buffer): void {
    let usage: Usage | undefined
    try {
      usage = (JSON.parse(body.toString()) as { usage?: Usage }).usage
    } catch {
      usage = undefined
    }
    this.#charge(usage, (trace) => {
      let end = body.length - 1
      while (end > 0 && body[end] !== 0x7d) end--
      const out = Buffer.concat([body.subarray(0, end), Buffer.from(',"x_svc_trace":' + trace), body.subarray(end)])
      this.#res.cork(() => {
        this.#res.writeStatus(statusLine(200))
        if (this.#contentType !== '') this.#res.writeHeader('content-type', this.#contentType)
        this.#res.end(out)
      })
    })
  }

  /** `--bill`, a stream: its trace event and `[DONE]` once its charge is committed. */
  #settleStream(usage: Usage | null): void {
    this.#charge(usage, (trace) => {
      this.#res.cork(() => {
        this.#writeHead()
        this.#res.end(`data: {"x_svc_trace":${trace}}\n\ndata: [DONE]\n\n`)
      })
    })
  }
}

/** `--bill`: the request's key, model and hold, or the answer that refuses it (sent here). */
function admit(res: HttpResponse, account: Account | undefined, body: Buffer, startedAt: number): Bill | false {
  const refuse = (status: string, why: string): false => {
    res.cork(() => res.writeStatus(status).writeHeader('content-type', 'text/plain').end(why))
    return false
  }
  if (account === undefined) return refuse('401 Unauthorized', 'unknown key\n')
  let parsed: { model?: unknown; stream?: unknown; stream_options?: unknown }
  try {
    parsed = JSON.parse(body.toString()) as typeof parsed
  } catch {
    return refuse('400 Bad Request', 'not JSON\n')
  }
  if (typeof parsed.model !== 'string' || parsed.model === '') return refuse('400 Bad Request', 'no model\n')
  const hold = BigInt(body.length) * PROMPT_PRICE + HOLD_COMPLETION * COMPLETION_PRICE
  if (account.balance - account.held < hold) return refuse('402 Payment Required', 'insufficient balance\n')
  account.held += hold
  return { account, stream: parsed.stream === true, model: parsed.model, requestId: requestIdPrefix + String(++requestCount), hold, startedAt }
}

function relay(res: HttpResponse, req: HttpRequest): void {
  const r = new Relay(res)
  // First, before anything asynchronous: uWS requires it, and it is how a client that leaves aborts upstream.
  res.onAborted(() => r.clientAborted())
  // The request head is only valid during this callback.
  const contentType = req.getHeader('content-type')
  const headers = contentType === '' ? [] : ['content-type', contentType]
  const account = journal === null ? undefined : accounts.get(req.getHeader('authorization'))
  const startedAt = journal === null ? 0 : performance.now()
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
    let body = parts === null ? copy : Buffer.concat([...parts, copy], size)
    if (journal !== null) {
      const bill = admit(res, account, body, startedAt)
      if (bill === false) return
      r.billAs(bill)
      // A stream's usage is asked for (its last event), spliced in front of the body's closing brace.
      if (bill.stream && body.indexOf('"stream_options"') === -1) {
        const end = body.lastIndexOf('}')
        body = Buffer.concat([body.subarray(0, end), INCLUDE_USAGE, body.subarray(end)])
      }
    }
    pool.dispatch({ origin, path: CHAT_PATH, method: 'POST', headers, body }, r)
  })
}

/** Bytes of an upload the relay holds before it pauses the client (as svc-router's upload memory, 4 MiB by default). */
const UPLOAD_HIGH_WATER = 4 * 1024 * 1024

/**
 * An upload's body as undici reads it: the client's chunks, copied into pooled memory (svc-router's chunk pool:
 * a fresh Buffer per chunk would cost a full collection every 64 MiB of them), queued as they come, the client
 * paused while more than UPLOAD_HIGH_WATER bytes wait and resumed once undici has taken them. A chunk's memory
 * is reused once undici asked for the next one and its socket has written it (watchWrites on the pool's sockets).
 */
class UploadBody implements AsyncIterator<Buffer> {
  readonly #res: HttpResponse
  readonly #chunks: Buffer[] = []
  #head = 0
  #queued = 0
  #ended = false
  #paused = false
  #aborted = false
  /** The chunk handed to undici last, held until it asks for the next one or stops. */
  #out: Buffer | null = null
  #waiting: ((r: IteratorResult<Buffer>) => void) | null = null
  #failWaiting: ((err: Error) => void) | null = null

  constructor(res: HttpResponse) {
    this.#res = res
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  /** A chunk lent by uWS (copied here), and whether it is the last. */
  push(lent: ArrayBuffer, last: boolean): void {
    if (this.#aborted) return
    if (lent.byteLength > 0) {
      const chunk = uploadChunks.copy(new Uint8Array(lent))
      this.#chunks.push(chunk)
      this.#queued += chunk.length
    }
    if (last) this.#ended = true
    else if (this.#queued > UPLOAD_HIGH_WATER && !this.#paused) {
      this.#paused = true
      this.#res.pause()
    }
    if (this.#waiting !== null) this.#answer()
  }

  abort(): void {
    this.#aborted = true
    this.#drop()
    const fail = this.#failWaiting
    this.#waiting = this.#failWaiting = null
    fail?.(new Error('client disconnected'))
  }

  next(): Promise<IteratorResult<Buffer>> {
    this.#handedOn()
    if (this.#aborted) return Promise.reject(new Error('client disconnected'))
    return new Promise((resolve, reject) => {
      this.#waiting = resolve
      this.#failWaiting = reject
      this.#answer()
    })
  }

  return(): Promise<IteratorResult<Buffer>> {
    this.#handedOn()
    this.#drop()
    return Promise.resolve({ value: undefined, done: true })
  }

  #answer(): void {
    const resolve = this.#waiting!
    if (this.#head < this.#chunks.length) {
      const chunk = this.#chunks[this.#head]!
      this.#chunks[this.#head++] = EMPTY
      if (this.#head === this.#chunks.length) this.#chunks.length = this.#head = 0
      this.#queued -= chunk.length
      if (this.#paused && !this.#aborted && this.#queued <= UPLOAD_HIGH_WATER / 2) {
        this.#paused = false
        this.#res.resume()
      }
      this.#out = chunk
      this.#waiting = this.#failWaiting = null
      return resolve({ value: chunk, done: false })
    }
    if (this.#ended) {
      this.#waiting = this.#failWaiting = null
      resolve({ value: undefined, done: true })
    }
  }

  #handedOn(): void {
    if (this.#out === null) return
    release(this.#out)
    this.#out = null
  }

  #drop(): void {
    for (let i = this.#head; i < this.#chunks.length; i++) release(this.#chunks[i]!)
    this.#chunks.length = this.#head = 0
  }
}
const EMPTY = Buffer.alloc(0)

/**
 * An upload (multipart transcriptions, issue 45's multipart reference): the body streamed upstream as it comes,
 * never read as a form nor held whole, with its content type and length. Never billed: the reference is the
 * relay's CPU per MiB.
 */
function relayUpload(res: HttpResponse, req: HttpRequest): void {
  const r = new Relay(res)
  const body = new UploadBody(res)
  res.onAborted(() => {
    body.abort()
    r.clientAborted()
  })
  const headers = ['content-type', req.getHeader('content-type')]
  const length = req.getHeader('content-length')
  if (length !== '') headers.push('content-length', length)
  // uWS neuters `chunk` once the callback returns: push copies it.
  res.onData((chunk, isLast) => body.push(chunk, isLast))
  // undici takes an async iterable as a body (its type names only the stream kinds).
  pool.dispatch({ origin, path: UPLOAD_PATH, method: 'POST', headers, body: body as unknown as Readable }, r)
}

const uWS = uwsBuild().uws
const app = uWS.App()
app.post(CHAT_PATH, relay)
app.post(UPLOAD_PATH, relayUpload)
app.any('/*', (res) => {
  res.cork(() => res.writeStatus('404 Not Found').writeHeader('content-type', 'text/plain').end('not found\n'))
})
function listen(): void {
  app.listen('127.0.0.1', port, (listenSocket) => {
    if (listenSocket === false) {
      process.stderr.write(`floor relay: cannot listen on 127.0.0.1:${port}\n`)
      process.exit(1)
    }
    const bound = uWS.us_socket_local_port(listenSocket as unknown as us_socket)
    process.stdout.write(`floor relay listening on http://127.0.0.1:${bound}\n`)
  })
}
// A journal in PostgreSQL is connected (and its table made) before the first request can be billed.
if (journal instanceof PgJournal) {
  journal.ready().then(listen, (err: unknown) => {
    process.stderr.write(`floor relay: PostgreSQL journal: ${(err as Error).message}\n`)
    process.exit(1)
  })
} else listen()

// A clean exit on SIGTERM, so `node --cpu-prof` writes its profile (the stage breakdown of run.ts profiles the
// relay as it profiles svc-router); the default action would kill the process before that.
process.once('SIGTERM', () => process.exit(0))
