/**
 * Answers of a provider that speaks Anthropic's Messages API itself, relayed as they are (DESIGN.md §4): the
 * JSON body gets an `x_svc_trace` member spliced in; the SSE stream is relayed event by event except its
 * `message_stop`, which is held and sent by complete() with the trace in its data, so the last byte of the
 * answer waits for the durable charge. A provider's own `event: error` is held the same way and ends the
 * stream in place of message_stop, with the trace added, once the answer has begun; as the stream's first
 * event (Anthropic's overloaded_error at the start of a stream, under a 200) it fails the try before anything
 * was relayed, and the next candidate answers. Nothing after message_stop or an error event is relayed. A
 * provider's own x_svc_trace is taken out of the body and of every event (foreign-trace.ts).
 */
import type { ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import { anthropicErrorEvent, meteredAnthropicStreamUsage, meteredAnthropicUsage, renderAnthropicError } from './anthropic-wire.js'
import { isEventStream, type Emit, type ResponseCodec } from './codec.js'
import { answerObject, JsonAnswerCodec } from './json-answer.js'
import { payloadKind, SseFramer } from './sse-framing.js'
import { cleanHeld, cleanJson, isEmptyObject, stripTraces, TraceFinder } from './foreign-trace.js'
import { spliceTrace } from './trace-splice.js'

export const SSE_HEADERS = ['Content-Type', 'text/event-stream; charset=utf-8', 'Cache-Control', 'no-cache']

type Usage = Record<string, unknown>
type NativeMessage = { id?: unknown; usage?: unknown; content?: unknown }

/** A native Anthropic SSE stream, relayed byte for byte but for the held message_stop. */
export class AnthropicStreamCodec implements ResponseCodec {
  readonly streaming = true
  readonly responseHeaders = SSE_HEADERS
  #id = ''
  #events = 0
  #input: Usage | null = null
  #output: unknown = undefined
  #emit: Emit | null = null
  /** The provider's own `event: error` (e.g. overloaded_error mid-stream): held, and sent instead of message_stop. */
  #error: Record<string, unknown> | null = null
  /** The provider's message_stop arrived (held: complete() sends it), or a message_delta with a stop_reason. */
  #stopped = false
  /** The message_stop event itself arrived: the stream's last event. */
  #stopEvent = false
  /** An event whose data was not a JSON object: the provider failing (dropped; the try is a stream_error). */
  #malformed = false
  readonly #framer: SseFramer
  readonly #traces = new TraceFinder()

  constructor() {
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

  /** Whole: ended by message_stop (or a stop_reason) or the provider's error event, after at least one event. */
  get ended(): boolean {
    return !this.#malformed && this.#events > 0 && (this.#stopped || this.#error !== null)
  }

  /** A malformed event, or an error event before any other: the provider failed (stream_error). */
  get streamError(): boolean {
    return this.#malformed || (this.#error !== null && this.#events === 0)
  }

  get terminated(): boolean {
    return this.#stopEvent || this.#error !== null
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
    const usage = this.#input === null ? null : { ...this.#input, output_tokens: this.#output ?? this.#input.output_tokens }
    // The whole output count comes only with message_delta (#output); before it, message_start's early one.
    return meteredAnthropicStreamUsage(usage, this.#output !== undefined, promptBytes, Math.max(0, this.#events - 4))
  }

  complete(trace: Record<string, unknown>): string {
    if (this.#error !== null) return `event: error\ndata: ${JSON.stringify({ ...this.#error, x_svc_trace: trace })}\n\n`
    return `event: message_stop\ndata: ${JSON.stringify({ type: 'message_stop', x_svc_trace: trace })}\n\n`
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return anthropicErrorEvent(err, requestId, trace)
  }

  #onEvent(source: Buffer, start: number, end: number): void {
    // The stream's last event came (message_stop, or the provider's error): whatever follows is not relayed.
    if (this.#stopEvent || this.#error !== null) return
    const f = this.#framer
    if (f.continuation) {
      this.#emit!(source.subarray(start, end))
      return
    }
    if (f.dataLines === 0) {
      if (f.nameStart < 0) this.#emit!(source.subarray(start, end)) // comments and blank lines
      return
    }
    const name = f.eventName()
    // Held whatever its data (complete() sends ours in its place), as before the check below.
    if (name === 'message_stop') {
      this.#stopped = true
      this.#stopEvent = true
      return
    }
    const kind = payloadKind(f.dataSource, f.dataStart, f.dataEnd)
    if (kind !== 'object' && name !== 'error') {
      if (kind === 'other') this.#malformed = true
      return
    }
    if (name === 'error') {
      try {
        const value: unknown = JSON.parse(f.dataSource.toString('utf8', f.dataStart, f.dataEnd))
        this.#error = value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : { type: 'error' }
      } catch {
        this.#error = { type: 'error', error: { type: 'api_error', message: 'the provider sent an unreadable error event' } }
      }
      // complete() sends it with our trace: none of the provider's may stay in it.
      stripTraces(this.#error)
      return
    }
    // A provider's own x_svc_trace (foreign-trace.ts): only then is the event parsed and written again.
    if (this.#traces.test(f.dataSource, f.dataStart, f.dataEnd, f.dataLines === 1)) {
      const cleaned = cleanJson(f.dataSource, f.dataStart, f.dataEnd)
      if (cleaned.kind === 'invalid') {
        this.#malformed = true
        return
      }
      if (cleaned.kind === 'changed') {
        // An event that was only the fake trace is no event: nothing of it is relayed.
        if (isEmptyObject(cleaned.value)) return
        this.#events++
        if (name === 'message_start' || name === 'message_delta') this.#read(name, cleaned.text)
        this.#emit!(Buffer.from(`${name === '' ? '' : `event: ${name}\n`}data: ${cleaned.text}\n\n`))
        return
      }
    }
    this.#events++
    if (name === 'message_start' || name === 'message_delta') this.#read(name, f.dataSource.toString('utf8', f.dataStart, f.dataEnd))
    // A copy: the framer reuses neither buffer, but the receiver may hold a slice of the provider's chunk.
    this.#emit!(Buffer.from(source.subarray(start, end)))
  }

  #read(name: string, data: string): void {
    let value: any
    try {
      value = JSON.parse(data)
    } catch {
      return
    }
    if (name === 'message_start') {
      const m = value?.message
      if (typeof m?.id === 'string') this.#id = m.id
      if (m?.usage !== null && typeof m?.usage === 'object') this.#input = m.usage
    } else {
      if (value?.delta?.stop_reason != null) this.#stopped = true
      if (value?.usage !== null && typeof value?.usage === 'object') {
        this.#output = value.usage.output_tokens
        if (this.#input === null) this.#input = value.usage
      }
    }
  }
}

/** A native Anthropic JSON message, held whole, read for its id and usage, the trace spliced in. */
export class AnthropicJsonCodec extends JsonAnswerCodec {
  #body: Buffer | null = null
  #parsed: NativeMessage | null = null

  read(body: Buffer): boolean {
    const parsed = answerObject(body, 'content')
    if (parsed === null) return false
    // A provider's own x_svc_trace goes (the body written again only then); ours is spliced in by complete().
    const clean = cleanHeld(body, parsed)
    if (clean === null) return false
    this.#parsed = parsed as NativeMessage
    this.#body = clean
    return true
  }

  get id(): string {
    const id = this.#parsed?.id
    return typeof id === 'string' ? id : ''
  }

  get produced(): boolean {
    return this.#parsed !== null
  }

  usage(promptBytes: number): ChatUsage {
    let bytes = 0
    const content = this.#parsed?.content
    if (Array.isArray(content)) for (const block of content) bytes += JSON.stringify(block ?? null).length
    return meteredAnthropicUsage(this.#parsed?.usage, promptBytes, Math.ceil(bytes / 4))
  }

  complete(trace: Record<string, unknown>): Buffer {
    const body = this.#body!
    return spliceTrace(body, ',"x_svc_trace":' + JSON.stringify(trace)) ?? body
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderAnthropicError(err, requestId, trace)
  }
}
