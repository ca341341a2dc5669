/**
 * A Responses request as an OpenAI chat request, for a candidate whose model does not list `responses` in its
 * formats (issue 32), and the body a native candidate gets. Both take the request's input items once the
 * surface resolved them (history of previous_response_id and item_reference items included), so a provider
 * never needs state of its own. Made once per request, on the first candidate of each kind.
 */

type Json = Record<string, any>

function textOfParts(content: unknown): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  let text = ''
  for (const part of content as Json[]) {
    const t = part?.type
    if ((t === 'input_text' || t === 'output_text' || t === 'text') && typeof part.text === 'string') text += (text === '' ? '' : '\n') + part.text
    else if (t === 'refusal' && typeof part.refusal === 'string') text += (text === '' ? '' : '\n') + part.refusal
  }
  return text
}

/** A user message's content parts as chat content parts (validated by the surface). */
function userContent(content: unknown): unknown {
  if (typeof content === 'string') return content
  const parts: Json[] = []
  for (const part of content as Json[]) {
    if (part.type === 'input_text') parts.push({ type: 'text', text: part.text })
    else if (part.type === 'input_image') {
      const image: Json = { url: part.image_url }
      if (typeof part.detail === 'string' && part.detail !== 'auto') image.detail = part.detail
      parts.push({ type: 'image_url', image_url: image })
    } else if (part.type === 'input_file') {
      const file: Json = { file_data: part.file_data }
      if (typeof part.filename === 'string') file.filename = part.filename
      parts.push({ type: 'file', file })
    }
  }
  return parts
}

/** The chat messages of the resolved input items, `instructions` first as the system message. */
export function chatMessages(instructions: unknown, items: readonly Json[]): Json[] {
  const messages: Json[] = []
  if (typeof instructions === 'string' && instructions !== '') messages.push({ role: 'system', content: instructions })
  // The assistant message function_call items join: calls of one turn are one chat message with tool_calls.
  let assistant: Json | null = null
  for (const item of items) {
    const type = item.type ?? 'message'
    if (type === 'message') {
      const role = item.role
      if (role === 'assistant') {
        assistant = { role: 'assistant', content: textOfParts(item.content) }
        messages.push(assistant)
        continue
      }
      assistant = null
      // developer is OpenAI's newer name for system; most OpenAI-compatible servers know only system.
      if (role === 'system' || role === 'developer') messages.push({ role: 'system', content: textOfParts(item.content) })
      else messages.push({ role: 'user', content: userContent(item.content) })
    } else if (type === 'function_call') {
      if (assistant === null) {
        assistant = { role: 'assistant', content: null }
        messages.push(assistant)
      }
      if (assistant.content === '') assistant.content = null
      ;(assistant.tool_calls ??= []).push({ id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } })
    } else if (type === 'function_call_output') {
      assistant = null
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: typeof item.output === 'string' ? item.output : textOfParts(item.output) })
    }
    // reasoning items are the model's own and were made for the provider that wrote them: not sent on.
  }
  return messages
}

function chatToolChoice(choice: unknown): unknown {
  if (typeof choice === 'string') return choice
  const c = choice as Json
  if (c?.type === 'function') return { type: 'function', function: { name: c.name } }
  return undefined
}

/** The response_format of a `text.format` (json_schema, json_object; text needs none). */
function responseFormat(format: Json | undefined): Json | undefined {
  if (format?.type === 'json_object') return { type: 'json_object' }
  if (format?.type !== 'json_schema') return undefined
  const schema: Json = { name: format.name, schema: format.schema }
  if (typeof format.description === 'string') schema.description = format.description
  if (typeof format.strict === 'boolean') schema.strict = format.strict
  return { type: 'json_schema', json_schema: schema }
}

/** The OpenAI chat body for a Responses request body (validated) over its resolved input items. */
export function toChatCompletions(body: Json, items: readonly Json[]): Buffer {
  const out: Json = { model: body.model, messages: chatMessages(body.instructions, items) }
  if (typeof body.max_output_tokens === 'number') out.max_tokens = body.max_output_tokens
  if (body.stream === true) {
    out.stream = true
    out.stream_options = { include_usage: true }
  }
  for (const key of ['temperature', 'top_p', 'parallel_tool_calls', 'user'] as const) if (body[key] !== undefined && body[key] !== null) out[key] = body[key]
  if (Array.isArray(body.tools) && body.tools.length > 0) {
    out.tools = body.tools.map((t: Json) => {
      const fn: Json = { name: t.name, parameters: t.parameters ?? { type: 'object', properties: {} } }
      if (typeof t.description === 'string') fn.description = t.description
      if (typeof t.strict === 'boolean') fn.strict = t.strict
      return { type: 'function', function: fn }
    })
  }
  if (body.tool_choice !== undefined && body.tool_choice !== null) {
    const choice = chatToolChoice(body.tool_choice)
    if (choice !== undefined) out.tool_choice = choice
  }
  const format = responseFormat(body.text?.format)
  if (format !== undefined) out.response_format = format
  const effort = body.reasoning?.effort
  if (typeof effort === 'string') out.reasoning_effort = effort
  return Buffer.from(JSON.stringify(out))
}

/** Members of the client's body a native provider does not get: the router's own, and the state it resolved. */
const NOT_NATIVE = new Set(['provider', 'previous_response_id', 'store', 'input'])

/**
 * The body a native candidate gets: the client's request with the whole resolved input in place of
 * `previous_response_id` and item references, `store: false` (the router keeps the state; the provider need
 * not), and without the deprecated `provider` object. A reasoning item without `encrypted_content` is left out:
 * with `store: false` a provider can only look it up by id, which it refuses ("Items are not persisted when
 * `store` is set to false"), as the AI SDK itself leaves such items out.
 */
export function toNativeResponses(body: Json, items: readonly Json[]): Buffer {
  const out: Json = {}
  for (const key of Object.keys(body)) if (!NOT_NATIVE.has(key)) out[key] = body[key]
  out.input = items.filter((item) => item.type !== 'reasoning' || typeof item.encrypted_content === 'string')
  out.store = false
  return Buffer.from(JSON.stringify(out))
}
