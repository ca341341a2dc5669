/**
 * An OpenAI chat request as an Anthropic Messages request, for a candidate whose model speaks only Anthropic's
 * format (DESIGN.md §4): system messages become `system`, tool messages become tool_result blocks, consecutive
 * messages of one role are merged (Anthropic wants turns to alternate). Made once per request.
 */
import { DEFAULT_MAX_OUTPUT_TOKENS } from '../billing/cost.js'

type Json = Record<string, any>

function textOf(content: unknown): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  return content
    .filter((p: Json | null) => p?.type === 'text' && typeof p.text === 'string')
    .map((p: Json) => p.text)
    .join('\n')
}

function imageBlock(part: Json): Json | null {
  const url = part.image_url?.url
  if (typeof url !== 'string') return null
  const data = /^data:([^;,]+);base64,(.*)$/s.exec(url)
  if (data !== null) return { type: 'image', source: { type: 'base64', media_type: data[1], data: data[2] } }
  return { type: 'image', source: { type: 'url', url } }
}

function blocksOf(content: unknown): Json[] {
  if (typeof content === 'string') return content === '' ? [] : [{ type: 'text', text: content }]
  if (!Array.isArray(content)) return []
  const blocks: Json[] = []
  for (const part of content as Json[]) {
    if (part?.type === 'text' && typeof part.text === 'string') blocks.push({ type: 'text', text: part.text })
    else if (part?.type === 'image_url') {
      const block = imageBlock(part)
      if (block !== null) blocks.push(block)
    }
  }
  return blocks
}

function parseArguments(args: unknown): unknown {
  if (typeof args !== 'string' || args === '') return {}
  try {
    return JSON.parse(args)
  } catch {
    return {}
  }
}

function toolChoice(choice: unknown, parallel: unknown): Json | undefined {
  let out: Json | undefined
  if (choice === 'auto') out = { type: 'auto' }
  else if (choice === 'required') out = { type: 'any' }
  else if (choice === 'none') out = { type: 'none' }
  else if (typeof (choice as Json | null)?.function?.name === 'string') out = { type: 'tool', name: (choice as Json).function.name }
  if (parallel === false) out = { ...(out ?? { type: 'auto' }), disable_parallel_tool_use: true }
  return out
}

/** The Anthropic Messages body for an OpenAI chat body (already validated by the chat surface). */
export function toAnthropicMessages(body: Json): Buffer {
  const system: string[] = []
  const messages: Json[] = []
  const push = (role: string, blocks: Json[]): void => {
    if (blocks.length === 0) return
    const last = messages.at(-1)
    if (last !== undefined && last.role === role) last.content.push(...blocks)
    else messages.push({ role, content: blocks })
  }
  for (const m of body.messages as Json[]) {
    if (m.role === 'system' || m.role === 'developer') system.push(textOf(m.content))
    else if (m.role === 'tool') push('user', [{ type: 'tool_result', tool_use_id: m.tool_call_id, content: textOf(m.content) }])
    else if (m.role === 'assistant') {
      const blocks = blocksOf(m.content)
      if (Array.isArray(m.tool_calls)) {
        for (const call of m.tool_calls) blocks.push({ type: 'tool_use', id: call.id, name: call.function?.name, input: parseArguments(call.function?.arguments) })
      }
      push('assistant', blocks)
    } else push('user', blocksOf(m.content))
  }
  const out: Json = { model: body.model, max_tokens: body.max_completion_tokens ?? body.max_tokens ?? DEFAULT_MAX_OUTPUT_TOKENS, messages }
  if (system.length > 0) out.system = system.join('\n')
  if (body.stream === true) out.stream = true
  for (const key of ['temperature', 'top_p', 'top_k'] as const) if (body[key] !== undefined && body[key] !== null) out[key] = body[key]
  const stop = body.stop
  if (typeof stop === 'string') out.stop_sequences = [stop]
  else if (Array.isArray(stop) && stop.length > 0) out.stop_sequences = stop
  if (Array.isArray(body.tools) && body.tools.length > 0) {
    out.tools = body.tools.map((t: Json) => ({ name: t.function?.name, description: t.function?.description, input_schema: t.function?.parameters ?? { type: 'object' } }))
  }
  const choice = toolChoice(body.tool_choice, body.parallel_tool_calls)
  if (choice !== undefined) out.tool_choice = choice
  if (typeof body.user === 'string') out.metadata = { user_id: body.user }
  // Structured output: a json_schema is Anthropic's output_config.format. json_object has no Anthropic
  // equivalent (a format there always carries a schema) and is not sent.
  const format = body.response_format as Json | null | undefined
  if (format?.type === 'json_schema' && format.json_schema?.schema != null) out.output_config = { format: { type: 'json_schema', schema: format.json_schema.schema } }
  return Buffer.from(JSON.stringify(out))
}

/** OpenAI's finish_reason for an Anthropic stop_reason. */
export function finishReason(stop: unknown): string {
  switch (stop) {
    case 'max_tokens':
      return 'length'
    case 'tool_use':
      return 'tool_calls'
    case 'refusal':
      return 'content_filter'
    default:
      return 'stop'
  }
}
