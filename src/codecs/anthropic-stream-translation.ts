/**
 * An OpenAI chat stream translated, chunk by chunk, into Anthropic's Messages stream (DESIGN.md §4): a
 * message_start, then per content block a content_block_start, its deltas (text_delta, thinking_delta,
 * input_json_delta with the partial JSON as it arrives) and a content_block_stop, then message_delta (stop
 * reason, usage) and message_stop. The provider's usage comes after its finish chunk, so message_delta and
 * message_stop are written by complete(), which is also where the trace and the durable charge wait.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import { usageCount } from '../billing/usage-bound.js'
import type { RouterError } from '../errors.js'
import { anthropicErrorEvent, anthropicErrorOf, anthropicUsageOf } from './anthropic-wire.js'
import { ChatChunkStreamCodec } from './chat-chunk-stream.js'
import { feedUnnamed, holdCall, UNNAMED_NAMED, UNNAMED_WAITS, type HeldCall, type UnnamedCall } from './held-tool-calls.js'
import { longestStop, matchedStop, stopReason, type ToolNames } from './messages-request-translation.js'

const NONE = 0
const TEXT = 1
const THINKING = 2
const TOOL = 3

function event(name: string, data: string): string {
  return `event: ${name}\ndata: ${data}\n\n`
}

/**
 * The translator's state; pure: OpenAI chunk objects in, Anthropic event text out.
 *
 * Parallel tool calls: OpenAI may interleave their chunks (index 0, 1, 0, 1 …), but an Anthropic block is
 * started, filled and stopped before the next one starts. The first call streams live in its block; a chunk
 * of another call while that block is open is held (id, name and the arguments as they came), unless the
 * open call's arguments already form a whole JSON value, in which case its block stops and the new call
 * streams live in turn. Held calls are written, in the order they first appeared, as a block each (start, one
 * input_json_delta with their arguments joined, stop) when the open block closes: at the finish chunk, or
 * when text follows. Ids, names and the JSON text are kept exactly.
 */
export class AnthropicStreamTranslator {
  id = ''
  started = false
  /** Chunks that carried content (the usage estimate when the provider reports none). */
  contentChunks = 0
  usage: Record<string, any> | null = null
  /** An OpenAI-style `{"error":…}` chunk the provider sent mid-stream: the stream ends in event: error. */
  error: Record<string, any> | null = null
  #finish: unknown = null
  #stopped: string | null = null
  #refused = false
  #block = NONE
  #index = -1
  /** The OpenAI index of the tool call whose block is open, and its arguments so far. */
  #tool = -1
  #args = ''
  /** Tool calls seen while another's block was open, by OpenAI index, in order of appearance. */
  #held: Map<number, HeldCall> | null = null
  /** A tool call waiting for its name (held-tool-calls.ts): its block starts once the name comes. */
  #unnamed: UnnamedCall | null = null
  /** The end of the text so far, as long as the longest stop sequence (matchedStop()). */
  #tail = ''
  readonly #model: string
  readonly #names: ToolNames
  readonly #stops: readonly string[]
  readonly #tailLength: number

  constructor(model: string, names: ToolNames, stops: readonly string[] = []) {
    this.#model = model
    this.#names = names
    this.#stops = stops
    this.#tailLength = longestStop(stops)
  }

