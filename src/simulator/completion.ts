/**
 * Pure builders for the simulator's OpenAI wire format: the parsed request, filler content, token
 * estimates, tool-call arguments, the non-streaming body and the SSE chunk strings. No I/O here.
 */

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
    tool: planToolCall(b.tools, b.tool_choice),
  }
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

export function planToolCall(tools: unknown, toolChoice: unknown): ToolCallPlan | undefined {
  if (!Array.isArray(tools) || tools.length === 0 || toolChoice === 'none') return undefined
  const wanted = (toolChoice as { function?: { name?: unknown } } | null)?.function?.name
  let fn = (tools[0] as { function?: { name?: unknown; parameters?: unknown } } | null)?.function
  if (typeof wanted === 'string') {
    const match = tools.find((tool) => tool?.function?.name === wanted)
    fn = match ? match.function : { name: wanted }
  }
  const name = typeof fn?.name === 'string' ? fn.name : 'tool'
  return { name, arguments: sampleArguments(fn?.parameters) }
}

function sampleArguments(parameters: unknown): string {
  const schema = (parameters ?? {}) as { properties?: unknown; required?: unknown }
  const properties = (schema.properties ?? {}) as Record<string, unknown>
  const sample: Record<string, unknown> = {}
  for (const key of Object.keys(properties)) sample[key] = sampleValue(properties[key])
  if (Array.isArray(schema.required)) {
    for (const key of schema.required) {
      if (typeof key === 'string' && !Object.hasOwn(sample, key)) sample[key] = null
    }
  }
  return JSON.stringify(sample)
}

function sampleValue(property: unknown): unknown {
  let type = (property as { type?: unknown } | null)?.type
  if (Array.isArray(type)) type = type.find((t) => t !== 'null')
  if (type === 'string') return 'sample'
  if (type === 'number' || type === 'integer') return 1
  if (type === 'boolean') return true
  return null
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
