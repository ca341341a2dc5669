/**
 * A Responses request as an OpenAI chat request, for a candidate whose model does not list `responses` in its
 * formats (issue 32), and the body a native candidate gets. Both take the request's input items once the
 * surface resolved them (history of previous_response_id and item_reference items included), so a provider
 * never needs state of its own. Made once per request, on the first candidate of each kind.
 */

import { upstreamToolName, type ToolNames } from './tool-names.js'

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

/**
 * The chat messages of the resolved input items, `instructions` first as the system message. Tool names go
 * through `names` (a namespace's functions flattened, names OpenAI refuses renamed); item types with no chat
 * equivalent (built-in tool calls and their outputs) are left out and collected in `left`.
 */
export function chatMessages(instructions: unknown, items: readonly Json[], names: ToolNames = new Map(), left?: Set<string>): Json[] {
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
    } else if (type === 'function_call' || (type === 'custom_tool_call' && typeof item.name === 'string' && typeof item.input === 'string')) {
      if (assistant === null) {
        assistant = { role: 'assistant', content: null }
        messages.push(assistant)
      }
      if (assistant.content === '') assistant.content = null
      const custom = type === 'custom_tool_call'
      const name = upstreamToolName(item.name, names, typeof item.namespace === 'string' ? item.namespace : undefined, custom)
      const args = custom ? JSON.stringify({ input: item.input }) : item.arguments
      ;(assistant.tool_calls ??= []).push({ id: item.call_id, type: 'function', function: { name, arguments: args } })
    } else if (type === 'function_call_output' || type === 'custom_tool_call_output') {
      assistant = null
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: typeof item.output === 'string' ? item.output : textOfParts(item.output) })
    } else if (type !== 'reasoning' && type !== 'item_reference') {
      left?.add(String(type))
    }
    // reasoning items are the model's own and were made for the provider that wrote them: not sent on.
  }
  return messages
}

/** A function tool (of `namespace`, when in one) as a chat tool. */
function chatTool(t: Json, names: ToolNames, namespace?: string): Json {
  const fn: Json = { name: upstreamToolName(t.name, names, namespace), parameters: t.parameters ?? { type: 'object', properties: {} } }
  if (typeof t.description === 'string') fn.description = t.description
  if (typeof t.strict === 'boolean') fn.strict = t.strict
  return { type: 'function', function: fn }
}

/**
 * A free-form (`custom`) tool as a chat function of one string argument, `input`, its format (a grammar, or
 * plain text) told in the argument's description; the call comes back as a custom_tool_call with that input.
 */
function customTool(t: Json, names: ToolNames, namespace?: string): Json {
  const format = t.format
  let about = 'The raw input for the tool, as free-form text.'
  if (format?.type === 'grammar' && typeof format.definition === 'string') {
    about = `The raw input for the tool: text that follows this ${typeof format.syntax === 'string' ? format.syntax + ' ' : ''}grammar:\n${format.definition}`
  }
  const fn: Json = {
    name: upstreamToolName(t.name, names, namespace, true),
    parameters: { type: 'object', properties: { input: { type: 'string', description: about } }, required: ['input'], additionalProperties: false },
  }
  if (typeof t.description === 'string') fn.description = t.description
  return { type: 'function', function: fn }
}

/** What a tool is called in notes and errors: its type, and its name when it has one. */
function toolLabel(t: Json, namespace?: string): string {
  const name = typeof t.name === 'string' ? (namespace === undefined ? t.name : `${namespace}.${t.name}`) : ''
  return name === '' ? String(t.type) : `${name} (${t.type})`
}

