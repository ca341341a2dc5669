/**
 * Pure builders for the simulator's native Anthropic wire format (`POST /v1/messages`): the parsed request,
 * the JSON message and the SSE event strings. The filler text, token estimates and tool-call arguments are
 * the chat endpoint's (completion.ts), so both formats answer alike.
 */
import { estimatePromptTokens, fillerText, fillerToken, jsonAnswer, planToolCall, type Format, type ToolCallPlan } from './completion.js'

/** The fields of a messages request the simulator acts on. */
export interface MessagesRequest {
  model: string
  messages: readonly unknown[]
  system: unknown
  stream: boolean
  maxTokens: number
  tool: ToolCallPlan | undefined
  /** The JSON text of a structured answer (`output_config.format` json_schema), when asked for one. */
  json: string | undefined
}

type Json = Record<string, any>

/** Validates a parsed body; returns the request, or the message of a 400. */
export function parseMessagesRequest(body: unknown): MessagesRequest | { error: string } {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return { error: 'The request body must be a JSON object.' }
  const b = body as Json
  if (typeof b.model !== 'string' || b.model === '') return { error: 'model: Field required' }
  if (!Array.isArray(b.messages) || b.messages.length === 0) return { error: 'messages: Field required (a non-empty array)' }
  if (!Number.isInteger(b.max_tokens) || b.max_tokens < 1) return { error: 'max_tokens: Field required (an integer >= 1)' }
  // Client tools only (a server tool such as web_search has no input_schema and is run by the provider).
  const tools = Array.isArray(b.tools)
    ? b.tools.filter((t: Json | null) => typeof t?.name === 'string' && (t.type == null || t.type === 'custom')).map((t: Json) => ({ function: { name: t.name, parameters: t.input_schema } }))
    : undefined
  const choice = b.tool_choice as Json | undefined
  const openAiChoice = choice?.type === 'none' ? 'none' : choice?.type === 'any' ? 'required' : choice?.type === 'tool' ? { function: { name: choice.name } } : undefined
  const format = (b.output_config as Json | null | undefined)?.format as Format | undefined
  return {
    model: b.model,
    messages: b.messages,
    system: b.system,
    stream: b.stream === true,
    maxTokens: b.max_tokens,
    tool: planToolCall(tools, openAiChoice, endsInToolResult(b.messages)),
    json: jsonAnswer(format, 'json_schema'),
  }
}

/**
 * True when the user's turn after the assistant's last one carries a tool result: the simulated model then
 * answers in text, so a tool exchange ends. System turns and text sent beside the result do not change that.
 */
function endsInToolResult(messages: readonly unknown[]): boolean {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as Json | null
    if (message?.role === 'assistant') return false
    if (Array.isArray(message?.content) && message.content.some((block: Json | null) => block?.type === 'tool_result')) return true
  }
  return false
}

/** Prompt tokens: the chat estimate over the messages, plus the system prompt as one more message. */
export function estimateMessagesPromptTokens(req: MessagesRequest): number {
  const system = req.system === undefined ? [] : [{ content: req.system }]
  return estimatePromptTokens([...system, ...req.messages])
}

function usage(input: number, output: number): string {
  return `{"input_tokens":${input},"output_tokens":${output}}`
}

/** The whole JSON message; `usageOf` undefined (the no-usage fault) omits usage. */
export function messageBody(id: string, modelJson: string, content: string, stopReason: string, usageOf: [number, number] | undefined): string {
  const u = usageOf === undefined ? '' : `,"usage":${usage(usageOf[0], usageOf[1])}`
  return `{"id":"${id}","type":"message","role":"assistant","model":${modelJson},"content":[${content}],"stop_reason":"${stopReason}","stop_sequence":null${u}}`
}

/** The text block of `tokens` filler tokens. */
export function textBlock(tokens: number): string {
  return `{"type":"text","text":"${fillerText(tokens)}"}`
}

/** The text block of a structured answer, from its escaped pieces. */
export function jsonTextBlock(pieces: readonly string[]): string {
  return `{"type":"text","text":"${pieces.join('')}"}`
}

/** The tool_use block of the one planned call. */
export function toolUseBlock(id: string, tool: ToolCallPlan): string {
  return `{"type":"tool_use","id":"${id}","name":${JSON.stringify(tool.name)},"input":${tool.arguments}}`
}

function event(name: string, data: string): string {
  return `event: ${name}\ndata: ${data}\n\n`
}

/** message_start, then the opening of block 0 (text, or the tool_use block), and a ping. */
export function streamStart(id: string, modelJson: string, inputTokens: number | undefined, block: string): string {
  const u = inputTokens === undefined ? '' : `,"usage":${usage(inputTokens, 1)}`
  const start = `{"type":"message_start","message":{"id":"${id}","type":"message","role":"assistant","model":${modelJson},"content":[],"stop_reason":null,"stop_sequence":null${u}}}`
  return event('message_start', start) + event('content_block_start', `{"type":"content_block_start","index":0,"content_block":${block}}`) + event('ping', '{"type":"ping"}')
}

/** One text token. */
export function textDelta(i: number): string {
  return event('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${fillerToken(i)}"}}`)
}

/** One escaped piece of a structured answer. */
export function textPieceDelta(piece: string): string {
  return event('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${piece}"}}`)
}

/** One piece of the tool input's JSON. */
export function inputJsonDelta(piece: string): string {
  return event('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(piece)}}}`)
}

/** content_block_stop, message_delta (stop reason, output tokens) and message_stop. */
export function streamStop(stopReason: string, outputTokens: number | undefined): string {
  const u = outputTokens === undefined ? '' : `,"usage":{"output_tokens":${outputTokens}}`
  return (
    event('content_block_stop', '{"type":"content_block_stop","index":0}') +
    event('message_delta', `{"type":"message_delta","delta":{"stop_reason":"${stopReason}","stop_sequence":null}${u}}`) +
    event('message_stop', '{"type":"message_stop"}')
  )
}
