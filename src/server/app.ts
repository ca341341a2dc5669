/**
 * The uWS front end: routes, request heads copied out synchronously, the 431 for oversized heads, and the
 * 404/405 envelope. The only module besides uws-reply.ts that sees uWS objects.
 *
 * What uWS does before any of this runs (uws-build.ts picks the build), and so what no code here can answer:
 * HTTP/1.0 and other versions get its own 505 at once; a head past its limit (see UWS_HEAD_LIMIT_FACTOR) its
 * own 431. A head it cannot parse (more than 98 fields, no Host, a malformed field line) gets 400 or 431 at
 * once from a current core (the Node 22/24 builds); the Node 20 binary of uwebsockets 3.0.6 has an older core,
 * which takes it for an incomplete head and holds it until its idle timeout (8–12 s). A request
 * pipelined behind one still being answered closes the connection (the pending one sees onAborted). README
 * "Operations notes: front-end limits" has the measurements.
 */
import { renderError, RouterError, statusLine } from '../errors.js'
import { log } from '../log.js'
import { sameRoutingValue } from '../routing/preferences.js'
import { trimOws } from '../vocabulary/http.js'
import type { Reply } from './reply.js'
import { ANTHROPIC_HEADER, FORWARD_HEADER, HEADER, SESSION_HEADER, TEE_HEADER, TRACE_HEADER, type RequestHead } from './request-head.js'
import { nextRequestId } from './request-id.js'
import { sendError } from './respond.js'
import { SEND_TIMEOUT_MS, UwsReply } from './uws-reply.js'
import { uwsBuild, type HttpRequest, type HttpResponse, type us_socket } from './uws-build.js'

export type Handler = (head: RequestHead, reply: Reply) => void

export interface Route {
  readonly method: 'get' | 'post' | 'patch' | 'del'
  /** uWS pattern, e.g. /v1/api-keys/:id */
  readonly pattern: string
  readonly handler: Handler
  /**
   * The error envelope of this route's API (e.g. Anthropic's on /v1/messages), for what the front end
   * refuses itself: a request head it will not serve, a method the path does not take, a handler that threw.
   * The OpenAI-style envelope when absent.
   */
  readonly renderError?: (err: RouterError, requestId: string) => string
}

const decoder = new TextDecoder()

/**
 * The largest request head served by default (config server.max_head_bytes), in bytes, counted as it is
 * usually written: the request line, one `Name: value` CRLF per field, and the empty line. A larger head gets
 * 431 whether it arrives in one read or in pieces: from the router in the API's envelope, or, past
 * UWS_HEAD_LIMIT_FACTOR times the limit, from uWS itself. (A head written without the space after each colon
 * is counted a byte per field larger than it is.)
 */
export const MAX_HEADER_BYTES = 4096

/**
 * uWS's own head limit (UWS_HTTP_MAX_HEADERS_SIZE) as a multiple of the router's. uWS refuses a head past its
 * limit with a plain HTML 431 before any route runs (a current core at once, the older core of the Node 20
 * binary once its buffer for a head arriving in pieces overflows); a head between the router's limit and uWS's reaches
 * headProblem(), which answers 431 in the envelope the client's API uses. Twice the limit keeps the envelope
 * for every head that is merely over it, and bounds what uWS buffers per connection.
 */
export const UWS_HEAD_LIMIT_FACTOR = 2

/**
 * The header names of HEADER, SESSION_HEADER, TRACE_HEADER then ANTHROPIC_HEADER, each at its slot in
 * `scan.values`, and each field's slot. Only HEADER's slots (the first CONFLICT_CHECKED) are checked for
 * conflicting repeats.
 */
const COPY = { ...HEADER, ...SESSION_HEADER, ...TRACE_HEADER, ...ANTHROPIC_HEADER, ...TEE_HEADER, ...FORWARD_HEADER }
const COPIED: readonly string[] = Object.values(COPY)
const SLOT = Object.fromEntries(Object.keys(COPY).map((key, slot) => [key, slot])) as Record<keyof typeof COPY, number>
const CONFLICT_CHECKED = Object.keys(HEADER).length
/**
 * Slot of a copied name by the name's length, at most three names a length (cookie/origin, content-length/
 * sec-fetch-site/anthropic-beta share one): a field whose name is not copied is dismissed by one array read,
 * and a match costs one to three string compares.
 */
const SLOT_BY_LENGTH = new Int8Array(64).fill(-1)
const SECOND_BY_LENGTH = new Int8Array(64).fill(-1)
const THIRD_BY_LENGTH = new Int8Array(64).fill(-1)
/**
 * Headers whose repeats are one list, comma-joined as HTTP combines list fields: anthropic-beta, and
 * tracestate (W3C Trace Context: a vendor may split it over several fields, and all of them are the state), and
 * x-forwarded-for (each proxy may append a field of its own).
 */
