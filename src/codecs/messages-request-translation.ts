/**
 * An Anthropic Messages request as an OpenAI chat request, for a candidate that speaks only OpenAI's format
 * (DESIGN.md §4 `/v1/messages`). Made once per request, when the first translated candidate is planned.
 * Tool names longer than OpenAI's 64 characters (or with characters it refuses) are renamed; the mapping
 * turns them back in the answer.
 */
import { createHash } from 'node:crypto'

type Json = Record<string, any>

/** OpenAI's tool-name rule. */
const OPENAI_NAME = /^[a-zA-Z0-9_-]{1,64}$/

/** Tool names as sent upstream, back to the client's names (only names that had to change). */
export type ToolNames = Map<string, string>

function openAiName(name: string, names: ToolNames): string {
  if (OPENAI_NAME.test(name)) return name
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8)
  const renamed = name.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 55) + '_' + hash
  names.set(renamed, name)
  return renamed
}

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

/** The OpenAI chat body for an Anthropic request body (already validated by the surface). */
export function toOpenAiChat(body: Json): { body: Buffer; names: ToolNames } {
  const names: ToolNames = new Map()
  const messages: Json[] = []
  const system = textOf(body.system)
  if (system !== '') messages.push({ role: 'system', content: system })
  for (const m of body.messages as Json[]) {
    if (m.role === 'assistant') messages.push(assistantMessage(m.content, names))
    else userMessages(m.content, messages)
  }
  const out: Json = { model: body.model, messages, max_tokens: body.max_tokens }
  if (body.stream === true) {
    out.stream = true
    out.stream_options = { include_usage: true }
  }
  for (const key of ['temperature', 'top_p', 'top_k'] as const) if (body[key] !== undefined && body[key] !== null) out[key] = body[key]
  if (Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0) out.stop = body.stop_sequences
  if (Array.isArray(body.tools) && body.tools.length > 0) {
    out.tools = body.tools.map((t: Json) => ({
      type: 'function',
      function: { name: openAiName(String(t.name), names), description: t.description, parameters: t.input_schema ?? { type: 'object' } },
    }))
  }
  const choice = body.tool_choice
  if (choice !== undefined && choice !== null) {
    out.tool_choice = toolChoice(choice, names)
    if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false
  }
  const thinking = body.thinking
  if (thinking?.type === 'enabled' && typeof thinking.budget_tokens === 'number') out.reasoning = { max_tokens: thinking.budget_tokens }
  const user = body.metadata?.user_id
  if (typeof user === 'string') out.user = user
  return { body: Buffer.from(JSON.stringify(out)), names }
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