/** The translation of a Responses request to chat, made once per request. */
export interface ChatOfResponses {
  /** The chat body without reasoning_effort and response_format (src/surfaces/chat-variants.ts adds them). */
  readonly chat: Json
  readonly names: ToolNames
  /** What the provider does not get (built-in tools and their call items, members with no chat equivalent). */
  readonly notes: readonly string[]
  /** Set when the client forces a tool a chat provider does not have: such a candidate cannot serve it. */
  readonly refusal: string | null
  readonly reasoningEffort: string | null
  readonly responseFormat: Json | null
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

/** Request members the translation maps, or that are the router's own (state, routing): any other is noted. */
const MAPPED = new Set([
  'model', 'input', 'instructions', 'tools', 'tool_choice', 'parallel_tool_calls', 'max_output_tokens', 'temperature', 'top_p', 'text',
  'reasoning', 'metadata', 'user', 'stream', 'store', 'previous_response_id', 'provider', 'verify_tee',
])

/**
 * The OpenAI chat request for a Responses request body (validated) over its resolved input items. Function
 * tools go as chat tools, a `namespace`'s function tools flattened to `<namespace>__<name>` (mapped back in the
 * answer), free-form `custom` tools as functions of one string argument. Built-in tools (web_search,
 * file_search, local_shell, mcp, …) have no chat equivalent: they are left out and noted, and a tool_choice
 * that forces one is a refusal.
 */
export function toChatCompletions(body: Json, items: readonly Json[]): ChatOfResponses {
  const names: ToolNames = new Map()
  const left = new Set<string>()
  const notes: string[] = []
  const out: Json = { model: body.model, messages: chatMessages(body.instructions, items, names, left) }
  if (left.size > 0) notes.push(`input items of type ${[...left].join(', ')} have no chat equivalent and were not sent`)
  const unmapped = Object.keys(body).filter((key) => !MAPPED.has(key) && body[key] !== null)
  if (body.text?.verbosity !== undefined && body.text.verbosity !== null) unmapped.push('text.verbosity')
  if (unmapped.length > 0) notes.push(`members with no chat equivalent were not sent: ${unmapped.join(', ')}`)
  if (typeof body.max_output_tokens === 'number') out.max_tokens = body.max_output_tokens
  if (body.stream === true) {
    out.stream = true
    out.stream_options = { include_usage: true }
  }
  for (const key of ['temperature', 'top_p', 'parallel_tool_calls', 'user'] as const) if (body[key] !== undefined && body[key] !== null) out[key] = body[key]
  const tools: Json[] = []
  const dropped: string[] = []
  /** The tools sent, as `<type>:<name>` (`<type>:<namespace>.<name>` in a namespace), for tool_choice. */
  const sent = new Set<string>()
  if (Array.isArray(body.tools)) {
    for (const t of body.tools as Json[]) {
      if (t.type === 'function' || t.type === 'custom') {
        tools.push(t.type === 'custom' ? customTool(t, names) : chatTool(t, names))
        sent.add(`${t.type}:${t.name}`)
      } else if (t.type === 'namespace') {
        for (const inner of t.tools as Json[]) {
          tools.push(inner.type === 'custom' ? customTool(inner, names, t.name) : chatTool(inner, names, t.name))
          sent.add(`${inner.type}:${t.name}.${inner.name}`)
        }
      } else dropped.push(toolLabel(t))
    }
  }
  if (tools.length > 0) out.tools = tools
  if (dropped.length > 0) notes.push(`tools with no chat equivalent were not sent: ${dropped.join(', ')}`)
  let refusal: string | null = null
  const choice = body.tool_choice
  if (typeof choice === 'string') {
    if (choice === 'required' && tools.length === 0) refusal = 'tool_choice "required" forces a tool, and none of the tools given is available from a chat provider'
    // Without tools there is nothing to choose, and OpenAI refuses a tool_choice without tools.
    else if (tools.length > 0) out.tool_choice = choice
  } else if (choice !== undefined && choice !== null) {
    if (choice.type === 'function' || choice.type === 'custom') {
      const label = typeof choice.namespace === 'string' ? `${choice.namespace}.${choice.name}` : choice.name
      if (sent.has(`${choice.type}:${label}`)) out.tool_choice = { type: 'function', function: { name: upstreamToolName(choice.name, names, choice.namespace, choice.type === 'custom') } }
      else refusal = `tool_choice forces the ${choice.type === 'custom' ? 'custom tool' : 'function'} ${JSON.stringify(label)}, which is not among the tools`
    } else if (choice.type === 'allowed_tools') {
      // The restriction to a subset has no chat form: the provider may call any of the tools sent.
      if (choice.mode === 'required' && tools.length === 0) refusal = 'tool_choice forces a tool, and none of the tools given is available from a chat provider'
      else if (tools.length > 0) {
        out.tool_choice = choice.mode === 'required' ? 'required' : 'auto'
        notes.push('tool_choice allowed_tools was sent as "' + out.tool_choice + '": chat has no way to allow only some tools')
      }
    } else {
      refusal = `tool_choice forces the built-in tool ${JSON.stringify(choice.type)}, which a chat provider does not have`
    }
  }
  const format = responseFormat(body.text?.format)
  const effort = body.reasoning?.effort
  return { chat: out, names, notes, refusal, reasoningEffort: typeof effort === 'string' ? effort : null, responseFormat: format ?? null }
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