const JOINED = (1 << SLOT.anthropicBeta) | (1 << SLOT.tracestate) | (1 << SLOT.forwardedFor)
for (let slot = 0; slot < COPIED.length; slot++) {
  const name = COPIED[slot]!
  if (name.length >= SLOT_BY_LENGTH.length || THIRD_BY_LENGTH[name.length] !== -1) {
    throw new Error(`header ${name}: at most three copied names may share a length under ${SLOT_BY_LENGTH.length}`)
  }
  if (SLOT_BY_LENGTH[name.length] === -1) SLOT_BY_LENGTH[name.length] = slot
  else if (SECOND_BY_LENGTH[name.length] === -1) SECOND_BY_LENGTH[name.length] = slot
  else THIRD_BY_LENGTH[name.length] = slot
}

/**
 * What one pass of req.forEach collects. uWS's getHeader returns only a field's first occurrence, so
 * forEach is the one way to see repeats; and since forEach hands every field over anyway, the copied values
 * are taken from it too instead of one getHeader call per name. One scan serves every request: forEach is
 * synchronous and heads are built one at a time, so nothing is allocated per request but the strings uWS
 * makes.
 */
const scan = {
  values: new Array<string>(COPIED.length).fill(''),
  /** Bit `slot` is set once that header was seen: a first occurrence may be ''. */
  seen: 0,
  conflict: '',
  /** Field bytes so far, as MAX_HEADER_BYTES counts them. */
  bytes: 0,
}

function onHeaderField(name: string, value: string): void {
  scan.bytes += name.length + value.length + 4
  if (name.length >= SLOT_BY_LENGTH.length) return
  let slot = SLOT_BY_LENGTH[name.length]!
  if (slot < 0) return
  if (name !== COPIED[slot]) {
    slot = SECOND_BY_LENGTH[name.length]!
    if (slot < 0) return
    if (name !== COPIED[slot]) {
      slot = THIRD_BY_LENGTH[name.length]!
      if (slot < 0 || name !== COPIED[slot]) return
    }
  }
  const bit = 1 << slot
  if ((scan.seen & bit) === 0) {
    scan.seen |= bit
    scan.values[slot] = value
  } else if ((JOINED & bit) !== 0) {
    scan.values[slot] += ',' + value
  } else if (slot < CONFLICT_CHECKED && scan.conflict === '' && value !== scan.values[slot]) {
    // A copy blank after trimming is unset (spec §4.7), so it conflicts with nothing: the other copy counts.
    const now = trimOws(value)
    const kept = trimOws(scan.values[slot]!)
    if (now.length === 0 || sameRoutingValue(name, now, kept)) return
    if (kept.length === 0) scan.values[slot] = value
    else scan.conflict = name
  }
}

class UwsRequestHead implements RequestHead {
  readonly requestId = nextRequestId()
  readonly startedAt = performance.now()
  readonly method: string
  readonly path: string
  readonly query: string
  readonly authorization: string
  readonly xApiKey: string
  readonly contentType: string
  readonly contentLength: string
  readonly providerAddress: string
  readonly providerSort: string
  readonly providerTrustMode: string
  readonly providerAllowFallbacks: string
  readonly providerRequireParameters: string
  readonly maxPricePrompt: string
  readonly maxPriceCompletion: string
  readonly maxPriceImage: string
  readonly cookie: string
  readonly origin: string
  readonly host: string
  readonly secFetchSite: string
  readonly traceparent: string
  readonly tracestate: string
  readonly anthropicVersion: string
  readonly anthropicBeta: string
  readonly verifyTee: string
  readonly forwardedFor: string
  readonly conflictingHeader: string
  /** The head's size as MAX_HEADER_BYTES counts it. */
  readonly headBytes: number
  /** Path parameters of the route pattern, in order. */
  readonly params: string[]
  readonly #res: HttpResponse
  #remote: string | null = null

