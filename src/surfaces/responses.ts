/**
 * POST /v1/responses (OpenAI's Responses API, issue 32) as a surface record over the shared engine: a
 * candidate whose model lists `responses` in `formats` gets the request natively on its /v1/responses; any
 * other gets it translated to OpenAI chat (made once, on the first such candidate) and its answer translated
 * back. The conversation state (`previous_response_id`, `item_reference`, `store`) is the router's, in the
 * store, on every path (stored-responses.ts): a provider always gets the whole input.
 */
import { chatCost, chatWorstCase } from '../billing/cost.js'
import type { JsonBody } from '../codecs/json-body.js'
import { ResponsesTranslatedJsonCodec } from '../codecs/responses-json-translation.js'
import { ResponsesNativeJsonCodec, ResponsesNativeStreamCodec } from '../codecs/responses-native.js'
import { toChatCompletions, toNativeResponses } from '../codecs/responses-request-translation.js'
import { ResponsesTranslatedStreamCodec } from '../codecs/responses-stream-translation.js'
import { ResponsesViaAnthropicJsonCodec, ResponsesViaAnthropicStreamCodec } from '../codecs/responses-via-anthropic.js'
import { toAnthropicMessages } from '../codecs/chat-request-translation.js'
import { newId, type ResponseMeta } from '../codecs/responses-wire.js'
import type { ToolNames } from '../codecs/tool-names.js'
import { renderError, RouterError } from '../errors.js'
import type { Offer } from '../routing/offers.js'
import { paramBit } from '../routing/params.js'
import { DIMENSION_CHAT } from '../routing/select.js'
import type { AttemptPlan } from '../upstream/plan.js'
import { BufferBody } from '../upstream/request-body.js'
import { ChatVariants } from './chat-variants.js'
import type { SurfaceRequest } from './surface.js'

type Json = Record<string, any>

export interface ResponsesRequest extends SurfaceRequest {
  readonly body: Json
  /** The request's own input items (a string input is one user message), item references unresolved. */
  readonly input: readonly Json[]
  /** The ids of the request's item_reference items, in order. */
  readonly references: readonly string[]
  readonly previousId: string | null
  /** `store` (default true): keep the input and output for later requests and GET. */
  readonly store: boolean
  readonly meta: ResponseMeta
  /** Bytes of the client's body. */
  readonly rawBytes: number
  /** The whole input once resolved (history first, references replaced): what every provider gets. */
  items: readonly Json[]
  /** Body bytes plus the resolved history's, for the reservation. */
  promptBytes: number
  /** The account that asked (owner of what is stored), set before routing. */
  accountId: string
  /** The chat translation (its bodies by candidate, tool names), made on the first translated candidate. */
  chat: { variants: ChatVariants; names: ToolNames; refusal: RouterError | null } | null
  native: BufferBody | null
  /** For a model that speaks only Anthropic's format: the chat translation, translated again. */
  anthropic: BufferBody | null
}

const CHAT_HEADERS = ['content-type', 'application/json', 'accept', 'application/json, text/event-stream']
const ANTHROPIC_HEADERS = [...CHAT_HEADERS, 'anthropic-version', '2023-06-01']

const ROLES = new Set(['user', 'assistant', 'system', 'developer'])
const USER_PARTS = new Set(['input_text', 'input_image', 'input_file'])
const ASSISTANT_PARTS = new Set(['output_text', 'refusal', 'input_text'])
const CHOICES = new Set(['auto', 'none', 'required'])
const FORMATS = new Set(['text', 'json_object', 'json_schema'])
/** Request members that ask for what the router does not provide. */
const REFUSED: ReadonlyArray<readonly [string, string]> = [
  ['background', 'background responses are not supported by this router'],
  ['conversation', 'conversations are not supported by this router: use previous_response_id or send the history in input'],
  ['prompt', 'stored prompt templates are not supported by this router'],
]
/** Ids the router mints (and a native provider's own): a prefix, then letters, digits, `_` or `-`. */
const ID = /^[A-Za-z0-9_-]{1,256}$/
/** The most input items one request may carry. */
export const MAX_INPUT_ITEMS = 10_000
/** metadata: OpenAI's bounds (16 pairs, keys of 64 and values of 512 characters). */
const METADATA_PAIRS = 16

