/**
 * The uWS front end: routes, request heads copied out synchronously, and the 404/405 envelope. The only
 * module besides uws-reply.ts that sees uWS objects.
 */
import uWS from 'uWebSockets.js'
import { RouterError } from '../errors.js'
import { log } from '../log.js'
import type { Reply } from './reply.js'
import { HEADER, type RequestHead } from './request-head.js'
import { nextRequestId } from './request-id.js'
import { sendError } from './respond.js'
import { SEND_TIMEOUT_MS, UwsReply } from './uws-reply.js'

export type Handler = (head: RequestHead, reply: Reply) => void

export interface Route {
  readonly method: 'get' | 'post' | 'patch' | 'del'
  /** uWS pattern, e.g. /v1/api-keys/:id */
  readonly pattern: string
  readonly handler: Handler
}

const decoder = new TextDecoder()

/** The header names of HEADER, each at its slot in `scan.values`, and each field's slot. */
const COPIED: readonly string[] = Object.values(HEADER)
const SLOT = Object.fromEntries(Object.keys(HEADER).map((key, slot) => [key, slot])) as Record<keyof typeof HEADER, number>
/**
 * Slot of a copied name by the name's length. The eleven names have eleven different lengths, so a field
 * whose name is not copied is dismissed by one array read, and a match costs one string compare.
 */
const SLOT_BY_LENGTH = new Int8Array(64).fill(-1)
for (let slot = 0; slot < COPIED.length; slot++) {
  const name = COPIED[slot]!
  if (name.length >= SLOT_BY_LENGTH.length || SLOT_BY_LENGTH[name.length] !== -1) {
    throw new Error(`header ${name}: copied names must have distinct lengths under ${SLOT_BY_LENGTH.length}`)
  }
  SLOT_BY_LENGTH[name.length] = slot
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
}

function onHeaderField(name: string, value: string): void {
  const slot = name.length < SLOT_BY_LENGTH.length ? SLOT_BY_LENGTH[name.length]! : -1
  if (slot < 0 || name !== COPIED[slot]) return
  const bit = 1 << slot
  if ((scan.seen & bit) === 0) {
    scan.seen |= bit
    scan.values[slot] = value
  } else if (scan.conflict === '' && value !== scan.values[slot] && trimOws(value) !== trimOws(scan.values[slot]!)) {
    scan.conflict = name
  }
}

function isOws(code: number): boolean {
  return code === 0x20 || code === 0x09
}

/** `value` without leading and trailing SP and HTAB (HTTP's optional whitespace; String#trim strips more). */
function trimOws(value: string): string {
  let start = 0
  let end = value.length
  while (start < end && isOws(value.charCodeAt(start))) start++
  while (end > start && isOws(value.charCodeAt(end - 1))) end--
  return start === 0 && end === value.length ? value : value.slice(start, end)
}

class UwsRequestHead implements RequestHead {
  readonly requestId = nextRequestId()
  readonly startedAt = performance.now()
  readonly method: string
  readonly path: string
  readonly query: string
  readonly authorization: string
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
  readonly conflictingHeader: string
  /** Path parameters of the route pattern, in order. */
  readonly params: string[]
  readonly #res: uWS.HttpResponse
  #remote: string | null = null

  constructor(req: uWS.HttpRequest, res: uWS.HttpResponse, paramCount: number) {
    this.#res = res
    this.method = req.getMethod()
    this.path = req.getUrl()
    this.query = req.getQuery() ?? ''
    scan.values.fill('')
    scan.seen = 0
    scan.conflict = ''
    req.forEach(onHeaderField)
    const v = scan.values
    this.authorization = v[SLOT.authorization]!
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
    this.conflictingHeader = scan.conflict
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
}

/** Builds the app over `routes` and listens; resolves once the port is bound. */
export function listen(host: string, port: number, routes: readonly Route[], options: ListenOptions = {}): Promise<AppHandle> {
  const sendTimeoutMs = options.sendTimeoutMs ?? SEND_TIMEOUT_MS
  const app = uWS.App()
  const methodsByPath = new Map<string, string[]>()

  for (const route of routes) {
    const params = paramCount(route.pattern)
    const verb = route.method === 'del' ? 'DELETE' : route.method.toUpperCase()
    const key = route.pattern.replace(/:[^/]+/g, '*')
    methodsByPath.set(key, [...(methodsByPath.get(key) ?? []), verb])
    app[route.method](route.pattern, (res, req) => {
      const reply = new UwsReply(res, sendTimeoutMs)
      const head = new UwsRequestHead(req, res, params)
      try {
        route.handler(head, reply)
      } catch (err) {
        log.error('handler threw', { path: head.path, err: String((err as Error)?.stack ?? err) })
        sendError(reply, new RouterError('server_error', 'internal error'), head.requestId, ['x-request-id', head.requestId])
      }
    })
  }

  app.any('/*', (res, req) => {
    const reply = new UwsReply(res, sendTimeoutMs)
    const head = new UwsRequestHead(req, res, 0)
    const allowed = methodsFor(methodsByPath, head.path)
    const headers = ['x-request-id', head.requestId]
    if (allowed !== undefined) {
      sendError(reply, new RouterError('method_not_allowed', `${head.method.toUpperCase()} is not allowed on ${head.path}`), head.requestId, [
        ...headers,
        'Allow',
        allowed.join(', '),
      ])
      return
    }
    sendError(reply, new RouterError('not_found', `no route for ${head.method.toUpperCase()} ${head.path}`), head.requestId, headers)
  })

  return new Promise((resolve, reject) => {
    app.listen(host, port, (token) => {
      if (token === false) {
        reject(new Error(`could not listen on ${host}:${port}`))
        return
      }
      const bound = uWS.us_socket_local_port(token as unknown as uWS.us_socket)
      resolve({
        port: bound,
        url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`,
        close() {
          uWS.us_listen_socket_close(token)
          const closable = app as unknown as { close?: () => void }
          if (typeof closable.close === 'function') closable.close()
        },
      })
    })
  })
}

function methodsFor(methodsByPath: Map<string, string[]>, path: string): string[] | undefined {
  for (const [pattern, methods] of methodsByPath) {
    const a = pattern.split('/')
    const b = path.split('/')
    if (a.length === b.length && a.every((seg, i) => seg === '*' || seg === b[i])) return methods
  }
  return undefined
}