  constructor(req: HttpRequest, res: HttpResponse, paramCount: number) {
    this.#res = res
    this.method = req.getMethod()
    this.path = req.getUrl()
    this.query = req.getQuery() ?? ''
    // A loop, not fill(): Array.prototype.fill runs in V8's C++ runtime, about 0.4 µs a request (perf).
    const values = scan.values
    for (let i = 0; i < values.length; i++) values[i] = ''
    scan.seen = 0
    scan.conflict = ''
    scan.bytes = 0
    req.forEach(onHeaderField)
    const v = scan.values
    this.authorization = v[SLOT.authorization]!
    this.xApiKey = v[SLOT.xApiKey]!
    this.contentType = v[SLOT.contentType]!
    this.contentLength = v[SLOT.contentLength]!
    this.providerAddress = v[SLOT.providerAddress]!
    this.providerSort = v[SLOT.providerSort]!
    this.providerTrustMode = v[SLOT.providerTrustMode]!
    this.providerAllowFallbacks = v[SLOT.providerAllowFallbacks]!
    this.providerRequireParameters = v[SLOT.providerRequireParameters]!
    this.maxPricePrompt = v[SLOT.maxPricePrompt]!
    this.maxPriceCompletion = v[SLOT.maxPriceCompletion]!
    this.maxPriceImage = v[SLOT.maxPriceImage]!
    this.cookie = v[SLOT.cookie]!
    this.origin = v[SLOT.origin]!
    this.host = v[SLOT.host]!
    this.secFetchSite = v[SLOT.secFetchSite]!
    this.traceparent = v[SLOT.traceparent]!
    this.tracestate = v[SLOT.tracestate]!
    this.anthropicVersion = v[SLOT.anthropicVersion]!
    this.anthropicBeta = v[SLOT.anthropicBeta]!
    this.verifyTee = v[SLOT.verifyTee]!
    this.forwardedFor = v[SLOT.forwardedFor]!
    this.conflictingHeader = scan.conflict
    // "METHOD SP target SP HTTP/1.1 CRLF", the fields, then the empty line.
    const target = this.path.length + (this.query === '' ? 0 : this.query.length + 1)
    this.headBytes = this.method.length + 1 + target + 11 + scan.bytes + 2
    this.params = []
    for (let i = 0; i < paramCount; i++) this.params.push(req.getParameter(i) ?? '')
  }

  remoteAddress(): string {
    if (this.#remote === null) {
      try {
        this.#remote = decoder.decode(this.#res.getRemoteAddressAsText())
      } catch {
        this.#remote = ''
      }
    }
    return this.#remote
  }
}

export interface AppHandle {
  readonly port: number
  readonly url: string
  /** Closes the listening socket only: open connections and their requests carry on (the drain). */
  stopListening(): void
  close(): void
}

function paramCount(pattern: string): number {
  let n = 0
  for (const part of pattern.split('/')) if (part.startsWith(':')) n++
  return n
}

export interface ListenOptions {
  /** How long a client may take to drain a streamed response's buffered output (uws-reply.ts). */
  readonly sendTimeoutMs?: number
  /**
   * Heads larger than this get 431 (default MAX_HEADER_BYTES). uWS takes its own limit from the first listen
   * of the process (it reads it once, when it loads): a later listen with another value throws.
   */
  readonly maxHeaderBytes?: number
}

/**
 * What the front end refuses before any route sees the request: a head over the limit (431), or a header that
 * decides who is asking or how the body is framed (authorization, content-type, content-length) sent twice with
 * different values (400; the routing headers are judged by the routing stage, with their own codes). A
 * differing Content-Length is a request-smuggling probe: uWS frames the body by the first one.
 */
function headProblem(head: UwsRequestHead, limit: number): RouterError | null {
  if (head.headBytes > limit) {
    return new RouterError('request_header_fields_too_large', `the request head is ${head.headBytes} bytes; the limit is ${limit}`)
  }
  const conflict = head.conflictingHeader
  if (conflict === HEADER.authorization || conflict === HEADER.xApiKey || conflict === HEADER.contentType || conflict === HEADER.contentLength) {
    return new RouterError('invalid_request', `the ${conflict} header was sent more than once with different values`)
  }
  return null
}

/**
 * Answers a refused head in the envelope and closes, so that nothing after the head on this connection (a
 * body) is read as another request. Written here rather than through UwsReply, whose send() closes only after
 * a 413.
 */
function refuseHead(res: HttpResponse, head: UwsRequestHead, err: RouterError, render = renderError): void {
  const body = head.method === 'head' ? '' : render(err, head.requestId)
  res.cork(() => {
    res.writeStatus(statusLine(err.status)).writeHeader('Content-Type', 'application/json').writeHeader('x-request-id', head.requestId)
    // HEAD: the head alone. endWithoutBody(0, true) ends the answer on every build and closes where the core
    // honours it (the trufflesuite core keeps the connection, correctly framed); it says Content-Length: 0, so no
    // length of ours goes with it (uws-reply.ts has the other HEAD answers).
    if (head.method === 'head') res.endWithoutBody(0, true)
    else res.end(body, true)
  })
}

