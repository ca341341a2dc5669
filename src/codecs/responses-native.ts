/**
 * Answers of a provider that speaks the Responses API itself (its model lists `responses` in `formats`),
 * relayed (issue 32). The router keeps the conversation state, so the provider's response is made ours: its
 * `id` (kept as SVC-Res-Key) is replaced by the router's, and `store` / `previous_response_id` say what the
 * client asked. On a stream only the lifecycle events that carry the response object are re-written
 * (response.created, .in_progress, .queued); every delta is relayed byte for byte. The last event
 * (response.completed, .incomplete, .failed, or an error event) is held and sent by complete() with the
 * trace, so it waits for the durable charge. A provider's own x_svc_trace is taken out of the body and of every
 * event (foreign-trace.ts), so neither the client nor the stored response keeps it.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import { renderError, type RouterError } from '../errors.js'
import { SSE_HEADERS } from './anthropic-native.js'
import { isEventStream, isHeaderSafeId, type Emit, type ResponseCodec } from './codec.js'
import { answerObject, JsonAnswerCodec } from './json-answer.js'
import { openAiErrorOf } from './openai-error.js'
import type { KeptAnswer, ResponsesCodec } from './responses-json-translation.js'
import { chatUsageOfResponses, failureEvents, sseEvent, streamError, type ResponseMeta } from './responses-wire.js'
import { cleanJson, isEmptyObject, mayHoldTrace, stripTraces, TraceFinder } from './foreign-trace.js'
import { payloadKind, SseFramer } from './sse-framing.js'

type Json = Record<string, any>

/** The provider's response object made the router's: our id, the client's own store and previous_response_id. */
function ours(response: Json, meta: ResponseMeta): Json {
  return { ...response, id: meta.id, store: meta.echo.store, previous_response_id: meta.echo.previous_response_id }
}

function bytesOfOutput(output: unknown): number {
  if (!Array.isArray(output)) return 0
  let bytes = 0
  for (const item of output) {
    try {
      bytes += JSON.stringify(item ?? null).length
    } catch {
      // An absurdly nested item of a provider is not worth a crash: it is billed as estimated already.
    }
  }
  return bytes
}

/** A native JSON response, held whole, its id made ours and the trace added. */
export class ResponsesNativeJsonCodec extends JsonAnswerCodec implements ResponsesCodec {
  #parsed: Json | null = null
  readonly #meta: ResponseMeta

  constructor(meta: ResponseMeta) {
    super()
    this.#meta = meta
  }

