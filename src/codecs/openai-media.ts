/**
 * OpenAI image and transcription answers (spec §4.1): held whole (they are small next to their uploads), their
 * billing unit read from the answer itself (images counted from `data[]`, audio seconds from `usage.seconds` or
 * the verbose `duration`), the trace spliced into a JSON body. A transcription asked for as text, srt or vtt is
 * relayed exactly as the provider wrote it, and its trace goes in the X-SVC-Trace response header instead.
 */
import type { AudioUsage, ImageUsage } from '../billing/cost.js'
import { usageSeconds } from '../billing/usage-bound.js'
import { renderError, type RouterError } from '../errors.js'
import { isHeaderSafeId, type ResponseCodec, type ResponseHead } from './codec.js'
import { openAiErrorOf } from './openai-error.js'
import { cleanHeld } from './foreign-trace.js'
import { spliceTrace } from './trace-splice.js'

const JSON_HEADERS = ['Content-Type', 'application/json']

/** The provider's JSON answer as an object, or null when it is not one. */
function parseObject(body: Buffer): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'))
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null
  } catch {
    return null
  }
}

/** Whether a Content-Type names JSON (application/json, parameters and case aside). */
export function isJsonType(contentType: string): boolean {
  const n = 'application/json'.length
  if (contentType.length < n) return false
  if (contentType.length > n) {
    const c = contentType.charCodeAt(n)
    if (c !== 59 && c !== 32 && c !== 9) return false
  }
  return contentType.slice(0, n).toLowerCase() === 'application/json'
}

/**
 * The trace as a header value: JSON with every character outside visible ASCII escaped, so no model id or error
 * text can break the response head.
 */
export function traceHeader(trace: Record<string, unknown>): string {
  let out = ''
  const text = JSON.stringify(trace)
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    out += c < 0x20 || c > 0x7e ? '\\u' + c.toString(16).padStart(4, '0') : text[i]
  }
  return out
}

/** What every held media answer shares: the body, the provider's id for it (body `id`, else its x-request-id). */
abstract class HeldMediaCodec<U extends ImageUsage | AudioUsage> implements ResponseCodec<U> {
  readonly streaming = false
  readonly pendingBytes = 0
  readonly ended = true
  responseHeaders: readonly string[] = JSON_HEADERS
  protected body: Buffer | null = null
  protected parsed: Record<string, unknown> | null = null
  #headerId = ''

  abstract accepts(contentType: string): boolean
  abstract read(body: Buffer): boolean
  abstract usage(promptBytes: number): U
  abstract complete(trace: Record<string, unknown>): string | Buffer

  onHeaders(head: ResponseHead): void {
    if (isHeaderSafeId(head.requestId)) this.#headerId = head.requestId
  }

  push(): void {}

  finish(): void {}

  get id(): string {
    const id = this.parsed?.id
    return isHeaderSafeId(id) ? id : this.#headerId
  }

  get produced(): boolean {
    return this.body !== null
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderError(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }
}

/**
 * Whether an entry of an images answer's `data[]` holds an image: a non-empty `b64_json` or `url` string. An
 * entry without one (`{}`, `null`, a number) delivers nothing and is not billed.
 */
function holdsImage(entry: unknown): boolean {
  if (entry === null || typeof entry !== 'object') return false
  const { b64_json: b64, url } = entry as { b64_json?: unknown; url?: unknown }
  return (typeof b64 === 'string' && b64.length > 0) || (typeof url === 'string' && url.length > 0)
}

/** An images answer (`{created, data:[{b64_json|url}]}`): billed per entry of `data[]` that holds an image. */
export class ImagesJsonCodec extends HeldMediaCodec<ImageUsage> {
  accepts(): boolean {
    // Judged by parsing, as chat's JSON answers are.
    return true
  }

  read(body: Buffer): boolean {
    const parsed = parseObject(body)
    if (parsed === null || !Array.isArray(parsed.data)) return false
    // A provider's own x_svc_trace goes (the body written again only then); ours is spliced in by complete().
    const clean = cleanHeld(body, parsed)
    if (clean === null) return false
    this.body = clean
    this.parsed = parsed
    return true
  }

  usage(): ImageUsage {
    const data = this.parsed?.data
    let images = 0
    if (Array.isArray(data)) for (const entry of data) if (holdsImage(entry)) images++
    return { images }
  }

  complete(trace: Record<string, unknown>): Buffer {
    const body = this.body!
    return spliceTrace(body, ',"x_svc_trace":' + JSON.stringify(trace)) ?? body
  }
}

/**
 * A transcription answer: JSON (json, verbose_json) gets the trace in its body; any other format (text, srt,
 * vtt) is relayed byte for byte with the provider's Content-Type and the trace in a header. Seconds come from
 * the provider (`usage.seconds`, else `duration`); when it reports none, from the upload (`uploadSeconds`,
 * estimated).
 */
export class TranscriptionCodec extends HeldMediaCodec<AudioUsage> {
  readonly #uploadSeconds: () => number
  #contentType = ''

  /** `uploadSeconds`: the duration read from the uploaded audio, asked for only when the provider gave none. */
  constructor(uploadSeconds: () => number) {
    super()
    this.#uploadSeconds = uploadSeconds
  }

  accepts(contentType: string): boolean {
    this.#contentType = contentType
    return true
  }

  read(body: Buffer): boolean {
    if (isJsonType(this.#contentType)) {
      const parsed = parseObject(body)
      if (parsed === null) return false
      const clean = cleanHeld(body, parsed)
      if (clean === null) return false
      this.parsed = parsed
      body = clean
    }
    this.body = body
    return true
  }

  usage(): AudioUsage {
    const p = this.parsed
    const reported = usageSeconds((p?.usage as { seconds?: unknown } | undefined)?.seconds) ?? usageSeconds(p?.duration)
    if (reported !== null) return { seconds: reported }
    return { seconds: this.#uploadSeconds(), estimated: true }
  }

  complete(trace: Record<string, unknown>): string | Buffer {
    const body = this.body!
    if (this.parsed !== null) {
      const spliced = spliceTrace(body, ',"x_svc_trace":' + JSON.stringify(trace))
      if (spliced !== null) return spliced
    }
    this.responseHeaders = ['Content-Type', this.#contentType === '' ? 'text/plain; charset=utf-8' : this.#contentType, 'X-SVC-Trace', traceHeader(trace)]
    return body
  }
}

