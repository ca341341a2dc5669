/**
 * Pure builders for the simulator's OpenAI wire format: the parsed request, filler content, token
 * estimates, tool-call arguments, the non-streaming body and the SSE chunk strings. No I/O here.
 *
 * The simulated model behaves as a real one does in an agent loop: it calls a tool while the conversation
 * does not end in a tool result, then answers in text; asked for JSON (a json_schema or json_object format),
 * it answers with JSON that matches the schema. Every format (chat, messages, responses) answers alike.
 */
import { sampleSchema } from './schema-sample.js'

// Every word is plain ASCII without quotes or backslashes, so it is spliced into JSON unescaped.
const WORDS = [
  ' The', ' quick', ' brown', ' fox', ' jumps', ' over', ' the', ' lazy', ' dog', ' while', ' the',
  ' simulated', ' provider', ' streams', ' filler', ' tokens',
] as const
const CYCLE = WORDS.join('')
const PREFIXES = WORDS.map((_, i) => WORDS.slice(0, i).join(''))

/** The i-th filler token: a word with its leading space. */
export function fillerToken(i: number): string {
  return WORDS[i % WORDS.length]!
}

/** The first `count` filler tokens, concatenated. */
export function fillerText(count: number): string {
  return CYCLE.repeat(Math.floor(count / WORDS.length)) + PREFIXES[count % WORDS.length]!
}

/** The fields of a chat completion request the simulator acts on. */
export interface ChatRequest {
  model: string
  messages: readonly unknown[]
  stream: boolean
  includeUsage: boolean
  maxTokens: number | undefined
  tool: ToolCallPlan | undefined
  /** The JSON text of a structured answer (response_format json_schema or json_object), when asked for one. */
  json: string | undefined
}

/** The one tool call the simulator answers with. */
export interface ToolCallPlan {
  name: string
  arguments: string
}

/** Validates a parsed body; returns the request, or the message of a 400. */
export function parseChatRequest(body: unknown): ChatRequest | { error: string } {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    return { error: 'The request body must be a JSON object.' }
  }
  const b = body as Record<string, unknown>
  if (typeof b.model !== 'string' || b.model === '') {
    return { error: "Missing required parameter: 'model'." }
  }
  if (!Array.isArray(b.messages) || b.messages.length === 0) {
    return { error: "Missing required parameter: 'messages' (a non-empty array)." }
  }
  const cap = b.max_completion_tokens ?? b.max_tokens
  if (cap != null && !(Number.isInteger(cap) && (cap as number) >= 1)) {
    return { error: "Invalid 'max_tokens': expected an integer >= 1." }
  }
  const streamOptions = b.stream_options as { include_usage?: unknown } | null | undefined
  return {
    model: b.model,
    messages: b.messages,
    stream: b.stream === true,
    includeUsage: b.stream === true && streamOptions?.include_usage === true,
    maxTokens: cap == null ? undefined : (cap as number),
    tool: planToolCall(b.tools, b.tool_choice, chatEndsInToolResult(b.messages)),
    json: jsonAnswer(b.response_format as Format | undefined, 'json_schema'),
  }
}

/** True when the last turn after the assistant's is a tool result: the model then answers in text. */
function chatEndsInToolResult(messages: readonly unknown[]): boolean {
  for (let i = messages.length - 1; i >= 0; i--) {
    const role = (messages[i] as { role?: unknown } | null)?.role
    if (role === 'tool' || role === 'function') return true
    if (role === 'assistant') return false
  }
  return false
}

/** A requested output format: chat's `response_format`, Responses' `text.format`, Anthropic's `output_config.format`. */
export interface Format {
  type?: unknown
  json_schema?: { schema?: unknown } | null
  schema?: unknown
}

/**
 * The JSON text a structured answer carries: a sample of the schema (found under `json_schema.schema` on
 * chat, `schema` on the others), or an object for plain JSON mode. Undefined when no JSON is asked for.
 */
export function jsonAnswer(format: Format | null | undefined, schemaType: string): string | undefined {
  if (format === null || typeof format !== 'object') return undefined
  if (format.type === 'json_object') return `{"answer":"${fillerText(WORDS.length).trim()}"}`
  if (format.type !== schemaType) return undefined
  const schema = format.json_schema != null && typeof format.json_schema === 'object' ? format.json_schema.schema : format.schema
  return JSON.stringify(sampleSchema(schema))
}

/** A structured answer cut into token-sized pieces, each JSON-escaped for splicing into a string. */
export function answerPieces(text: string): string[] {
  const pieces: string[] = []
  for (let i = 0; i < text.length; i += 4) pieces.push(JSON.stringify(text.slice(i, i + 4)).slice(1, -1))
  return pieces
}

/** Deterministic prompt estimate: per message, ceil(text length / 4) + 4. */
export function estimatePromptTokens(messages: readonly unknown[]): number {
  let tokens = 0
  for (const message of messages) {
    tokens += 4
    const content = (message as { content?: unknown } | null)?.content
    if (typeof content === 'string') {
      tokens += Math.ceil(content.length / 4)
    } else if (Array.isArray(content)) {
      let length = 0
      for (const part of content) {
        const text = (part as { text?: unknown } | null)?.text
        if (typeof text === 'string') length += text.length
      }
      tokens += Math.ceil(length / 4)
    }
  }
  return tokens
}

/**
 * The tool call the model makes, in chat's terms: the forced tool, or the first one; none under
 * `tool_choice: none`, nor after a tool result (`answered`) unless a call is forced (`required` or by name).
 */
