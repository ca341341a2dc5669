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
  /** Path parameters of the route pattern, in order. */
  readonly params: string[]
  readonly #res: uWS.HttpResponse
  #remote: string | null = null

  constructor(req: uWS.HttpRequest, res: uWS.HttpResponse, paramCount: number) {
    this.#res = res
    this.method = req.getMethod()
    this.path = req.getUrl()
    this.query = req.getQuery() ?? ''
    this.authorization = req.getHeader(HEADER.authorization)
    this.contentType = req.getHeader(HEADER.contentType)
    this.contentLength = req.getHeader(HEADER.contentLength)
    this.providerAddress = req.getHeader(HEADER.providerAddress)
    this.providerSort = req.getHeader(HEADER.providerSort)
    this.providerTrustMode = req.getHeader(HEADER.providerTrustMode)
    this.providerAllowFallbacks = req.getHeader(HEADER.providerAllowFallbacks)
    this.providerRequireParameters = req.getHeader(HEADER.providerRequireParameters)
    this.maxPricePrompt = req.getHeader(HEADER.maxPricePrompt)
    this.maxPriceCompletion = req.getHeader(HEADER.maxPriceCompletion)
    this.maxPriceImage = req.getHeader(HEADER.maxPriceImage)
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
