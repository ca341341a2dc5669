/**
 * Anthropic answers translated into OpenAI chat answers, for a chat request served by a provider that speaks
 * only Anthropic's format (DESIGN.md §4): the JSON message as a chat.completion, the SSE stream as
 * chat.completion.chunk events. The finish chunk, the usage chunk (when the client asked) and the trace chunk
 * are written by complete(), then `data: [DONE]`, as on a native chat stream.
 */
import type { ChatUsage } from '../billing/cost.js'
import { usageCount } from '../billing/usage-bound.js'
import { renderError, type RouterError } from '../errors.js'
import { chatUsageOf, meteredAnthropicStreamUsage, meteredAnthropicUsage } from './anthropic-wire.js'
import { finishReason } from './chat-request-translation.js'
import { answerObject, JsonAnswerCodec } from './json-answer.js'
import { openAiEnvelopeOf } from './openai-error.js'
import { payloadKind, type SseFramer } from './sse-framing.js'
import { SseTranslationCodec } from './sse-translation-codec.js'

type Json = Record<string, any>


function now(): number {
  return Math.floor(Date.now() / 1000)
}

/** The chat usage object of an Anthropic usage object (cache tokens are prompt tokens; reads are OpenAI's cached_tokens). */
function chatUsage(u: Json | null | undefined): Json | undefined {
  const usage = u === null || u === undefined ? null : chatUsageOf(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens)
  if (usage === null) return undefined
  const out: Json = { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens }
  const read = u!.cache_read_input_tokens
  if (usageCount(read) > 0) out.prompt_tokens_details = { cached_tokens: read }
  return out
}

/** An Anthropic JSON message answering a translated chat request. */
export class ChatFromAnthropicJsonCodec extends JsonAnswerCodec {
  #parsed: Json | null = null
  readonly #model: string

  constructor(model: string) {
    super()
    this.#model = model
  }

  read(body: Buffer): boolean {
    this.#parsed = answerObject(body, 'content')
    return this.#parsed !== null
  }

  get id(): string {
    return typeof this.#parsed?.id === 'string' ? this.#parsed.id : ''
  }

  get produced(): boolean {
    return this.#parsed !== null
  }

  usage(promptBytes: number): ChatUsage {
    return meteredAnthropicUsage(this.#parsed?.usage, promptBytes, Math.ceil(JSON.stringify(this.#parsed?.content ?? []).length / 4))
  }

  complete(trace: Record<string, unknown>): string {
    const m = this.#parsed!
    let text = ''
    const calls: Json[] = []
    for (const block of m.content as Json[]) {
      if (block?.type === 'text') text += block.text
      else if (block?.type === 'tool_use') calls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } })
    }
    const message: Json = { role: 'assistant', content: text === '' && calls.length > 0 ? null : text, refusal: null }
    if (calls.length > 0) message.tool_calls = calls
    const out: Json = {
      id: m.id,
      object: 'chat.completion',
      created: now(),
      model: this.#model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(m.stop_reason) }],
    }
    const usage = chatUsage(m.usage)
    if (usage !== undefined) out.usage = usage
    out.x_svc_trace = trace
    return JSON.stringify(out)
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderError(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string {
    return openAiEnvelopeOf(status, body, requestId)
  }
}

/** An Anthropic SSE stream answering a translated `stream: true` chat request, relayed as chat chunks. */
export class ChatFromAnthropicStreamCodec extends SseTranslationCodec {
  #id = ''
  #usage: Json | null = null
  #stop: unknown = null
  /** The provider's message_stop arrived. */
  #stopped = false
  /** The provider's own error event arrived (overloaded_error…): the stream failed there. */
  #errored = false
  #events = 0
  /** message_delta brought the usage: its output_tokens is the whole count, not message_start's early one. */
  #finalUsage = false
  #tool = -1
  readonly #model: string
  readonly #clientWantsUsage: boolean

  constructor(model: string, clientWantsUsage: boolean) {
    super()
    this.#model = model
    this.#clientWantsUsage = clientWantsUsage
  }

  get ended(): boolean {
    return !this.streamError && (this.#stopped || this.#stop !== null)
  }

  get terminated(): boolean {
    return this.#stopped || this.#errored
  }

  get id(): string {
    return this.#id
  }

  get produced(): boolean {
    return this.#events > 0
  }

  usage(promptBytes: number): ChatUsage {
    return meteredAnthropicStreamUsage(this.#usage, this.#finalUsage, promptBytes, Math.max(0, this.#events - 1))
  }

  complete(trace: Record<string, unknown>): string {
    let out = this.#chunk({}, finishReason(this.#stop))
    const usage = chatUsage(this.#usage)
    if (this.#clientWantsUsage && usage !== undefined) out += `data: ${JSON.stringify({ ...this.#head(), choices: [], usage })}\n\n`
    out += `data: ${JSON.stringify({ ...this.#head(), choices: [], x_svc_trace: trace })}\n\ndata: [DONE]\n\n`
    return out
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return `data: ${renderError(err, requestId, trace)}\n\n`
  }

  errorBody(status: number, body: Buffer, requestId: string): string {
    return openAiEnvelopeOf(status, body, requestId)
  }

  #head(): Json {
    return { id: this.#id, object: 'chat.completion.chunk', created: now(), model: this.#model }
  }

  #chunk(delta: Json, finish: string | null = null): string {
    return `data: ${JSON.stringify({ ...this.#head(), choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`
  }

  protected onEvent(f: SseFramer): void {
    // After message_stop or the provider's error, nothing more is read.
    if (this.#stopped || this.#errored || f.continuation || f.dataLines === 0) return
    const kind = payloadKind(f.dataSource, f.dataStart, f.dataEnd)
    if (kind === 'blank') return
    let e: Json | null = null
    if (kind === 'object') {
      try {
        e = JSON.parse(f.dataSource.toString('utf8', f.dataStart, f.dataEnd))
      } catch {}
    }
    if (e === null) {
      this.markMalformed()
      return
    }
    switch (e?.type) {
      case 'message_start':
        if (typeof e.message?.id === 'string') this.#id = e.message.id
        this.#usage = e.message?.usage ?? null
        this.#events++
        this.write(this.#chunk({ role: 'assistant', content: '' }))
        return
      case 'content_block_start':
        if (e.content_block?.type === 'tool_use') {
          this.#tool++
          this.#events++
          const call = { index: this.#tool, id: e.content_block.id, type: 'function', function: { name: e.content_block.name, arguments: '' } }
          this.write(this.#chunk({ tool_calls: [call] }))
        }
        return
      case 'content_block_delta': {
        const d = e.delta
        this.#events++
        if (d?.type === 'text_delta') this.write(this.#chunk({ content: d.text }))
        else if (d?.type === 'input_json_delta') this.write(this.#chunk({ tool_calls: [{ index: this.#tool, function: { arguments: d.partial_json } }] }))
        else if (d?.type === 'thinking_delta') this.write(this.#chunk({ reasoning_content: d.thinking }))
        return
      }
      case 'message_stop':
        this.#stopped = true
        return
      case 'error':
        // The provider failed (stream_error): before any chunk a miss the next candidate answers; after, the
        // answer ends with the router's error event, billed for what came.
        this.#errored = true
        this.markMalformed()
        return
      case 'message_delta':
        this.#stop = e.delta?.stop_reason ?? null
        if (e.usage !== null && typeof e.usage === 'object') {
          this.#usage = { ...this.#usage, ...e.usage }
          this.#finalUsage = true
        }
        return
    }
  }
}
