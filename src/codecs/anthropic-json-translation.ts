/**
 * An OpenAI chat completion translated into an Anthropic message (DESIGN.md §4 `/v1/messages`): text, thinking
 * and tool_use blocks (tool input parsed, names mapped back), stop_reason, and usage with the cached prompt
 * tokens reported as Anthropic's cache_read_input_tokens.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import { anthropicErrorOf, anthropicUsageOf, renderAnthropicError } from './anthropic-wire.js'
import { answerObject, firstMessageEstimate, JsonAnswerCodec } from './json-answer.js'
import { matchedStop, stopReason, type ToolNames } from './messages-request-translation.js'

type Json = Record<string, any>

function parseInput(args: unknown): unknown {
  if (typeof args !== 'string' || args === '') return {}
  try {
    return JSON.parse(args)
  } catch {
    // A model's malformed arguments are still the model's: kept as text rather than lost.
    return { _raw: args }
  }
}

/** The Anthropic message for an OpenAI chat completion object. */
export function toAnthropicMessage(completion: Json, model: string, names: ToolNames, stops: readonly string[] = []): Json {
  const choice = Array.isArray(completion.choices) ? completion.choices[0] : undefined
  const message = choice?.message ?? {}
  const content: Json[] = []
  const thinking = typeof message.reasoning_content === 'string' ? message.reasoning_content : message.reasoning
  if (typeof thinking === 'string' && thinking !== '') content.push({ type: 'thinking', thinking, signature: '' })
  const refused = typeof message.refusal === 'string' && message.refusal !== ''
  const text = typeof message.content === 'string' ? message.content : ''
  if (text !== '' || refused) content.push({ type: 'text', text: refused ? text + message.refusal : text })
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      const name = String(call?.function?.name ?? '')
      content.push({ type: 'tool_use', id: call?.id, name: names.get(name)?.name ?? name, input: parseInput(call?.function?.arguments) })
    }
  }
  const usage = anthropicUsageOf(completion.usage, 0, 0)
  const stopped = matchedStop(choice?.finish_reason, choice, text, stops)
  return {
    id: completion.id,
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: stopReason(choice?.finish_reason, refused, stopped),
    stop_sequence: stopped,
    usage,
  }
}

/** A JSON answer of an OpenAI provider to a translated messages request. */
export class AnthropicTranslatedJsonCodec extends JsonAnswerCodec {
  #parsed: Json | null = null
  readonly #model: string
  readonly #names: ToolNames
  readonly #stops: readonly string[]

  constructor(model: string, names: ToolNames, stops: readonly string[] = []) {
    super()
    this.#model = model
    this.#names = names
    this.#stops = stops
  }

  read(body: Buffer): boolean {
    this.#parsed = answerObject(body, 'choices')
    return this.#parsed !== null
  }

  get id(): string {
    const id = this.#parsed?.id
    return typeof id === 'string' ? id : ''
  }

  get produced(): boolean {
    return this.#parsed !== null
  }

  usage(promptBytes: number): ChatUsage {
    return meteredUsage(this.#parsed?.usage, promptBytes, firstMessageEstimate(this.#parsed))
  }

  complete(trace: Record<string, unknown>): string {
    return JSON.stringify({ ...toAnthropicMessage(this.#parsed!, this.#model, this.#names, this.#stops), x_svc_trace: trace })
  }

  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
    return renderAnthropicError(err, requestId, trace)
  }

  errorBody(status: number, body: Buffer, requestId: string): string {
    return anthropicErrorOf(status, body, requestId)
  }
}