  read(body: Buffer): boolean {
    this.#parsed = answerObject(body, 'output')
    // A provider's own x_svc_trace goes before the answer is sent or stored (both re-serialise this object).
    if (this.#parsed !== null && mayHoldTrace(body)) stripTraces(this.#parsed)
    return this.#parsed !== null
  }

  get id(): string {
    const id = this.#parsed?.id
    return isHeaderSafeId(id) ? id : ''
  }

  get produced(): boolean {
    return this.#parsed !== null
  }

  usage(promptBytes: number): ChatUsage {
    return meteredUsage(chatUsageOfResponses(this.#parsed?.usage), promptBytes, Math.ceil(bytesOfOutput(this.#parsed?.output) / 4))
  }

  kept(): KeptAnswer | null {
    const response = ours(this.#parsed!, this.#meta)
    return response.status === 'failed' ? null : { response, output: response.output }
  }

  complete(trace: Record<string, unknown>): string {
    return JSON.stringify({ ...ours(this.#parsed!, this.#meta), x_svc_trace: trace })
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderError(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }
}

/** Events that carry the response object at the start: re-written with our id. */
const LIFECYCLE = new Set(['response.created', 'response.in_progress', 'response.queued'])
/** Events that end the answer: held, and sent by complete() with the trace. */
const LAST = new Set(['response.completed', 'response.incomplete', 'response.failed', 'error'])

/** A native Responses SSE stream. */
export class ResponsesNativeStreamCodec implements ResponseCodec, ResponsesCodec {
  readonly streaming = true
  readonly responseHeaders = SSE_HEADERS
  #id = ''
  #events = 0
  /**
   * The sequence number the next event of ours gets: one past the provider's last. Deltas are relayed unread, so
   * they are counted on from the last number read (a lifecycle event's): the provider numbers every event.
   */
  #seq = 0
  /** The last event, held: its type and data. */
  #last: { type: string; data: Json } | null = null
  /** The response as the lifecycle events last showed it (what response.failed of ours starts from). */
  #response: Json | null = null
  #malformed = false
  #emit: Emit | null = null
  readonly #meta: ResponseMeta
  readonly #framer: SseFramer
  readonly #traces = new TraceFinder()
  /** The current event may hold a provider's own x_svc_trace (foreign-trace.ts): it is parsed to know. */
  #suspect = false

  constructor(meta: ResponseMeta) {
    this.#meta = meta
    this.#framer = new SseFramer((source, start, end) => this.#onEvent(source, start, end))
  }

  accepts(contentType: string): boolean {
    return isEventStream(contentType)
  }

  push(chunk: Buffer, emit: Emit): void {
    this.#emit = emit
    this.#traces.reset()
    this.#framer.push(chunk)
  }

  get pendingBytes(): number {
    return this.#framer.pendingBytes
  }

  finish(emit: Emit): void {
    this.#emit = emit
    this.#traces.reset()
    this.#framer.finish()
  }

  get ended(): boolean {
    return !this.#malformed && this.#last !== null && !this.#failedFirst()
  }

  /** A malformed event, or the provider's failure (error, response.failed) as its first event. */
  get streamError(): boolean {
    return this.#malformed || this.#failedFirst()
  }

  /** The stream's first event was its failure: nothing was relayed, so the try is a miss the next candidate answers. */
  #failedFirst(): boolean {
    const last = this.#last
    return last !== null && this.#events === 0 && (last.type === 'error' || last.type === 'response.failed')
  }

  get terminated(): boolean {
    return this.#last !== null
  }

  read(): boolean {
    return false
  }

  get id(): string {
    return this.#id
  }

  get produced(): boolean {
    return this.#events > 0
  }

  usage(promptBytes: number): ChatUsage {
    const reported = chatUsageOfResponses(this.#last?.data.response?.usage)
    // Cut short: one token per relayed delta event (the 2 lifecycle events and the item frames aside).
    return meteredUsage(reported, promptBytes, Math.max(0, this.#events - 2))
  }

  kept(): KeptAnswer | null {
    const last = this.#last
    if (last === null || (last.type !== 'response.completed' && last.type !== 'response.incomplete')) return null
    const response = ours(last.data.response ?? {}, this.#meta)
    return { response, output: Array.isArray(response.output) ? response.output : [] }
  }

  complete(trace: Record<string, unknown>): string {
    const last = this.#last!
    if (last.type === 'error') return sseEvent('error', JSON.stringify({ ...last.data, x_svc_trace: trace }))
    const response = { ...ours(last.data.response ?? {}, this.#meta), x_svc_trace: trace }
    return sseEvent(last.type, JSON.stringify({ ...last.data, response }))
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return failureEvents(this.#response === null ? null : ours(this.#response, this.#meta), this.#seq, streamError(err), requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }

  #onEvent(source: Buffer, start: number, end: number): void {
    // The stream's last event came (held for complete()): whatever follows is not relayed.
    if (this.#last !== null) return
    const f = this.#framer
    if (f.continuation) {
      this.#emit!(source.subarray(start, end))
      return
    }
    if (f.dataLines === 0) {
      if (f.nameStart < 0) this.#emit!(source.subarray(start, end)) // comments and blank lines
      return
    }
    const kind = payloadKind(f.dataSource, f.dataStart, f.dataEnd)
    if (kind !== 'object') {
      if (kind === 'other') this.#malformed = true
      return
    }
    this.#suspect = this.#traces.test(f.dataSource, f.dataStart, f.dataEnd, f.dataLines === 1)
    let name = f.eventName()
    let data: Json | null = null
    if (name === '') {
      // No `event:` line: the type is read from the data (OpenAI always names its events; others may not).
      data = this.#parse()
      if (data === null) return
      name = typeof data.type === 'string' ? data.type : ''
    }
    if (!LIFECYCLE.has(name) && !LAST.has(name)) {
      let bytes = source.subarray(start, end)
      if (this.#suspect) {
        // A delta with a provider's own x_svc_trace: written again without it, or dropped if nothing is left.
        const cleaned = cleanJson(f.dataSource, f.dataStart, f.dataEnd)
        if (cleaned.kind === 'invalid') {
          this.#malformed = true
          return
        }
        if (cleaned.kind === 'changed') {
          if (isEmptyObject(cleaned.value)) return
          bytes = Buffer.from(sseEvent(name, cleaned.text))
        }
      }
      this.#events++
      this.#seq++
      // A copy: the receiver may hold a slice of the provider's chunk.
      this.#emit!(Buffer.from(bytes))
      return
    }
    data ??= this.#parse()
    if (data === null) return
    if (typeof data.sequence_number === 'number' && Number.isSafeInteger(data.sequence_number)) this.#seq = data.sequence_number + 1
    else this.#seq++
    if (LAST.has(name)) {
      this.#last = { type: name, data }
      return
    }
    const response = data.response
    if (response === null || typeof response !== 'object') {
      this.#malformed = true
      return
    }
    if (this.#id === '' && isHeaderSafeId(response.id)) this.#id = response.id
    this.#response = response
    this.#events++
    this.#emit!(Buffer.from(sseEvent(name, JSON.stringify({ ...data, response: ours(response, this.#meta) }))))
  }

  /** The current event's data as an object; null (the stream marked malformed) when it is not one. */
  #parse(): Json | null {
    const f = this.#framer
    try {
      const value: unknown = JSON.parse(f.dataSource.toString('utf8', f.dataStart, f.dataEnd))
      if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
        // Lifecycle and last events are written again from this object: a provider's own trace goes here.
        if (this.#suspect) stripTraces(value)
        return value as Json
      }
    } catch {}
    this.#malformed = true
    return null
  }
}
