/**
 * HTTP/1.1 by hand for front-end tests: the bytes are written exactly as given (in pieces, if asked), and
 * what comes back is read as bytes, with how and when the server ended the connection. Clients like undici
 * cannot send what these tests need (HTTP/1.0, 49 fields, repeated fields, pipelined POSTs).
 */
import net from 'node:net'

export interface RawExchange {
  /** Everything the server sent, as latin1. */
  readonly text: string
  /** How the connection ended: the server closed it ('fin'), reset it, or it was still open when we stopped. */
  readonly end: 'fin' | 'reset' | 'open'
  /** Milliseconds from the first write until the end. */
  readonly ms: number
}

export interface ExchangeOptions {
  /** Longest wait for the server before the client gives up and reports 'open'. */
  readonly waitMs: number
  /** Pause between two parts, so that they reach the server in separate reads. */
  readonly gapMs?: number
  /** Stop early (the client closes) once this holds of what was received, e.g. a whole response. */
  readonly until?: (text: string) => boolean
}

/** Connects to 127.0.0.1:`port`, writes `parts`, and reads until the server ends it, `until` holds, or `waitMs`. */
export function exchange(port: number, parts: readonly string[], options: ExchangeOptions): Promise<RawExchange> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const started = performance.now()
    let text = ''
    let reset = false
    let settled = false
    const timer = setTimeout(() => finish('open'), options.waitMs)

    function finish(end: RawExchange['end']): void {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      resolve({ text, end, ms: performance.now() - started })
    }

    socket.setNoDelay(true)
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1')
      if (options.until?.(text) === true) finish('open')
    })
    socket.on('error', () => {
      reset = true
    })
    socket.on('close', () => finish(reset ? 'reset' : 'fin'))
    socket.once('connect', async () => {
      for (let i = 0; i < parts.length; i++) {
        if (i > 0 && options.gapMs !== undefined) await new Promise((r) => setTimeout(r, options.gapMs))
        if (socket.destroyed) return
        socket.write(parts[i]!, 'latin1')
      }
    })
  })
}

export interface RawResponse {
  readonly statusLine: string
  readonly status: number
  /** Lower-case names; a repeated field keeps its last value. */
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * The complete responses at the start of `text`, in order (framed by Content-Length, as uWS frames them).
 * `bodiless[i]`: the i-th answers a HEAD, so it has no body whatever its Content-Length says (RFC 9112 §6.3).
 */
export function parseResponses(text: string, bodiless: readonly boolean[] = []): RawResponse[] {
  const out: RawResponse[] = []
  let at = 0
  while (at < text.length) {
    const headEnd = text.indexOf('\r\n\r\n', at)
    if (headEnd < 0) break
    const [statusLine = '', ...fields] = text.slice(at, headEnd).split('\r\n')
    const headers: Record<string, string> = {}
    for (const field of fields) {
      const colon = field.indexOf(':')
      headers[field.slice(0, colon).toLowerCase()] = field.slice(colon + 1).trim()
    }
    const length = bodiless[out.length] === true ? 0 : Number(headers['content-length'] ?? 0)
    const bodyStart = headEnd + 4
    if (text.length < bodyStart + length) break
    out.push({ statusLine, status: Number(statusLine.split(' ')[1]), headers, body: text.slice(bodyStart, bodyStart + length) })
    at = bodyStart + length
  }
  return out
}

/** An `until` for exchange(): stop once `count` whole responses arrived. */
export function responses(count: number, bodiless: readonly boolean[] = []): (text: string) => boolean {
  return (text) => parseResponses(text, bodiless).length >= count
}
