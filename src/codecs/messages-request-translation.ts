/**
 * An Anthropic Messages request as an OpenAI chat request, for a candidate that speaks only OpenAI's format
 * (DESIGN.md §4 `/v1/messages`). Made once per request, when the first translated candidate is planned.
 * Tool names longer than OpenAI's 64 characters (or with characters it refuses) are renamed; the mapping
 * turns them back in the answer.
 */
import { upstreamToolName as openAiName, type ToolNames } from './tool-names.js'

export type { ToolNames } from './tool-names.js'

type Json = Record<string, any>

function textOf(content: unknown): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  let text = ''
  for (const block of content) if (block?.type === 'text' && typeof block.text === 'string') text += (text === '' ? '' : '\n') + block.text
  return text
}

function imagePart(block: Json): Json | null {
  const src = block.source
  if (src?.type === 'base64') return { type: 'image_url', image_url: { url: `data:${src.media_type};base64,${src.data}` } }
  if (src?.type === 'url') return { type: 'image_url', image_url: { url: src.url } }
  return null
}

/** Block types the chat translation carries (thinking blocks it leaves out on purpose, see assistantMessage). */
const CARRIED = new Set(['text', 'image', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'])

/** Notes the block types a chat provider cannot be given (server tool calls and results, documents…). */
function noteBlocks(content: unknown, left: Set<string>): void {
  if (!Array.isArray(content)) return
  for (const block of content as Json[]) if (!CARRIED.has(block?.type)) left.add(String(block?.type))
}

function userMessages(content: unknown, out: Json[]): void {
  if (typeof content === 'string') return void out.push({ role: 'user', content })
  const parts: Json[] = []
  for (const block of content as Json[]) {
    if (block?.type === 'tool_result') {
      const text = textOf(block.content)
      // OpenAI's tool message has no error flag: the model reads it in the text.
      out.push({ role: 'tool', tool_call_id: block.tool_use_id, content: block.is_error === true ? `Error: ${text}` : text })
    } else if (block?.type === 'text') {
      parts.push({ type: 'text', text: block.text })
    } else if (block?.type === 'image') {
      const part = imagePart(block)
      if (part !== null) parts.push(part)
    }
  }
  if (parts.length > 0) out.push({ role: 'user', content: parts })
}

function assistantMessage(content: unknown, names: ToolNames): Json {
  if (typeof content === 'string') return { role: 'assistant', content }
  let text = ''
  const calls: Json[] = []
  for (const block of content as Json[]) {
    if (block?.type === 'text') text += block.text
    else if (block?.type === 'tool_use') {
      calls.push({ id: block.id, type: 'function', function: { name: openAiName(String(block.name), names), arguments: JSON.stringify(block.input ?? {}) } })
    }
    // thinking / redacted_thinking blocks are the provider's own; an OpenAI model cannot verify them.
  }
  const message: Json = { role: 'assistant', content: text === '' ? null : text }
  if (calls.length > 0) message.tool_calls = calls
  return message
}

function toolChoice(choice: Json, names: ToolNames): unknown {
  switch (choice.type) {
    case 'any':
      return 'required'
    case 'tool':
      return { type: 'function', function: { name: openAiName(String(choice.name), names) } }
    case 'none':
      return 'none'
    default:
      return 'auto'
  }
}

/** A tool the client defines itself (no type, or `custom`); any other type is one of Anthropic's server tools. */
export function isClientTool(tool: Json): boolean {
  return tool.type === undefined || tool.type === null || tool.type === 'custom'
}

/** Anthropic's effort levels as OpenAI's reasoning_effort: `max` is past OpenAI's widely accepted `high`. */
const EFFORTS: Record<string, string> = { low: 'low', medium: 'medium', high: 'high', max: 'high' }

/**
 * The reasoning_effort a request asks for, or null: `output_config.effort` when thinking is not disabled; else
 * for adaptive thinking Anthropic's default effort (high), for enabled thinking the level its budget_tokens is
 * nearest (under 4 096 low, under 16 384 medium, else high). Disabled thinking asks for none.
 */
export function reasoningEffortOf(body: Json): string | null {
  const thinking = body.thinking
  if (thinking?.type === 'disabled') return null
  const effort = body.output_config?.effort
  if (typeof effort === 'string') return EFFORTS[effort] ?? effort
  if (thinking?.type === 'adaptive') return 'high'
  if (thinking?.type === 'enabled') {
    const budget = typeof thinking.budget_tokens === 'number' ? thinking.budget_tokens : 0
    return budget < 4096 ? 'low' : budget < 16384 ? 'medium' : 'high'
  }
  return null
}

/** The JSON-schema output format a request asks for (`output_config.format`, or the older `output_format`), or null. */
export function outputFormatOf(body: Json): Json | null {
  const format = body.output_config?.format ?? body.output_format
  return format?.type === 'json_schema' && format.schema !== null && typeof format.schema === 'object' ? format : null
}

/** OpenAI's response_format for an Anthropic JSON-schema output format (OpenAI requires a name; Anthropic has none). */
function responseFormatOf(format: Json): Json {
  const schema: Json = { name: typeof format.name === 'string' ? format.name : 'response', schema: format.schema }
  if (typeof format.strict === 'boolean') schema.strict = format.strict
  return { type: 'json_schema', json_schema: schema }
}

/** Request members the translation maps, or that are the router's own: any other has no chat equivalent. */
const MAPPED = new Set([
  'model', 'messages', 'system', 'max_tokens', 'stream', 'temperature', 'top_p', 'top_k', 'stop_sequences', 'tools', 'tool_choice',
  'thinking', 'output_config', 'output_format', 'metadata', 'provider', 'verify_tee',
])

/** The translation of one request, made once: what every chat candidate gets, and the members that depend on it. */
export interface ChatTranslation {
  /** The chat body without reasoning_effort and response_format. */
  readonly chat: Json
  readonly names: ToolNames
  /** What no chat provider gets of the request (server tools, blocks without a chat equivalent). */
  readonly notes: readonly string[]
  /** Set when the client forces a tool no chat provider has: such a candidate cannot serve the request. */
  readonly refusal: string | null
  readonly reasoningEffort: string | null
  readonly responseFormat: Json | null
}

/** The OpenAI chat translation of an Anthropic request body (already validated by the surface). */
export function toOpenAiChat(body: Json): ChatTranslation {
  const names: ToolNames = new Map()
  const messages: Json[] = []
  const notes: string[] = []
  const left = new Set<string>()
  const system = textOf(body.system)
  if (system !== '') messages.push({ role: 'system', content: system })
  for (const m of body.messages as Json[]) {
    noteBlocks(m.content, left)
    if (m.role === 'assistant') messages.push(assistantMessage(m.content, names))
    // A system turn stays where it is in the conversation (Claude Code's mid-conversation system messages).
    else if (m.role === 'system') messages.push({ role: 'system', content: textOf(m.content) })
    else userMessages(m.content, messages)
  }
  if (left.size > 0) notes.push(`content blocks of type ${[...left].join(', ')} have no chat equivalent and were not sent`)
  const unmapped = Object.keys(body).filter((key) => !MAPPED.has(key))
  if (unmapped.length > 0) notes.push(`members with no chat equivalent were not sent: ${unmapped.join(', ')}`)
  const out: Json = { model: body.model, messages, max_tokens: body.max_tokens }
  if (body.stream === true) {
    out.stream = true
    out.stream_options = { include_usage: true }
  }
  for (const key of ['temperature', 'top_p', 'top_k'] as const) if (body[key] !== undefined && body[key] !== null) out[key] = body[key]
  if (Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0) out.stop = body.stop_sequences
  const server: string[] = []
  if (Array.isArray(body.tools)) {
    const tools: Json[] = []
    for (const t of body.tools as Json[]) {
      if (!isClientTool(t)) {
        server.push(typeof t.name === 'string' ? `${t.name} (${t.type})` : String(t.type))
        continue
      }
      tools.push({
        type: 'function',
        function: { name: openAiName(String(t.name), names), description: t.description, parameters: t.input_schema ?? { type: 'object' } },
      })
    }
    if (tools.length > 0) out.tools = tools
  }
  if (server.length > 0) notes.push(`Anthropic server tools are not available from a chat provider and were not sent: ${server.join(', ')}`)
  let refusal: string | null = null
  const choice = body.tool_choice
  if (choice !== undefined && choice !== null) {
    const forced = choice.type === 'tool' ? (body.tools as Json[] | undefined)?.find((t) => t.name === choice.name) : undefined
    if (forced !== undefined && !isClientTool(forced)) {
      refusal = `tool_choice forces the server tool ${JSON.stringify(choice.name)} (${forced.type}), which a chat provider does not have`
    } else if (out.tools === undefined && choice.type === 'any') {
      refusal = 'tool_choice "any" forces a tool, and no tool a chat provider can call was given'
    } else if (out.tools !== undefined) {
      // Without tools there is nothing to choose, and OpenAI refuses a tool_choice without tools.
      out.tool_choice = toolChoice(choice, names)
      if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false
    }
  }
  const user = body.metadata?.user_id
  if (typeof user === 'string') out.user = user
  const format = outputFormatOf(body)
  return { chat: out, names, notes, refusal, reasoningEffort: reasoningEffortOf(body), responseFormat: format === null ? null : responseFormatOf(format) }
}

/**
 * The stop sequence an OpenAI answer that finished with "stop" stopped on, or null. OpenAI itself says only
 * "stop", for the end of the turn and a stop sequence alike, and drops the sequence from the text, so:
 * 1. a choice that names the matched sequence (vLLM's `stop_reason`, SGLang's `matched_stop`) is believed when
 *    that string is one of the request's `stop_sequences` (a token id or an EOS string is not);
 * 2. otherwise, a text that ends with one of them (providers that keep the sequence in the output) stopped on
 *    it, the longest one when several match;
 * 3. otherwise the answer is an `end_turn`: nothing knowable tells a stop sequence from the end of the turn,
 *    and a guessed `stop_sequence` would be a made-up fact.
 */
export function matchedStop(finish: unknown, choice: Json | null | undefined, text: string, stops: readonly string[]): string | null {
  if (finish !== 'stop' || stops.length === 0) return null
  const named = typeof choice?.stop_reason === 'string' ? choice.stop_reason : choice?.matched_stop
  if (typeof named === 'string' && stops.includes(named)) return named
  let best: string | null = null
  for (const s of stops) if (s !== '' && text.endsWith(s) && (best === null || s.length > best.length)) best = s
  return best
}

/** The longest of the request's stop sequences: how much of a streamed text's tail matchedStop() needs. */
export function longestStop(stops: readonly string[]): number {
  let n = 0
  for (const s of stops) if (s.length > n) n = s.length
  return n
}

/** The request's `stop_sequences` (validated by the surface), or none. */
export function stopSequencesOf(body: Json): readonly string[] {
  return Array.isArray(body.stop_sequences) ? body.stop_sequences : NO_STOPS
}

const NO_STOPS: readonly string[] = []

/** Anthropic's stop_reason for an OpenAI finish_reason (`stopped`: matchedStop() found the sequence). */
export function stopReason(finish: unknown, refused: boolean, stopped: string | null = null): string {
  if (refused) return 'refusal'
  if (stopped !== null) return 'stop_sequence'
  switch (finish) {
    case 'length':
      return 'max_tokens'
    case 'tool_calls':
    case 'function_call':
      return 'tool_use'
    case 'content_filter':
      return 'refusal'
    default:
      return 'end_turn'
  }
}
