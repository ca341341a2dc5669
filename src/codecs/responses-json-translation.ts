/**
 * An OpenAI chat completion translated into a Responses object (issue 32): reasoning, message and
 * function_call output items, status (`incomplete` when the output bound or a content filter cut it), and
 * usage in the Responses shape.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import { renderError, type RouterError } from '../errors.js'
import { isHeaderSafeId } from './codec.js'
import { answerObject, firstMessageEstimate, JsonAnswerCodec } from './json-answer.js'
import { openAiErrorOf } from './openai-error.js'
import { newId, responseObject, responsesUsage, type Outcome, type ResponseMeta } from './responses-wire.js'
import { clientTool, type ToolNames } from './tool-names.js'

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

/** Tool names of a translation that renamed none. */
export const NO_NAMES: ToolNames = new Map()

/**
 * The input of a custom tool's call from the arguments of the function it was sent as (`{"input": "…"}`); a
 * model that wrote something else has it passed on as it wrote it.
 */
export function customInput(args: string): string {
  try {
    const v = JSON.parse(args) as unknown
    if (v !== null && typeof v === 'object' && typeof (v as Json).input === 'string') return (v as Json).input
  } catch {
    // Not JSON: the text itself.
  }
  return args
}

/**
 * A function_call output item, in progress or done, with the client's name for the tool the provider called
 * (`upstream`), and its `namespace` when the tool was one of a namespace's; a custom_tool_call item (its
 * `input` from the arguments) when the tool was a custom one.
 */
export function functionCallItem(status: string, callId: string, upstream: string, args: string, names: ToolNames): Json {
  const tool = clientTool(upstream, names)
  if (tool.custom === true) {
    const input = status === 'completed' ? customInput(args) : ''
    return tool.namespace === undefined
      ? { id: newId('ctc_'), type: 'custom_tool_call', status, call_id: callId, name: tool.name, input }
      : { id: newId('ctc_'), type: 'custom_tool_call', status, call_id: callId, name: tool.name, namespace: tool.namespace, input }
  }
  return tool.namespace === undefined
    ? { id: newId('fc_'), type: 'function_call', status, call_id: callId, name: tool.name, arguments: args }
    : { id: newId('fc_'), type: 'function_call', status, call_id: callId, name: tool.name, namespace: tool.namespace, arguments: args }
}

/** The output items of a chat completion's first choice (tool names mapped back through `names`). */
export function outputItems(completion: Json, names: ToolNames = NO_NAMES): Json[] {
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
      const callId = typeof call?.id === 'string' && call.id !== '' ? call.id : newId('call_')
      items.push(functionCallItem('completed', callId, String(fn.name ?? ''), typeof fn.arguments === 'string' ? fn.arguments : '', names))
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
export class ResponsesTranslatedJsonCodec extends JsonAnswerCodec implements ResponsesCodec {
  #parsed: Json | null = null
  #usage: ChatUsage | null = null
  #answer: KeptAnswer | null = null
  readonly #meta: ResponseMeta
  readonly #names: ToolNames

  constructor(meta: ResponseMeta, names: ToolNames = NO_NAMES) {
    super()
    this.#meta = meta
    this.#names = names
  }

  read(body: Buffer): boolean {
    this.#parsed = answerObject(body, 'choices')
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
    this.#usage = meteredUsage(this.#parsed?.usage, promptBytes, firstMessageEstimate(this.#parsed))
    return this.#usage
  }

  /** The usage the answer is billed by when another codec measured it (responses-via-anthropic.ts). */
  bill(usage: ChatUsage): void {
    this.#usage = usage
  }

  kept(): KeptAnswer {
    if (this.#answer !== null) return this.#answer
    const completion = this.#parsed!
    const output = outputItems(completion, this.#names)
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
