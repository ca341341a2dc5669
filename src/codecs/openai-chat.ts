/**
 * OpenAI chat answers (spec §4.2): the JSON body of a completion and the SSE stream of chunks. The stream is
 * relayed byte for byte by the SSE codec; the router's trace goes in one extra chunk right before its own
 * `data: [DONE]` (DESIGN.md §4), and a stream that breaks ends with an error event and no [DONE].
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import { renderError, type RouterError } from '../errors.js'
import { isEventStream, isHeaderSafeId, type Emit, type ResponseCodec } from './codec.js'
import { JsonAnswerCodec } from './json-answer.js'
import { openAiErrorOf } from './openai-error.js'
import { OpenAiSseCodec } from './openai-sse.js'
import { cleanHeld } from './foreign-trace.js'
import { spliceTrace } from './trace-splice.js'
import { isUtf8 } from 'node:buffer'

const SSE_HEADERS = ['Content-Type', 'text/event-stream; charset=utf-8', 'Cache-Control', 'no-cache']
const DONE_EVENT = 'data: [DONE]\n\n'

/** An SSE answer to a `stream: true` chat request. */
export class ChatStreamCodec implements ResponseCodec {
  readonly streaming = true
  readonly responseHeaders = SSE_HEADERS
  readonly #sse: OpenAiSseCodec
  readonly #model: string

  /** `clientWantsUsage`: the client asked for include_usage itself, so the usage chunk is relayed to it. */
  constructor(model: string, clientWantsUsage: boolean) {
    this.#model = model
    this.#sse = new OpenAiSseCodec(!clientWantsUsage)
  }

  accepts(contentType: string): boolean {
    return isEventStream(contentType)
  }

  push(chunk: Buffer, emit: Emit): void {
    this.#sse.push(chunk, emit)
  }

  get pendingBytes(): number {
    return this.#sse.bufferedBytes
  }

  finish(emit: Emit): void {
    this.#sse.finish(emit)
  }

  get ended(): boolean {
    return !this.#sse.sawError && (this.#sse.sawDone || this.#sse.sawFinish)
  }

  get streamError(): boolean {
    return this.#sse.sawError
  }

  /** The provider's [DONE], or a stream that failed before its first chunk (nothing relayed: a miss). */
  get terminated(): boolean {
    return this.#sse.sawDone || this.#sse.failed
  }

  read(): boolean {
    return false
  }

  get id(): string {
    return this.#sse.chatId
  }

  get produced(): boolean {
    return this.#sse.events > 0 || this.#sse.forwardedBytes > 0
  }

  usage(promptBytes: number): ChatUsage {
    return meteredUsage(this.#sse.usage, promptBytes, this.#sse.contentEvents)
  }

  complete(trace: Record<string, unknown>): string {
    const chunk = JSON.stringify({
      id: this.#sse.chatId,
      object: 'chat.completion.chunk',
      created: Math.floor(Date.now() / 1000),
      model: this.#model,
      choices: [],
      x_svc_trace: trace,
    })
    return `data: ${chunk}\n\n${DONE_EVENT}`
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return `data: ${renderError(err, requestId, trace)}\n\n`
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }
}

type ChatResponse = { id?: unknown; usage?: unknown; choices?: unknown }

/**
 * A JSON answer to a chat request: held whole, parsed once for its id and usage, the trace spliced in. A body
 * that is not a JSON object with a `choices` array is no answer: the provider failed (invalid_json).
 */
export class ChatJsonCodec extends JsonAnswerCodec {
  #body: Buffer | null = null
  #parsed: ChatResponse | null = null

  read(body: Buffer): boolean {
    const parsed = parseObject(body)
    // No choices: not a completion (an error object sent with a 200, say), so not an answer to relay and bill.
    if (parsed === null || !Array.isArray(parsed.choices)) return false
    // A provider's own x_svc_trace goes (the body written again only then); ours is spliced in by complete().
    const clean = cleanHeld(body, parsed)
    if (clean === null) return false
    this.#body = clean
    this.#parsed = parsed
    return true
  }

  get id(): string {
    const id = this.#parsed?.id
    return isHeaderSafeId(id) ? id : ''
  }

  get produced(): boolean {
    return this.#parsed !== null
  }

  usage(promptBytes: number): ChatUsage {
    return meteredUsage(this.#parsed?.usage, promptBytes, completionEstimate(this.#parsed?.choices))
  }

  complete(trace: Record<string, unknown>): Buffer {
    const body = this.#body!
    return spliceTrace(body, ',"x_svc_trace":' + JSON.stringify(trace)) ?? body
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderError(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }
}

/**
 * The provider's JSON answer as an object, or null when it is not one. JSON is UTF-8 (RFC 8259): a body that
 * is not would decode here with replacement characters and reach the client as bytes a strict decoder refuses.
 */
function parseObject(body: Buffer): ChatResponse | null {
  if (!isUtf8(body)) return null
  try {
    const value: unknown = JSON.parse(body.toString('utf8'))
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as ChatResponse) : null
  } catch {
    return null
  }
}

/** About four bytes of text per token over the returned messages. */
function completionEstimate(choices: unknown): number {
  if (!Array.isArray(choices)) return 0
  let bytes = 0
  for (const choice of choices) {
    const message = (choice as { message?: { content?: unknown; tool_calls?: unknown } } | null)?.message
    if (message === undefined || message === null) continue
    if (typeof message.content === 'string') bytes += message.content.length
    if (message.tool_calls !== undefined) {
      try {
        bytes += JSON.stringify(message.tool_calls).length
      } catch {
        // A provider's absurdly nested tool call is not worth a crash; it is billed as text already counted.
      }
    }
  }
  return Math.ceil(bytes / 4)
}