function invalid(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

function isObject(v: unknown): v is Json {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function checkParts(content: unknown, role: string, where: string): RouterError | null {
  if (typeof content === 'string') return null
  if (!Array.isArray(content)) return invalid(`${where} must be a string or an array of content parts`)
  const allowed = role === 'assistant' ? ASSISTANT_PARTS : role === 'user' ? USER_PARTS : ASSISTANT_PARTS
  for (let j = 0; j < content.length; j++) {
    const part = content[j]
    const at = `${where}[${j}]`
    if (!isObject(part) || typeof part.type !== 'string') return invalid(`${at} must be an object with a type`)
    if (!allowed.has(part.type)) {
      return invalid(`${at}.type ${JSON.stringify(part.type)} is not a content part of a ${role} message (use ${[...allowed].join(', ')})`)
    }
    if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text !== 'string') return invalid(`${at}.text must be a string`)
    if (part.type === 'refusal' && typeof part.refusal !== 'string') return invalid(`${at}.refusal must be a string`)
    if (part.type === 'input_image' && typeof part.image_url !== 'string') {
      return invalid(`${at}: an input_image needs an image_url (a URL or a data: URL); file_id is not supported by this router`)
    }
    if (part.type === 'input_file' && typeof part.file_data !== 'string') {
      return invalid(`${at}: an input_file needs file_data (a data: URL); file_id and file_url are not supported by this router`)
    }
  }
  return null
}

/** One input item; `references` collects the ids of item_reference items. */
function checkItem(item: unknown, i: number, references: string[]): RouterError | null {
  const at = `input[${i}]`
  if (!isObject(item)) return invalid(`${at} must be an object`)
  const type = item.type ?? 'message'
  if (typeof type !== 'string') return invalid(`${at}.type must be a string`)
  // Other types (built-in and custom tool calls and their outputs) go to a native provider as sent; the chat
  // translation leaves them out, with a note in the trace.
  switch (type) {
    case 'message': {
      if (!ROLES.has(item.role)) return invalid(`${at}.role must be one of ${[...ROLES].join(', ')}`)
      return checkParts(item.content, item.role, `${at}.content`)
    }
    case 'function_call':
      if (typeof item.call_id !== 'string' || item.call_id === '') return invalid(`${at}.call_id must be a non-empty string`)
      if (typeof item.name !== 'string' || item.name === '') return invalid(`${at}.name must be a non-empty string`)
      if (typeof item.arguments !== 'string') return invalid(`${at}.arguments must be a string (the JSON text of the arguments)`)
      if (item.namespace !== undefined && item.namespace !== null && typeof item.namespace !== 'string') return invalid(`${at}.namespace must be a string`)
      return null
    case 'function_call_output':
      if (typeof item.call_id !== 'string' || item.call_id === '') return invalid(`${at}.call_id must be a non-empty string`)
      if (typeof item.output === 'string') return null
      if (!Array.isArray(item.output)) return invalid(`${at}.output must be a string or an array of content parts`)
      return checkParts(item.output, 'user', `${at}.output`)
    case 'item_reference':
      if (typeof item.id !== 'string' || !ID.test(item.id)) return invalid(`${at}.id must be the id of an item of a stored response`)
      references.push(item.id)
      return null
    default:
      return null
  }
}

function checkFunction(t: Json, at: string): RouterError | null {
  if (typeof t.name !== 'string' || t.name === '') return invalid(`${at}.name must be a non-empty string`)
  if (t.parameters !== undefined && t.parameters !== null && !isObject(t.parameters)) return invalid(`${at}.parameters must be a JSON schema object`)
  return null
}

/**
 * Function tools, `namespace` groups of function and custom tools, custom (free-form) tools and built-in tools
 * (any other type: web_search, local_shell, mcp, …, the provider's to judge). What the router reads is checked.
 */
function checkTools(tools: unknown): RouterError | null {
  if (!Array.isArray(tools)) return invalid('tools must be an array')
  for (let i = 0; i < tools.length; i++) {
    const t = tools[i]
    const at = `tools[${i}]`
    if (!isObject(t) || typeof t.type !== 'string') return invalid(`${at} must be an object with a type`)
    if (t.type === 'function') {
      const bad = checkFunction(t, at)
      if (bad !== null) return bad
    } else if (t.type === 'custom') {
      if (typeof t.name !== 'string' || t.name === '') return invalid(`${at}.name must be a non-empty string`)
    } else if (t.type === 'namespace') {
      if (typeof t.name !== 'string' || t.name === '') return invalid(`${at}.name must be a non-empty string`)
      if (!Array.isArray(t.tools) || t.tools.length === 0) return invalid(`${at}.tools must be a non-empty array of function or custom tools`)
      for (let j = 0; j < t.tools.length; j++) {
        const inner = t.tools[j]
        const where = `${at}.tools[${j}]`
        if (!isObject(inner) || (inner.type !== 'function' && inner.type !== 'custom')) return invalid(`${where} must be a function or custom tool`)
        const bad = inner.type === 'function' ? checkFunction(inner, where) : typeof inner.name === 'string' && inner.name !== '' ? null : invalid(`${where}.name must be a non-empty string`)
        if (bad !== null) return bad
      }
    }
  }
  return null
}

function checkToolChoice(choice: unknown): RouterError | null {
  if (typeof choice === 'string') return CHOICES.has(choice) ? null : invalid('tool_choice must be auto, none, required or an object with a type')
  if (!isObject(choice) || typeof choice.type !== 'string') return invalid('tool_choice must be auto, none, required or an object with a type')
  if (choice.type === 'function' || choice.type === 'custom') {
    if (typeof choice.name !== 'string' || choice.name === '') return invalid('tool_choice.name must be a non-empty string')
    if (choice.namespace !== undefined && typeof choice.namespace !== 'string') return invalid('tool_choice.namespace must be a string')
  }
  return null
}

function checkText(text: unknown): RouterError | null {
  if (!isObject(text)) return invalid('text must be an object')
  const format = text.format
  if (format === undefined || format === null) return null
  if (!isObject(format) || !FORMATS.has(format.type)) return invalid('text.format.type must be text, json_object or json_schema')
  if (format.type === 'json_schema') {
    if (typeof format.name !== 'string' || format.name === '') return invalid('text.format.name is required for json_schema')
    if (!isObject(format.schema)) return invalid('text.format.schema must be a JSON schema object')
  }
  return null
}

function checkMetadata(metadata: unknown): RouterError | null {
  if (!isObject(metadata)) return invalid('metadata must be an object')
  const keys = Object.keys(metadata)
  if (keys.length > METADATA_PAIRS) return invalid(`metadata may hold at most ${METADATA_PAIRS} pairs`)
  for (const key of keys) {
    const value = metadata[key]
    if (key.length > 64 || typeof value !== 'string' || value.length > 512) return invalid('metadata keys must be strings of at most 64 characters, values strings of at most 512')
  }
  return null
}

/** The request's fields a response object repeats, OpenAI's defaults where it sent none. */
function echoOf(body: Json, previousId: string | null, store: boolean): Json {
  return {
    instructions: typeof body.instructions === 'string' ? body.instructions : null,
    max_output_tokens: typeof body.max_output_tokens === 'number' ? body.max_output_tokens : null,
    parallel_tool_calls: body.parallel_tool_calls !== false,
    previous_response_id: previousId,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store,
    temperature: typeof body.temperature === 'number' ? body.temperature : 1,
    text: { format: isObject(body.text?.format) ? body.text.format : { type: 'text' } },
    tool_choice: body.tool_choice ?? 'auto',
    tools: Array.isArray(body.tools) ? body.tools : [],
    top_p: typeof body.top_p === 'number' ? body.top_p : 1,
    truncation: typeof body.truncation === 'string' ? body.truncation : 'disabled',
    user: typeof body.user === 'string' ? body.user : null,
    metadata: isObject(body.metadata) ? body.metadata : {},
  }
}

/** Checks what the router and the translation rely on; the rest is the provider's to judge. */
export function parseResponses(json: JsonBody): ResponsesRequest | RouterError {
  const body = json.value as Json
  const model = body.model
  if (typeof model !== 'string' || model.length === 0) return invalid('model is required and must be a non-empty string')
  for (const [key, message] of REFUSED) if (body[key] !== undefined && body[key] !== null && body[key] !== false) return invalid(message)
  const previous = body.previous_response_id
  if (previous !== undefined && previous !== null && (typeof previous !== 'string' || !previous.startsWith('resp_') || !ID.test(previous))) {
    return invalid('previous_response_id must be the id of a stored response (resp_…)')
  }
  const previousId = typeof previous === 'string' ? previous : null
  let input: Json[]
  const references: string[] = []
  if (typeof body.input === 'string') input = [{ type: 'message', role: 'user', content: body.input }]
  else if (Array.isArray(body.input)) {
    if (body.input.length > MAX_INPUT_ITEMS) return invalid(`input may hold at most ${MAX_INPUT_ITEMS} items`)
    for (let i = 0; i < body.input.length; i++) {
      const bad = checkItem(body.input[i], i, references)
      if (bad !== null) return bad
    }
    input = body.input
  } else return invalid('input is required: a string, or an array of input items')
  if (input.length === 0 && previousId === null) return invalid('input must not be empty')
  if (body.instructions !== undefined && body.instructions !== null && typeof body.instructions !== 'string') return invalid('instructions must be a string')
  if (body.tools !== undefined && body.tools !== null) {
    const bad = checkTools(body.tools)
    if (bad !== null) return bad
  }
  if (body.tool_choice !== undefined && body.tool_choice !== null) {
    const bad = checkToolChoice(body.tool_choice)
    if (bad !== null) return bad
  }
  if (body.text !== undefined && body.text !== null) {
    const bad = checkText(body.text)
    if (bad !== null) return bad
  }
  if (body.metadata !== undefined && body.metadata !== null) {
    const bad = checkMetadata(body.metadata)
    if (bad !== null) return bad
  }
  if (body.reasoning !== undefined && body.reasoning !== null) {
    if (!isObject(body.reasoning)) return invalid('reasoning must be an object')
    if (body.reasoning.effort !== undefined && body.reasoning.effort !== null && typeof body.reasoning.effort !== 'string') return invalid('reasoning.effort must be a string')
  }
  const max = body.max_output_tokens
  if (max !== undefined && max !== null && !(typeof max === 'number' && Number.isSafeInteger(max) && max > 0)) return invalid('max_output_tokens must be a positive integer')
  for (const key of ['stream', 'store', 'parallel_tool_calls'] as const) {
    if (body[key] !== undefined && body[key] !== null && typeof body[key] !== 'boolean') return invalid(`${key} must be a boolean`)
  }
  for (const key of ['temperature', 'top_p'] as const) {
    if (body[key] !== undefined && body[key] !== null && (typeof body[key] !== 'number' || !Number.isFinite(body[key]))) return invalid(`${key} must be a number`)
  }
  if (body.user !== undefined && body.user !== null && typeof body.user !== 'string') return invalid('user must be a string')
  const store = body.store !== false
  const meta: ResponseMeta = { id: newId('resp_'), createdAt: Math.floor(Date.now() / 1000), model, echo: echoOf(body, previousId, store) }
  return {
    model,
    stream: body.stream === true,
    paramMask: paramMask(body),
    maxOutput: typeof max === 'number' ? max : -1,
    provider: body.provider,
    promptBytes: json.raw.length,
    rawBytes: json.raw.length,
    body,
    input,
    references,
    previousId,
    store,
    meta,
    items: input,
    accountId: '',
    chat: null,
    native: null,
    anthropic: null,
  }
}

/** The chat parameters a translated request sets, as routing/params.ts bits (what require-parameters judges). */
function paramMask(body: Json): number {
  let mask = 0
  if (typeof body.temperature === 'number') mask |= paramBit('temperature')
  if (typeof body.top_p === 'number') mask |= paramBit('top_p')
  if (Array.isArray(body.tools) && body.tools.length > 0) mask |= paramBit('tools')
  if (body.tool_choice !== undefined && body.tool_choice !== null) mask |= paramBit('tool_choice')
  if (typeof body.parallel_tool_calls === 'boolean') mask |= paramBit('parallel_tool_calls')
  const format = body.text?.format?.type
  if (format === 'json_object' || format === 'json_schema') mask |= paramBit('response_format')
  if (typeof body.reasoning?.effort === 'string') mask |= paramBit('reasoning')
  return mask
}

function isNative(offer: Offer): boolean {
  return offer.model.formats.includes('responses')
}

const EMPTY = new BufferBody(Buffer.alloc(0))

/** What the notes call the two members a translated candidate may not get. */
const UNSENT = { reasoning: 'reasoning.effort', format: 'text.format' } as const

function chatOf(req: ResponsesRequest): NonNullable<ResponsesRequest['chat']> {
  const translation = toChatCompletions(req.body, req.items)
  const refusal = translation.refusal === null ? null : invalid(translation.refusal)
  return { variants: new ChatVariants(translation, UNSENT), names: translation.names, refusal }
}

/** How to try one candidate: natively, or translated to chat. */
export function planResponses(req: ResponsesRequest, offer: Offer): AttemptPlan {
  if (isNative(offer)) {
    req.native ??= new BufferBody(toNativeResponses(req.body, req.items))
    return {
      path: '/v1/responses',
      headers: CHAT_HEADERS,
      body: req.native,
      codec: req.stream ? new ResponsesNativeStreamCodec(req.meta) : new ResponsesNativeJsonCodec(req.meta),
    }
  }
  const chat = (req.chat ??= chatOf(req))
  const names = chat.names
  if (!offer.model.formats.includes('openai')) {
    // Anthropic only: the chat translation, translated on as the chat surface does for such a model.
    req.anthropic ??= new BufferBody(toAnthropicMessages(chat.variants.whole()))
    const codec = req.stream ? new ResponsesViaAnthropicStreamCodec(req.meta, names) : new ResponsesViaAnthropicJsonCodec(req.meta, names)
    if (chat.refusal !== null) return { path: '/v1/messages', headers: ANTHROPIC_HEADERS, body: req.anthropic, codec, refusal: chat.refusal }
    const tr = chat.variants.translation
    // Anthropic's output format always carries a schema: JSON mode has no equivalent there (toAnthropicMessages).
    const jsonMode = (tr.responseFormat as { type?: unknown } | null)?.type === 'json_object'
    const notes = jsonMode ? [...tr.notes, 'text.format json_object has no Anthropic equivalent and was not sent'] : tr.notes
    return notes.length === 0 ? { path: '/v1/messages', headers: ANTHROPIC_HEADERS, body: req.anthropic, codec } : { path: '/v1/messages', headers: ANTHROPIC_HEADERS, body: req.anthropic, codec, notes }
  }
  const codec = req.stream ? new ResponsesTranslatedStreamCodec(req.meta, names) : new ResponsesTranslatedJsonCodec(req.meta, names)
  if (chat.refusal !== null) return { path: '/v1/chat/completions', headers: CHAT_HEADERS, body: EMPTY, codec, refusal: chat.refusal }
  const { body, notes } = chat.variants.for(offer)
  return notes.length === 0 ? { path: '/v1/chat/completions', headers: CHAT_HEADERS, body, codec } : { path: '/v1/chat/completions', headers: CHAT_HEADERS, body, codec, notes }
}

/** The parts of the record that need no store (stored-responses.ts adds prepare and keep). */
export const responsesRecord = {
  name: 'responses',
  modelType: 'chatbot' as const,
  dimension: DIMENSION_CHAT,
  parse: parseResponses,
  plan: planResponses,
  worstCase(req: ResponsesRequest, offer: Offer): bigint {
    return chatWorstCase(offer, req.promptBytes, req.maxOutput)
  },
  cost: chatCost,
  renderError,
}
