/**
 * Answers of a provider whose model speaks only Anthropic's format, to a Responses request (issue 32): the
 * request went out as chat translated to Anthropic (chat-request-translation.ts), and the answer comes back
 * the same two steps, Anthropic to chat (chat-answer-translation.ts) then chat to Responses. Each step is
 * the codec the chat and Responses surfaces use on their own; usage and billing are the Anthropic codec's.
 */
import type { ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import { ChatFromAnthropicJsonCodec, ChatFromAnthropicStreamCodec } from './chat-answer-translation.js'
import type { Emit, ResponseCodec } from './codec.js'
import { JsonAnswerCodec } from './json-answer.js'
import { ResponsesTranslatedJsonCodec, type KeptAnswer, type ResponsesCodec } from './responses-json-translation.js'
import { ResponsesTranslatedStreamCodec } from './responses-stream-translation.js'
import type { ResponseMeta } from './responses-wire.js'
import type { ToolNames } from './tool-names.js'

/** The usage the Anthropic step measured; the Responses step bills by it, not by its own estimate. */
function billedAsMeasured(anthropic: ResponseCodec, responses: { bill(usage: ChatUsage): void }, promptBytes: number): ChatUsage {
  const usage = anthropic.usage(promptBytes)
  responses.bill(usage)
  return usage
}

/** An Anthropic JSON message, made a chat completion, made a response object. */
export class ResponsesViaAnthropicJsonCodec extends JsonAnswerCodec implements ResponsesCodec {
  readonly #anthropic: ChatFromAnthropicJsonCodec
  readonly #responses: ResponsesTranslatedJsonCodec

  constructor(meta: ResponseMeta, names?: ToolNames) {
    super()
    this.#anthropic = new ChatFromAnthropicJsonCodec(meta.model)
    this.#responses = new ResponsesTranslatedJsonCodec(meta, names)
  }

  read(body: Buffer): boolean {
    // The chat completion's trace member (empty here) is not read by the next step.
    return this.#anthropic.read(body) && this.#responses.read(Buffer.from(this.#anthropic.complete({})))
  }

  get id(): string {
    return this.#anthropic.id
  }

  get produced(): boolean {
    return this.#anthropic.produced
  }

  usage(promptBytes: number): ChatUsage {
    return billedAsMeasured(this.#anthropic, this.#responses, promptBytes)
  }

  kept(): KeptAnswer {
    return this.#responses.kept()
  }

  complete(trace: Record<string, unknown>): string {
    return this.#responses.complete(trace)
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return this.#responses.fail(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string {
    return this.#anthropic.errorBody(status, body, requestId)
  }
}

/** An Anthropic SSE stream, made chat chunks, made Responses events, as it arrives. */
export class ResponsesViaAnthropicStreamCodec implements ResponseCodec, ResponsesCodec {
  readonly streaming = true
  readonly #anthropic: ChatFromAnthropicStreamCodec
  readonly #responses: ResponsesTranslatedStreamCodec
  /** Events of the last chat chunks (written by the Anthropic codec's complete()), until complete() sends them. */
  #tail = ''
  #flushed = false

  constructor(meta: ResponseMeta, names?: ToolNames) {
    // Usage asked for: its chunk brings the cached tokens to the response's usage.
    this.#anthropic = new ChatFromAnthropicStreamCodec(meta.model, true)
    this.#responses = new ResponsesTranslatedStreamCodec(meta, names)
  }

  get responseHeaders() {
    return this.#responses.responseHeaders
  }

  accepts(contentType: string): boolean {
    return this.#anthropic.accepts(contentType)
  }

  push(chunk: Buffer, emit: Emit): void {
    this.#anthropic.push(chunk, (chat) => this.#responses.push(chat, emit))
  }

  get pendingBytes(): number {
    return this.#anthropic.pendingBytes + this.#responses.pendingBytes
  }

  finish(emit: Emit): void {
    this.#anthropic.finish((chat) => this.#responses.push(chat, emit))
  }

  get ended(): boolean {
    return this.#anthropic.ended
  }

  get streamError(): boolean {
    return this.#anthropic.streamError
  }

  get terminated(): boolean {
    return this.#anthropic.terminated
  }

  read(): boolean {
    return false
  }

  get id(): string {
    return this.#anthropic.id
  }

  get produced(): boolean {
    return this.#anthropic.produced
  }

  usage(promptBytes: number): ChatUsage {
    return billedAsMeasured(this.#anthropic, this.#responses, promptBytes)
  }

  /** The Anthropic codec's last chat chunks (finish, usage), translated: the answer is whole after it. */
  #flushTail(): void {
    if (this.#flushed) return
    this.#flushed = true
    this.#responses.push(Buffer.from(this.#anthropic.complete({})), (bytes) => (this.#tail += bytes.toString('utf8')))
  }

  kept(): KeptAnswer | null {
    this.#flushTail()
    return this.#responses.kept()
  }

  complete(trace: Record<string, unknown>): string {
    this.#flushTail()
    return this.#tail + this.#responses.complete(trace)
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return this.#responses.fail(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string {
    return this.#anthropic.errorBody(status, body, requestId)
  }
}