export function planToolCall(tools: unknown, toolChoice: unknown, answered = false): ToolCallPlan | undefined {
  if (!Array.isArray(tools) || tools.length === 0 || toolChoice === 'none') return undefined
  const wanted = (toolChoice as { function?: { name?: unknown } } | null)?.function?.name
  if (answered && toolChoice !== 'required' && typeof wanted !== 'string') return undefined
  let fn = (tools[0] as { function?: { name?: unknown; parameters?: unknown } } | null)?.function
  if (typeof wanted === 'string') {
    const match = tools.find((tool) => tool?.function?.name === wanted)
    fn = match ? match.function : { name: wanted }
  }
  const name = typeof fn?.name === 'string' ? fn.name : 'tool'
  return { name, arguments: sampleArguments(fn?.parameters) }
}

function sampleArguments(parameters: unknown): string {
  const sample = sampleSchema(parameters)
  // Arguments are an object whatever the schema says: a client parses them as one.
  return JSON.stringify(sample !== null && typeof sample === 'object' && !Array.isArray(sample) ? sample : {})
}

/** Splits a tool call's arguments into the few pieces streamed one per chunk. */
export function splitArguments(args: string): string[] {
  const size = Math.max(1, Math.ceil(args.length / 4))
  const pieces: string[] = []
  for (let i = 0; i < args.length; i += size) pieces.push(args.slice(i, i + size))
  return pieces
}

/** Completion tokens billed for a tool call. */
export function toolCallTokens(tool: ToolCallPlan): number {
  return Math.ceil((tool.name.length + tool.arguments.length) / 4)
}

/** The usage object, serialized. */
export function usageJson(promptTokens: number, completionTokens: number): string {
  return `{"prompt_tokens":${promptTokens},"completion_tokens":${completionTokens},"total_tokens":${promptTokens + completionTokens}}`
}

/** `{"id",...,"system_fingerprint"` without the closing brace: shared by every body and chunk. */
export function responseMeta(object: string, id: string, created: number, modelJson: string, fingerprintJson: string): string {
  return `{"id":"${id}","object":"${object}","created":${created},"model":${modelJson},"system_fingerprint":${fingerprintJson}`
}

/** The assistant message of a non-streaming completion. */
export function contentMessage(tokens: number): string {
  return `{"role":"assistant","content":"${fillerText(tokens)}","refusal":null}`
}

/** The assistant message of a structured answer, from its escaped pieces. */
export function jsonMessage(pieces: readonly string[]): string {
  return `{"role":"assistant","content":"${pieces.join('')}","refusal":null}`
}

/** The assistant message carrying one tool call. */
export function toolCallMessage(callId: string, tool: ToolCallPlan): string {
  return `{"role":"assistant","content":null,"tool_calls":[{"id":"${callId}","type":"function","function":{"name":${JSON.stringify(tool.name)},"arguments":${JSON.stringify(tool.arguments)}}}],"refusal":null}`
}

/** A whole `chat.completion` body; `usage` is omitted when undefined. */
export function completionBody(meta: string, message: string, finishReason: string, usage: string | undefined): string {
  const usageField = usage === undefined ? '' : `,"usage":${usage}`
  return `${meta},"choices":[{"index":0,"message":${message},"logprobs":null,"finish_reason":"${finishReason}"}]${usageField}}`
}

/**
 * The per-request framing of stream chunks: a chunk is `head + delta + tail`, so each token costs two
 * string concatenations.
 */
export interface StreamFrame {
  meta: string
  head: string
  tail: string
  includeUsage: boolean
}

/** Builds the framing for one stream from its `responseMeta`. */
export function streamFrame(meta: string, includeUsage: boolean): StreamFrame {
  return {
    meta,
    head: `data: ${meta},"choices":[{"index":0,"delta":`,
    tail: `,"logprobs":null,"finish_reason":null}]${includeUsage ? ',"usage":null' : ''}}\n\n`,
    includeUsage,
  }
}

/** The first chunk of a content stream. */
export function roleChunk(frame: StreamFrame): string {
  return `${frame.head}{"role":"assistant","content":""}${frame.tail}`
}

/** One content token. */
export function contentChunk(frame: StreamFrame, token: string): string {
  return `${frame.head}{"content":"${token}"}${frame.tail}`
}

/** The first chunk of a tool-call stream: role, call id and name, empty arguments. */
export function toolStartChunk(frame: StreamFrame, callId: string, name: string): string {
  return `${frame.head}{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"${callId}","type":"function","function":{"name":${JSON.stringify(name)},"arguments":""}}]}${frame.tail}`
}

/** One piece of the tool call's arguments. */
export function toolArgumentsChunk(frame: StreamFrame, piece: string): string {
  return `${frame.head}{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(piece)}}}]}${frame.tail}`
}

/** The finish chunk, the usage chunk when asked for, and the `[DONE]` terminator. */
export function streamEnd(frame: StreamFrame, finishReason: string, usage: string): string {
  const usageNull = frame.includeUsage ? ',"usage":null' : ''
  const finish = `${frame.head}{},"logprobs":null,"finish_reason":"${finishReason}"}]${usageNull}}\n\n`
  const usageChunk = frame.includeUsage ? `data: ${frame.meta},"choices":[],"usage":${usage}}\n\n` : ''
  return `${finish}${usageChunk}data: [DONE]\n\n`
}
