/**
 * Pure builders for the simulator's native Responses wire format (`POST /v1/responses`): the parsed request,
 * the response object and the SSE event strings. The filler text, token estimates and tool-call arguments are
 * the chat endpoint's (completion.ts), so every format answers alike. Like a provider used by the router, it
 * keeps no state: `previous_response_id` is refused (the router sends the whole input, with `store: false`).
 */
import { estimatePromptTokens, fillerText, fillerToken, jsonAnswer, planToolCall, type Format, type ToolCallPlan } from './completion.js'

/** The fields of a Responses request the simulator acts on. */
export interface ResponsesRequest {
  model: string
  /** The input as chat-like messages (for the prompt estimate). */
  messages: unknown[]
  stream: boolean
  maxOutputTokens: number | undefined
  tool: ToolCallPlan | undefined
  /** The JSON text of a structured answer (`text.format` json_schema or json_object), when asked for one. */
  json: string | undefined
}

type Json = Record<string, any>

function textOf(content: unknown): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  return content.map((p: Json | null) => (typeof p?.text === 'string' ? p.text : '')).join('')
}

/** Validates a parsed body; returns the request, or the message of a 400. */
export function parseResponsesRequest(body: unknown): ResponsesRequest | { error: string } {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return { error: 'The request body must be a JSON object.' }
  const b = body as Json
  if (typeof b.model !== 'string' || b.model === '') return { error: "Missing required parameter: 'model'." }
  if (b.previous_response_id != null) return { error: 'This provider stores no responses: previous_response_id is not supported.' }
  const input: unknown[] = typeof b.input === 'string' ? [{ role: 'user', content: b.input }] : Array.isArray(b.input) ? b.input : []
  if (input.length === 0) return { error: "Missing required parameter: 'input'." }
  const cap = b.max_output_tokens
  if (cap != null && !(Number.isInteger(cap) && cap >= 1)) return { error: "Invalid 'max_output_tokens': expected an integer >= 1." }
  const messages: unknown[] = []
  if (typeof b.instructions === 'string') messages.push({ content: b.instructions })
  for (const item of input as (Json | null)[]) {
    if (item?.type === 'function_call') messages.push({ content: String(item.arguments ?? '') })
    else if (item?.type === 'function_call_output') messages.push({ content: typeof item.output === 'string' ? item.output : textOf(item.output) })
    else messages.push({ content: textOf(item?.content) })
  }
  // Function tools only: built-in ones (web_search, …) are the provider's to run, and a namespace's or a
  // custom tool's call has a shape of its own that this model does not make.
  const tools = Array.isArray(b.tools)
    ? b.tools.filter((t: Json | null) => t?.type === 'function' && typeof t.name === 'string').map((t: Json) => ({ function: { name: t.name, parameters: t.parameters } }))
    : undefined
  const choice = b.tool_choice
  const chatChoice = choice === 'none' || choice === 'required' ? choice : choice?.type === 'function' ? { function: { name: choice.name } } : undefined
  return {
    model: b.model,
    messages,
    stream: b.stream === true,
    maxOutputTokens: cap == null ? undefined : cap,
    tool: planToolCall(tools, chatChoice, endsInToolOutput(input)),
    json: jsonAnswer((b.text as Json | null | undefined)?.format as Format | undefined, 'json_schema'),
  }
}

/**
 * True when a tool's output came after the model's last item (its call, message or reasoning): the simulated
 * model then answers in text, so a tool exchange ends. Any kind of call counts (`function_call_output`,
 * `custom_tool_call_output`, `local_shell_call_output`, …), and a user message sent beside the output does not
 * change that.
 */
function endsInToolOutput(input: readonly unknown[]): boolean {
  for (let i = input.length - 1; i >= 0; i--) {
    const item = input[i] as Json | null
    const type = typeof item?.type === 'string' ? item.type : ''
    if (type.endsWith('_output')) return true
    if (type.endsWith('_call') || type === 'reasoning' || item?.role === 'assistant') return false
  }
  return false
}

/** Prompt tokens: the chat estimate over the input. */
export function estimateResponsesPromptTokens(req: ResponsesRequest): number {
  return estimatePromptTokens(req.messages)
}

