/**
 * An OpenAI chat stream translated, chunk by chunk, into the Responses stream (issue 32): response.created and
 * response.in_progress, then one output item at a time (output_item.added, its content_part / deltas / .done
 * events, output_item.done), then response.completed (or response.incomplete), every event numbered by
 * `sequence_number`. The provider's usage comes after its finish chunk, so the last event is written by
 * end(), which is where the trace and the durable charge wait.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import { ChatChunkStreamCodec } from './chat-chunk-stream.js'
import { isHeaderSafeId } from './codec.js'
import { feedUnnamed, holdCall, UNNAMED_NAMED, UNNAMED_WAITS, type HeldCall, type UnnamedCall } from './held-tool-calls.js'
import { openAiErrorOf } from './openai-error.js'
import { customInput, functionCallItem, NO_NAMES, outcomeOf, textPart, type KeptAnswer, type ResponsesCodec } from './responses-json-translation.js'
import { failureEvents, newId, responseObject, responsesUsage, sseEvent, streamError, type ResponseMeta } from './responses-wire.js'
import { clientTool, type ToolNames } from './tool-names.js'

type Json = Record<string, any>

const EMPTY_TEXT_PART = '{"type":"output_text","text":"","annotations":[]}'
const EMPTY_REASONING_PART = '{"type":"reasoning_text","text":""}'

const NONE = 0
const TEXT = 1
const REASONING = 2
const TOOL = 3

/**
 * The translator's state; pure: OpenAI chunk objects in, Responses event text out.
 *
 * Parallel tool calls: OpenAI may interleave their chunks (index 0, 1, 0, 1 …), but a Responses stream adds,
 * fills and finishes one output item before the next. The first call streams live; a chunk of another call
 * while it is open is held (call id, name, arguments as they came) unless the open call's arguments already
 * form a whole JSON value, in which case its item is done and the new call streams live in turn. Held calls
 * are written, in the order they first appeared, as whole items (added, one arguments delta, done) when the
 * open item closes: at the finish chunk, or when text follows.
 */
export class ResponsesStreamTranslator {
  /** The provider's id of the completion (SVC-Res-Key). */
  id = ''
  started = false
  /** Chunks that carried content (the usage estimate when the provider reports none). */
  contentChunks = 0
  usage: Json | null = null
  /** An OpenAI-style `{"error":…}` chunk the provider sent mid-stream: the stream ends in response.failed. */
  error: Json | null = null
  /** Output items done so far. */
  readonly output: Json[] = []
  #finish: unknown = null
  #seq = 0
  #kind = NONE
  /** The open item: its output index, id, and text or arguments so far. */
  #item: Json | null = null
  #whereText = ''
  #text = ''
  /** The OpenAI index of the tool call whose item is open. */
  #tool = -1
  #held: Map<number, HeldCall> | null = null
  /** A tool call waiting for its name (held-tool-calls.ts): its item is added once the name comes. */
  #unnamed: UnnamedCall | null = null
  readonly #meta: ResponseMeta
  readonly #names: ToolNames

  constructor(meta: ResponseMeta, names: ToolNames = NO_NAMES) {
    this.#meta = meta
    this.#names = names
  }

  /** The sequence number the next event gets. */
  get sequence(): number {
    return this.#seq
  }

  /** A finish_reason arrived: the answer is whole. */
  get finished(): boolean {
    return this.#finish !== null
  }