  /** Anthropic events for one parsed OpenAI chunk. */
  chunk(c: Record<string, any>): string {
    let out = ''
    if (!this.started) out += this.#start(c)
    if (c.usage !== null && typeof c.usage === 'object') this.usage = c.usage
    const choice = Array.isArray(c.choices) ? c.choices[0] : undefined
    if (choice === undefined || choice === null) return out
    const delta = choice.delta
    if (delta !== null && typeof delta === 'object') {
      const thinking = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : delta.reasoning
      if (typeof thinking === 'string' && thinking !== '') {
        if (this.#block !== THINKING) out += this.#open(THINKING, '{"type":"thinking","thinking":"","signature":""}')
        out += this.#delta(`{"type":"thinking_delta","thinking":${JSON.stringify(thinking)}}`)
      }
      let text = typeof delta.content === 'string' ? delta.content : ''
      if (typeof delta.refusal === 'string' && delta.refusal !== '') {
        this.#refused = true
        text += delta.refusal
      }
      if (text !== '') {
        if (this.#block !== TEXT) out += this.#open(TEXT, '{"type":"text","text":""}')
        out += this.#delta(`{"type":"text_delta","text":${JSON.stringify(text)}}`)
        if (this.#tailLength > 0) this.#tail = (this.#tail + text).slice(-this.#tailLength)
      }
      if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls) out += this.#toolCall(call)
    }
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) {
      this.#finish = choice.finish_reason
      this.#stopped = matchedStop(choice.finish_reason, choice, this.#tail, this.#stops)
      out += this.#close()
    }
    return out
  }

  /** A finish_reason arrived: the answer is whole. */
  get finished(): boolean {
    return this.#finish !== null
  }

  /** The end of a completed stream: open block closed, message_delta, message_stop with `extra` members. */
  end(extra: string): string {
    if (this.error !== null) {
      const e = this.error
      const error = { type: typeof e.type === 'string' ? e.type : 'api_error', message: typeof e.message === 'string' ? e.message : 'the provider reported an error mid-stream' }
      return event('error', `{"type":"error","error":${JSON.stringify(error)}${extra}}`)
    }
    let out = this.started ? '' : this.#start({})
    out += this.#close()
    const usage = anthropicUsageOf(this.usage, null, this.contentChunks)
    const delta = { type: 'message_delta', delta: { stop_reason: stopReason(this.#finish, this.#refused, this.#stopped), stop_sequence: this.#stopped }, usage }
    out += event('message_delta', JSON.stringify(delta))
    out += event('message_stop', `{"type":"message_stop"${extra}}`)
    return out
  }

  #start(c: Record<string, any>): string {
    this.started = true
    if (typeof c.id === 'string') this.id = c.id
    const input = Math.max(0, usageCount(c.usage?.prompt_tokens))
    const message = {
      id: this.id,
      type: 'message',
      role: 'assistant',
      model: this.#model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: input, output_tokens: 0 },
    }
    return event('message_start', JSON.stringify({ type: 'message_start', message }))
  }

  #open(kind: number, block: string): string {
    const out = this.#close()
    this.#block = kind
    this.#index++
    return out + event('content_block_start', `{"type":"content_block_start","index":${this.#index},"content_block":${block}}`)
  }

  #delta(delta: string): string {
    this.contentChunks++
    return event('content_block_delta', `{"type":"content_block_delta","index":${this.#index},"delta":${delta}}`)
  }

  /** Stops the open block, then writes the held tool calls, each a whole block. */
  #close(): string {
    let out = this.#unnamed === null ? '' : this.#addUnnamed()
    if (this.#block === NONE) return out
    this.#block = NONE
    this.#tool = -1
    this.#args = ''
    out += event('content_block_stop', `{"type":"content_block_stop","index":${this.#index}}`)
    const held = this.#held
    if (held === null) return out
    this.#held = null
    for (const [index, call] of held) {
      this.#index++
      const block = this.#toolBlock(call.id === '' ? `toolu_${index}` : call.id, call.name)
      out += event('content_block_start', `{"type":"content_block_start","index":${this.#index},"content_block":${block}}`)
      if (call.args !== '') out += this.#delta(`{"type":"input_json_delta","partial_json":${JSON.stringify(call.args)}}`)
      out += event('content_block_stop', `{"type":"content_block_stop","index":${this.#index}}`)
    }
    return out
  }

  #toolBlock(id: string, name: string): string {
    return JSON.stringify({ type: 'tool_use', id, name: this.#names.get(name)?.name ?? name, input: {} })
  }

  /** The call still waiting for its name starts its block as it stands (its arguments so far in one delta). */
  #addUnnamed(): string {
    const call = this.#unnamed!
    this.#unnamed = null
    let out = this.#open(TOOL, this.#toolBlock(call.id === '' ? `toolu_${call.index}` : call.id, call.name))
    this.#tool = call.index
    if (call.args !== '') out += this.#toolArgs(call.args)
    return out
  }

  #toolArgs(args: string): string {
    this.#args += args
    return this.#delta(`{"type":"input_json_delta","partial_json":${JSON.stringify(args)}}`)
  }

  #toolCall(call: Record<string, any>): string {
    const index = typeof call?.index === 'number' ? call.index : 0
    const fn = call?.function ?? {}
    const args = typeof fn.arguments === 'string' ? fn.arguments : ''
    const name = typeof fn.name === 'string' ? fn.name : ''
    let out = ''
    const unnamed = this.#unnamed
    if (unnamed !== null) {
      const step = feedUnnamed(unnamed, index, call, args, name)
      if (step === UNNAMED_WAITS) return ''
      if (step === UNNAMED_NAMED) return this.#addUnnamed()
      out += this.#addUnnamed()
    }
    if (this.#block === TOOL && this.#tool !== index) {
      const held = holdCall(this.#held, index, call, fn, args, this.#args)
      if (held !== null) {
        this.#held = held
        return out
      }
    }
    if (this.#block !== TOOL || this.#tool !== index) {
      if (name === '') {
        // Its block waits for the name; the open one is whole.
        out += this.#close()
        this.#unnamed = { index, id: typeof call.id === 'string' ? call.id : '', name: '', args }
        return out
      }
      // Anthropic blocks are sequential: the next call opens the next block (the open one is whole).
      out += this.#open(TOOL, this.#toolBlock(typeof call.id === 'string' ? call.id : `toolu_${index}`, name))
      this.#tool = index
    }
    if (args !== '') out += this.#toolArgs(args)
    return out
  }
}

/** An OpenAI SSE answer to a translated `stream: true` messages request, relayed as Anthropic SSE. */
export class AnthropicTranslatedStreamCodec extends ChatChunkStreamCodec<AnthropicStreamTranslator> {
  constructor(model: string, names: ToolNames, stops: readonly string[] = []) {
    super(new AnthropicStreamTranslator(model, names, stops))
  }

  get id(): string {
    return this.translator.id
  }

  usage(promptBytes: number): ChatUsage {
    return meteredUsage(this.translator.usage, promptBytes, this.translator.contentChunks)
  }

  complete(trace: Record<string, unknown>): string {
    return this.translator.end(',"x_svc_trace":' + JSON.stringify(trace))
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return anthropicErrorEvent(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string {
    return anthropicErrorOf(status, body, requestId)
  }
}