/** The usage object of the Responses API, serialized. */
export function responsesUsageJson(input: number, output: number): string {
  return `{"input_tokens":${input},"input_tokens_details":{"cached_tokens":0},"output_tokens":${output},"output_tokens_details":{"reasoning_tokens":0},"total_tokens":${input + output}}`
}

/** The response object; `usage` undefined (the no-usage fault) gives `"usage":null`. */
export function responseBody(id: string, created: number, modelJson: string, status: string, output: string, usage: string | undefined): string {
  const incomplete = status === 'incomplete' ? '{"reason":"max_output_tokens"}' : 'null'
  return (
    `{"id":"${id}","object":"response","created_at":${created},"status":"${status}","error":null,"incomplete_details":${incomplete},` +
    `"model":${modelJson},"output":[${output}],"parallel_tool_calls":true,"store":false,"usage":${usage ?? 'null'}}`
  )
}

/** A whole message output item of `tokens` filler tokens, or of the given escaped `text`. */
export function messageItem(id: string, tokens: number, status = 'completed', text = fillerText(tokens)): string {
  return `{"id":"${id}","type":"message","status":"${status}","role":"assistant","content":[{"type":"output_text","text":"${text}","annotations":[]}]}`
}

/** A message item as output_item.added shows it: in progress, no content yet. */
export function openMessageItem(id: string): string {
  return `{"id":"${id}","type":"message","status":"in_progress","role":"assistant","content":[]}`
}

/** A whole function_call output item. */
export function functionCallItem(id: string, callId: string, tool: ToolCallPlan, args = tool.arguments, status = 'completed'): string {
  return `{"id":"${id}","type":"function_call","status":"${status}","call_id":"${callId}","name":${JSON.stringify(tool.name)},"arguments":${JSON.stringify(args)}}`
}

function event(type: string, seq: number, body: string): string {
  return `event: ${type}\ndata: {"type":"${type}","sequence_number":${seq},${body}}\n\n`
}

/** response.created and response.in_progress, then the item's opening events: what comes before the deltas. */
export function responseStreamStart(response: string, item: string, text: boolean): string {
  let out = event('response.created', 0, `"response":${response}`) + event('response.in_progress', 1, `"response":${response}`)
  out += event('response.output_item.added', 2, `"output_index":0,"item":${item}`)
  if (text) {
    const itemId = JSON.parse(item).id as string
    out += event('response.content_part.added', 3, `"item_id":"${itemId}","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`)
  }
  return out
}

/** The events before the deltas: 4 for text, 3 for a function call. */
export function deltasFrom(text: boolean): number {
  return text ? 4 : 3
}

/** One text delta: the i-th filler token, or the given escaped piece. */
export function outputTextDelta(itemId: string, seq: number, i: number, piece = fillerToken(i)): string {
  return event('response.output_text.delta', seq, `"item_id":"${itemId}","output_index":0,"content_index":0,"delta":"${piece}","logprobs":[]`)
}

/** One piece of the function call's arguments. */
export function argumentsDelta(itemId: string, seq: number, piece: string): string {
  return event('response.function_call_arguments.delta', seq, `"item_id":"${itemId}","output_index":0,"delta":${JSON.stringify(piece)}`)
}

/** The item's closing events and the last event (response.completed or .incomplete), from sequence `seq` on. */
export function responseStreamEnd(seq: number, itemId: string, item: string, text: string | null, args: string | null, response: string, status: string): string {
  let out = ''
  if (text !== null) {
    out += event('response.output_text.done', seq++, `"item_id":"${itemId}","output_index":0,"content_index":0,"text":"${text}","logprobs":[]`)
    out += event('response.content_part.done', seq++, `"item_id":"${itemId}","output_index":0,"content_index":0,"part":{"type":"output_text","text":"${text}","annotations":[]}`)
  } else {
    out += event('response.function_call_arguments.done', seq++, `"item_id":"${itemId}","output_index":0,"arguments":${JSON.stringify(args)}`)
  }
  out += event('response.output_item.done', seq++, `"output_index":0,"item":${item}`)
  const type = status === 'incomplete' ? 'response.incomplete' : 'response.completed'
  return out + event(type, seq, `"response":${response}`)
}