  /** Responses events for one parsed OpenAI chunk. */
  chunk(c: Json): string {
    let out = ''
    if (!this.started) out += this.#start(c)
    if (c.usage !== null && typeof c.usage === 'object') this.usage = c.usage
    const choice = Array.isArray(c.choices) ? c.choices[0] : undefined
    if (choice === undefined || choice === null) return out
    const delta = choice.delta
    if (delta !== null && typeof delta === 'object') {
      const reasoning = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : delta.reasoning
      if (typeof reasoning === 'string' && reasoning !== '') out += this.#textDelta(REASONING, reasoning)
      let text = typeof delta.content === 'string' ? delta.content : ''
      if (typeof delta.refusal === 'string') text += delta.refusal
      if (text !== '') out += this.#textDelta(TEXT, text)
      if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls) out += this.#toolCall(call)
    }
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) {
      this.#finish = choice.finish_reason
      out += this.#close()
    }
    return out
  }

  /** Finishes the open item (and writes the held calls): the output is whole after it. */
  closeOpen(): string {
    return this.#close()
  }

  /** The response object as it stands, with `usage` (null while in progress). */
  response(usage: Json | null, status: 'in_progress' | null = null): Json {
    const outcome = status === 'in_progress' ? { status } : outcomeOf(this.#finish)
    return responseObject(this.#meta, outcome, this.output, usage)
  }

  /**
   * The last events of a whole stream: the open item closed, then response.completed (or .incomplete) with
   * `trace`; or, when the provider reported an error mid-stream, the failure events (the trace names the request).
   */
  end(usage: Json, trace: Record<string, unknown>): string {
    if (this.error !== null) {
      const e = this.error
      const message = typeof e.message === 'string' ? e.message : 'the provider reported an error mid-stream'
      const out = this.started ? '' : this.#start({})
      const requestId = typeof trace.request_id === 'string' ? trace.request_id : ''
      const failure = failureEvents(this.response(usage), this.#seq, { code: 'provider_error', type: 'provider_error', message }, requestId, trace)
      this.#seq += 2
      return out + failure
    }
    let out = this.started ? '' : this.#start({})
    out += this.#close()
    const response = this.response(usage)
    const type = response.status === 'incomplete' ? 'response.incomplete' : 'response.completed'
    return out + sseEvent(type, JSON.stringify({ type, sequence_number: this.#next(), response: { ...response, x_svc_trace: trace } }))
  }

  /** The events that end a stream that broke: response.failed once the response began, then an error event. */
  fail(err: RouterError, requestId: string, usage: Json | null, trace: Record<string, unknown>): string {
    const response = this.started ? this.response(usage) : null
    const out = failureEvents(response, this.#seq, streamError(err), requestId, trace)
    this.#seq += response === null ? 1 : 2
    return out
  }

  #next(): number {
    return this.#seq++
  }

  #event(type: string, body: string): string {
    return sseEvent(type, `{"type":"${type}","sequence_number":${this.#next()},${body}}`)
  }

  #start(c: Json): string {
    this.started = true
    if (typeof c.id === 'string') this.id = c.id
    const response = JSON.stringify(this.response(null, 'in_progress'))
    return this.#event('response.created', `"response":${response}`) + this.#event('response.in_progress', `"response":${response}`)
  }

  #open(kind: number, item: Json): string {
    const out = this.#close()
    this.#kind = kind
    this.#item = item
    this.#text = ''
    this.#whereText = `"item_id":${JSON.stringify(item.id)},"output_index":${this.output.length}`
    return out + this.#event('response.output_item.added', `"output_index":${this.output.length},"item":${JSON.stringify(item)}`)
  }

  #textDelta(kind: number, text: string): string {
    let out = this.#unnamed === null ? '' : this.#addUnnamed()
    if (this.#kind !== kind) {
      const item = kind === TEXT
        ? { id: newId('msg_'), type: 'message', status: 'in_progress', role: 'assistant', content: [] }
        : { id: newId('rs_'), type: 'reasoning', summary: [], content: [] }
      const part = kind === TEXT ? EMPTY_TEXT_PART : EMPTY_REASONING_PART
      out += this.#open(kind, item)
      out += this.#event('response.content_part.added', `${this.#where()},"content_index":0,"part":${part}`)
    }
    this.contentChunks++
    this.#text += text
    const type = kind === TEXT ? 'response.output_text.delta' : 'response.reasoning_text.delta'
    const logprobs = kind === TEXT ? ',"logprobs":[]' : ''
    return out + this.#event(type, `${this.#where()},"content_index":0,"delta":${JSON.stringify(text)}${logprobs}`)
  }

  /** The open item's `item_id` and `output_index` members, made once per item (every delta repeats them). */
  #where(): string {
    return this.#whereText
  }

  /** Finishes the open item, then writes the held tool calls, each a whole item. */
  #close(): string {
    let out = this.#unnamed === null ? '' : this.#addUnnamed()
    if (this.#kind === NONE) return out
    const item = this.#item!
    const text = this.#text
    const where = this.#where()
    if (this.#kind === TOOL && item.type === 'custom_tool_call') {
      // A custom tool's input is inside the JSON arguments of the function it went as: sent whole once known.
      const input = customInput(text)
      item.input = input
      item.status = 'completed'
      out += this.#event('response.custom_tool_call_input.delta', `${where},"delta":${JSON.stringify(input)}`)
      out += this.#event('response.custom_tool_call_input.done', `${where},"input":${JSON.stringify(input)}`)
    } else if (this.#kind === TOOL) {
      item.arguments = text
      item.status = 'completed'
      out += this.#event('response.function_call_arguments.done', `${where},"name":${JSON.stringify(item.name)},"arguments":${JSON.stringify(text)}`)
    } else {
      const part = this.#kind === TEXT ? textPart(text) : { type: 'reasoning_text', text }
      const done = this.#kind === TEXT ? 'response.output_text.done' : 'response.reasoning_text.done'
      out += this.#event(done, `${where},"content_index":0,"text":${JSON.stringify(text)}${this.#kind === TEXT ? ',"logprobs":[]' : ''}`)
      out += this.#event('response.content_part.done', `${where},"content_index":0,"part":${JSON.stringify(part)}`)
      item.content = [part]
      if (this.#kind === TEXT) item.status = 'completed'
    }
    out += this.#event('response.output_item.done', `"output_index":${this.output.length},"item":${JSON.stringify(item)}`)
    this.output.push(item)
    this.#kind = NONE
    this.#item = null
    this.#text = ''
    this.#tool = -1
    const held = this.#held
    if (held === null) return out
    this.#held = null
    for (const [index, call] of held) {
      out += this.#openTool(call.id === '' ? `call_${index}` : call.id, call.name)
      if (call.args !== '') out += this.#argsDelta(call.args)
      out += this.#close()
    }
    return out
  }

  /** The call still waiting for its name is added as it stands (its arguments so far in one delta). */
  #addUnnamed(): string {
    const call = this.#unnamed!
    this.#unnamed = null
    let out = this.#openTool(call.id === '' ? `call_${call.index}` : call.id, call.name)
    this.#tool = call.index
    if (call.args !== '') out += this.#argsDelta(call.args)
    return out
  }

  #openTool(callId: string, name: string): string {
    return this.#open(TOOL, functionCallItem('in_progress', callId, name, '', this.#names))
  }

  #argsDelta(args: string): string {
    this.contentChunks++
    this.#text += args
    if (this.#item!.type === 'custom_tool_call') return ''
    return this.#event('response.function_call_arguments.delta', `${this.#where()},"delta":${JSON.stringify(args)}`)
  }

  #toolCall(call: Json): string {
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
    if (this.#kind === TOOL && this.#tool !== index) {
      const held = holdCall(this.#held, index, call, fn, args, this.#text)
      if (held !== null) {
        this.#held = held
        return out
      }
    }
    if (this.#kind !== TOOL || this.#tool !== index) {
      if (name === '') {
        // Its item waits for the name; what was open is done.
        out += this.#close()
        this.#unnamed = { index, id: typeof call.id === 'string' ? call.id : '', name: '', args }
        return out
      }
      out += this.#openTool(typeof call.id === 'string' && call.id !== '' ? call.id : `call_${index}`, name)
      this.#tool = index
    } else if (typeof fn.name === 'string' && fn.name !== '' && this.#item!.name === '') {
      const tool = clientTool(fn.name, this.#names)
      this.#item!.name = tool.name
      if (tool.namespace !== undefined) this.#item!.namespace = tool.namespace
    }
    if (args !== '') out += this.#argsDelta(args)
    return out
  }
}