/** Builds the app over `routes` and listens; resolves once the port is bound. */
export function listen(host: string, port: number, routes: readonly Route[], options: ListenOptions = {}): Promise<AppHandle> {
  const sendTimeoutMs = options.sendTimeoutMs ?? SEND_TIMEOUT_MS
  const maxHeaderBytes = options.maxHeaderBytes ?? MAX_HEADER_BYTES
  const uWS = uwsBuild({ maxHeadBytes: UWS_HEAD_LIMIT_FACTOR * maxHeaderBytes }).uws
  const app = uWS.App()
  const methodsByPath = new Map<string, string[]>()
  /** A path's own error envelope (Route.renderError), for the 405 and refused heads of the catch-all. */
  const rendererByPath = new Map<string, (err: RouterError, requestId: string) => string>()

  for (const route of routes) {
    const params = paramCount(route.pattern)
    const verb = route.method === 'del' ? 'DELETE' : route.method.toUpperCase()
    // A parameter (one segment) becomes ':'; a trailing '*' (the rest of the path, slashes included) stays.
    const key = route.pattern.replace(/:[^/]+/g, ':')
    const render = route.renderError ?? renderError
    // HEAD is answered wherever GET is (RFC 9110 §9.3.2): the GET's handler, its head only.
    methodsByPath.set(key, [...(methodsByPath.get(key) ?? []), ...(verb === 'GET' ? [verb, 'HEAD'] : [verb])])
    if (route.renderError !== undefined) rendererByPath.set(key, route.renderError)
    const serve = (headOnly: boolean) => (res: HttpResponse, req: HttpRequest) => {
      const head = new UwsRequestHead(req, res, params)
      const problem = headProblem(head, maxHeaderBytes)
      if (problem !== null) return refuseHead(res, head, problem, render)
      const reply = new UwsReply(res, sendTimeoutMs, head.contentLength, headOnly)
      try {
        route.handler(head, reply)
      } catch (err) {
        log.error('handler threw', { path: head.path, err: String((err as Error)?.stack ?? err) })
        sendError(reply, new RouterError('server_error', 'internal error'), head.requestId, ['x-request-id', head.requestId], render)
      }
    }
    app[route.method](route.pattern, serve(false))
    if (route.method === 'get') app.head(route.pattern, serve(true))
  }

  /**
   * The envelope of a path the catch-all answers: its route's own (a wrong method on /v1/messages), or that of
   * the route it lies under (/v1/messages/batches, which an Anthropic client expects in its own shape).
   * Only exact paths set one (no route with a parameter does today). Off the hot path: 404s and 405s only.
   */
  const rendererFor = (path: string): ((err: RouterError, requestId: string) => string) => {
    const exact = rendererByPath.get(path)
    if (exact !== undefined) return exact
    for (const [prefix, render] of rendererByPath) {
      if (path.length > prefix.length && path.charCodeAt(prefix.length) === 47 /* / */ && path.startsWith(prefix)) return render
    }
    return renderError
  }

  app.any('/*', (res, req) => {
    const head = new UwsRequestHead(req, res, 0)
    const render = rendererFor(head.path)
    const problem = headProblem(head, maxHeaderBytes)
    if (problem !== null) return refuseHead(res, head, problem, render)
    // Any other HEAD gets the status a GET would, and no body.
    const reply = new UwsReply(res, sendTimeoutMs, '', head.method === 'head')
    const allowed = methodsFor(methodsByPath, head.path)
    const headers = ['x-request-id', head.requestId]
    if (allowed !== undefined) {
      sendError(
        reply,
        new RouterError('method_not_allowed', `${head.method.toUpperCase()} is not allowed on ${head.path}`),
        head.requestId,
        [...headers, 'Allow', allowed.join(', ')],
        render,
      )
      return
    }
    sendError(reply, new RouterError('not_found', `no route for ${head.method.toUpperCase()} ${head.path}`), head.requestId, headers, render)
  })

  return new Promise((resolve, reject) => {
    app.listen(host, port, (token) => {
      if (token === false) {
        reject(new Error(`could not listen on ${host}:${port}`))
        return
      }
      const bound = uWS.us_socket_local_port(token as unknown as us_socket)
      let listening = true
      resolve({
        port: bound,
        url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`,
        stopListening() {
          if (listening) uWS.us_listen_socket_close(token)
          listening = false
        },
        close() {
          if (listening) uWS.us_listen_socket_close(token)
          listening = false
          const closable = app as unknown as { close?: () => void }
          if (typeof closable.close === 'function') closable.close()
        },
      })
    })
  })
}

function methodsFor(methodsByPath: Map<string, string[]>, path: string): string[] | undefined {
  const b = path.split('/')
  for (const [pattern, methods] of methodsByPath) {
    const a = pattern.split('/')
    // A parameter matches one non-empty segment, as uWS matches it: /v1/async/jobs/ is no route (404), not a 405.
    // A trailing wildcard matches a non-empty rest, slashes included: a model id such as org/name.
    const rest = a[a.length - 1] === '*'
    if (rest ? b.length < a.length || b.slice(a.length - 1).join('/') === '' : a.length !== b.length) continue
    if (a.every((seg, i) => (seg === ':' ? b[i] !== '' : seg === '*' ? rest || b[i] !== '' : seg === b[i]))) return methods
  }
  return undefined
}
