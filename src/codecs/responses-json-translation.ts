/**
 * An OpenAI chat completion translated into a Responses object (issue 32): reasoning, message and
 * function_call output items, status (`incomplete` when the output bound or a content filter cut it), and
 * usage in the Responses shape.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import { renderError, type RouterError } from '../errors.js'
import { JSON_HEADERS } from './anthropic-native.js'
import type { ResponseCodec } from './codec.js'
import { isHeaderSafeId } from './codec.js'
import { openAiErrorOf } from './openai-error.js'
import { newId, responseObject, responsesUsage, type Outcome, type ResponseMeta } from './responses-wire.js'

type Json = Record<string, any>

/** How a chat finish_reason ends a response. */
export function outcomeOf(finish: unknown): Outcome {
  if (finish === 'length') return { status: 'incomplete', incomplete: 'max_output_tokens' }
  if (finish === 'content_filter') return { status: 'incomplete', incomplete: 'content_filter' }
  return { status: 'completed' }
}

/** The output text part of a message item. */
export function textPart(text: string): Json {
  return { type: 'output_text', text, annotations: [] }
}

/** The output items of a chat completion's first choice. */
export function outputItems(completion: Json): Json[] {
  const choice = Array.isArray(completion.choices) ? completion.choices[0] : undefined
  const message = choice?.message ?? {}
  const items: Json[] = []
  const reasoning = typeof message.reasoning_content === 'string' ? message.reasoning_content : message.reasoning
  if (typeof reasoning === 'string' && reasoning !== '') {
    items.push({ id: newId('rs_'), type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: reasoning }] })
  }
  let text = typeof message.content === 'string' ? message.content : ''
  if (typeof message.refusal === 'string') text += message.refusal
  if (text !== '') items.push({ id: newId('msg_'), type: 'message', status: 'completed', role: 'assistant', content: [textPart(text)] })
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      const fn = call?.function ?? {}
      items.push({
        id: newId('fc_'),
        type: 'function_call',
        status: 'completed',
        call_id: typeof call?.id === 'string' && call.id !== '' ? call.id : newId('call_'),
        name: String(fn.name ?? ''),
        arguments: typeof fn.arguments === 'string' ? fn.arguments : '',
      })
    }
  }
  return items
}

/** What the surface stores of a whole answer: the response object (without the trace) and its output items. */
export interface KeptAnswer {
  readonly response: Json
  readonly output: Json[]
}

/** A codec of the Responses surface: it can say what to store of its answer once it is whole. */
export interface ResponsesCodec {
  /** The whole answer (null when it failed or is not whole): called once its usage was taken. */
  kept(): KeptAnswer | null
}

/** A JSON answer of an OpenAI provider to a translated Responses request. */
export class ResponsesTranslatedJsonCodec implements ResponseCodec, ResponsesCodec {
  readonly streaming = false
  readonly responseHeaders = JSON_HEADERS
  readonly pendingBytes = 0
  readonly ended = true
  #parsed: Json | null = null
  #usage: ChatUsage | null = null
  #answer: KeptAnswer | null = null
  readonly #meta: ResponseMeta

  constructor(meta: ResponseMeta) {
    this.#meta = meta
  }

  accepts(): boolean {
    return true
  }

  push(): void {}

  finish(): void {}

  read(body: Buffer): boolean {
    try {
      const value: unknown = JSON.parse(body.toString('utf8'))
      if (value === null || typeof value !== 'object' || Array.isArray(value) || !Array.isArray((value as Json).choices)) return false
      this.#parsed = value as Json
      return true
    } catch {
      return false
    }
  }

  get id(): string {
    const id = this.#parsed?.id
    return isHeaderSafeId(id) ? id : ''
  }

  get produced(): boolean {
    return this.#parsed !== null
  }

  usage(promptBytes: number): ChatUsage {
    const message = this.#parsed?.choices?.[0]?.message
    const bytes = (typeof message?.content === 'string' ? message.content.length : 0) + (message?.tool_calls ? JSON.stringify(message.tool_calls).length : 0)
    this.#usage = meteredUsage(this.#parsed?.usage, promptBytes, Math.ceil(bytes / 4))
    return this.#usage
  }

  /** The usage the answer is billed by when another codec measured it (responses-via-anthropic.ts). */
  bill(usage: ChatUsage): void {
    this.#usage = usage
  }

  kept(): KeptAnswer {
    if (this.#answer !== null) return this.#answer
    const completion = this.#parsed!
    const output = outputItems(completion)
    const usage = responsesUsage(this.#usage ?? meteredUsage(completion.usage, 0, 0), completion.usage)
    const response = responseObject(this.#meta, outcomeOf(completion.choices?.[0]?.finish_reason), output, usage)
    this.#answer = { response, output }
    return this.#answer
  }

  complete(trace: Record<string, unknown>): string {
    return JSON.stringify({ ...this.kept().response, x_svc_trace: trace })
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderError(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }
}