/** An OpenAI SSE answer to a translated `stream: true` Responses request, relayed as Responses SSE. */
export class ResponsesTranslatedStreamCodec extends ChatChunkStreamCodec<ResponsesStreamTranslator> implements ResponsesCodec {
  /** Events of the item kept() finished, sent by complete(). */
  #closing = ''
  #usage: ChatUsage | null = null

  constructor(meta: ResponseMeta, names: ToolNames = NO_NAMES) {
    super(new ResponsesStreamTranslator(meta, names))
  }

  get id(): string {
    return isHeaderSafeId(this.translator.id) ? this.translator.id : ''
  }

  usage(promptBytes: number): ChatUsage {
    this.#usage = meteredUsage(this.translator.usage, promptBytes, this.translator.contentChunks)
    return this.#usage
  }

  /** The usage the answer is billed by when another codec measured it (responses-via-anthropic.ts). */
  bill(usage: ChatUsage): void {
    this.#usage = usage
  }

  #responsesUsage(): Json | null {
    return this.#usage === null ? null : responsesUsage(this.#usage, this.translator.usage)
  }

  kept(): KeptAnswer | null {
    if (this.translator.error !== null) return null
    // Asked before complete(): the open item is finished here, its events sent by complete().
    this.#closing += this.translator.closeOpen()
    const response = this.translator.response(this.#responsesUsage())
    return { response, output: this.translator.output }
  }

  complete(trace: Record<string, unknown>): string {
    const closing = this.#closing
    this.#closing = ''
    return closing + this.translator.end(this.#responsesUsage() ?? responsesUsage(meteredUsage(this.translator.usage, 0, 0), this.translator.usage), trace)
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return this.translator.fail(err, requestId, this.#responsesUsage(), trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string | Buffer {
    return openAiErrorOf(status, body, requestId)
  }
}
