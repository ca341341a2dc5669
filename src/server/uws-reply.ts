/**
 * The Reply over a uWS HttpResponse. uWS rules kept here so nobody else has to know them: onAborted is
 * attached before anything asynchronous, a response is never touched after abort or end, and every write
 * from outside the route callback happens inside cork().
 */
import type { HttpResponse } from 'uWebSockets.js'
import { RouterError, statusLine } from '../errors.js'
import type { HeaderList, Reply } from './reply.js'

function noop(): void {}

export class UwsReply implements Reply {
  readonly #res: HttpResponse
  #aborted = false
  #started = false
  #done = false
  #abortHandler: () => void = noop
  #writableHandler: (() => void) | null = null

  constructor(res: HttpResponse) {
    this.#res = res
    res.onAborted(() => {
      this.#aborted = true
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
    let parts: Buffer[] | null = null
    let size = 0
    let failed = false
    this.#res.onData((chunk, isLast) => {
      if (failed) return
      size += chunk.byteLength
      if (size > limit) {
        failed = true
        onError(new RouterError('request_too_large', `request body exceeds the limit of ${limit} bytes`))
        return
      }
      // uWS reuses `chunk` once this callback returns, so it is copied; a body in one piece is copied once.
      if (isLast && parts === null) {
        onBody(Buffer.from(new Uint8Array(chunk)))
        return
      }
      ;(parts ??= []).push(Buffer.from(new Uint8Array(chunk)))
      if (isLast) onBody(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size))
    })
  }

  #writeHead(status: number, headers: HeaderList): void {
    const res = this.#res
    res.writeStatus(statusLine(status))
    for (let i = 0; i < headers.length; i += 2) res.writeHeader(headers[i]!, headers[i + 1]!)
    this.#started = true
  }

  send(status: number, headers: HeaderList, body: string | Uint8Array): void {
    if (this.#aborted || this.#done) return
    this.#done = true
    this.#res.cork(() => {
      this.#writeHead(status, headers)
      // A 413 may answer before the client finished sending: close so the rest is not read as a new request.
      this.#res.end(body, status === 413)
    })
  }

  begin(status: number, headers: HeaderList): void {
    if (this.#aborted || this.#done) return
    this.#res.cork(() => this.#writeHead(status, headers))
  }

  write(chunk: string | Uint8Array): boolean {
    if (this.#aborted || this.#done) return true
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
      if (h !== null) h()
      return true
    })
  }

  end(chunk?: string | Uint8Array): void {
    if (this.#aborted || this.#done) return
    this.#done = true
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
