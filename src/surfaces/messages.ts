/**
 * POST /v1/messages (Anthropic style, DESIGN.md §4) as a surface record over the shared engine: a candidate
 * whose model lists `anthropic` gets the client's bytes on its /v1/messages; any other gets the request
 * translated to OpenAI chat (made once, on the first such candidate) and its answer translated back.
 */
import { chatCost, chatWorstCase } from '../billing/cost.js'
import { AnthropicJsonCodec, AnthropicStreamCodec } from '../codecs/anthropic-native.js'
import { AnthropicTranslatedJsonCodec } from '../codecs/anthropic-json-translation.js'
import { AnthropicTranslatedStreamCodec } from '../codecs/anthropic-stream-translation.js'
import { renderAnthropicError } from '../codecs/anthropic-wire.js'
import type { JsonBody } from '../codecs/json-body.js'
import { spliceMembers } from '../codecs/json-body.js'
import { verifyTeeOf } from '../tee/flag.js'
import { isClientTool, outputFormatOf, reasoningEffortOf, stopSequencesOf, toOpenAiChat, type ChatTranslation } from '../codecs/messages-request-translation.js'
import { RouterError } from '../errors.js'
import type { Offer } from '../routing/offers.js'
import { paramBit } from '../routing/params.js'
import { DIMENSION_CHAT } from '../routing/select.js'
import type { RequestHead } from '../server/request-head.js'
import type { AttemptPlan } from '../upstream/plan.js'
import { BufferBody } from '../upstream/request-body.js'
import { ChatVariants } from './chat-variants.js'
import type { Surface, SurfaceRequest } from './surface.js'

export interface MessagesRequest extends SurfaceRequest {
  readonly body: Record<string, any>
  /** The client's bytes, `provider` removed: what a native candidate gets. */
  readonly native: BufferBody
  /** A native candidate's request headers: the client's anthropic-version (or the default) and anthropic-beta. */
  readonly nativeHeaders: readonly string[]
  /** The request's stop_sequences: how a translated answer's "stop" is told from a stop_sequence. */
  readonly stops: readonly string[]
  /** The OpenAI chat translation, made on the first translated plan. */
  translated: ChatTranslation | null
  /** Its bodies and trace notes by which of reasoning_effort and response_format the candidate gets. */
  variants: ChatVariants | null
}

const CHAT_HEADERS = ['content-type', 'application/json', 'accept', 'application/json, text/event-stream']
/** The anthropic-version a native candidate gets when the client sent none. */
export const DEFAULT_ANTHROPIC_VERSION = '2023-06-01'
const NATIVE_HEADERS = [...CHAT_HEADERS, 'anthropic-version', DEFAULT_ANTHROPIC_VERSION]

/**
 * What a native candidate gets of the client's Anthropic headers: anthropic-version and anthropic-beta as sent
 * (they select the wire format and features the client reads). A translated candidate gets neither. A value
 * with a byte the upstream request cannot carry is the client's error (400), found before any attempt: sent on,
 * it failed every native candidate's dispatch and counted against their health.
 */
function nativeHeaders(head: RequestHead | undefined): readonly string[] | RouterError {
  const version = head?.anthropicVersion ?? ''
  const beta = head?.anthropicBeta ?? ''
  if (version === '' && beta === '') return NATIVE_HEADERS
  if (!isPrintableAscii(version)) return invalid('the anthropic-version header may hold only printable ASCII characters')
  if (!isPrintableAscii(beta)) return invalid('the anthropic-beta header may hold only printable ASCII characters')
  const headers = [...CHAT_HEADERS, 'anthropic-version', version === '' ? DEFAULT_ANTHROPIC_VERSION : version]
  if (beta !== '') headers.push('anthropic-beta', beta)
  return headers
}

/** Visible ASCII, space and tab: what a header value forwarded as it came may hold. */
function isPrintableAscii(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if ((c < 0x20 && c !== 0x09) || c > 0x7e) return false
  }
  return true
}

/** The Anthropic fields a request may set, by the OpenAI parameter an openai candidate must support for them. */
const PARAMS: ReadonlyArray<readonly [string, number]> = [
  ['temperature', paramBit('temperature')],
  ['top_p', paramBit('top_p')],
  ['top_k', paramBit('top_k')],
  ['stop_sequences', paramBit('stop')],
  ['tools', paramBit('tools')],
  ['tool_choice', paramBit('tool_choice')],
]

const REASONING = paramBit('reasoning')
const RESPONSE_FORMAT = paramBit('response_format')

/** `system` turns in `messages`: Claude Code's mid-conversation system messages (beta mid-conversation-system-2026-04-07). */
const ROLES = new Set(['user', 'assistant', 'system'])
const CHOICES = new Set(['auto', 'any', 'tool', 'none'])

function invalid(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

function isObject(v: unknown): v is Record<string, any> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function checkBlocks(content: unknown, where: string): RouterError | null {
  if (typeof content === 'string') return null
  if (!Array.isArray(content)) return invalid(`${where} must be a string or an array of content blocks`)
  for (let j = 0; j < content.length; j++) {
    const block = content[j]
    // Other block types (server tool calls and results, documents, search results…) are the provider's to judge.
    if (!isObject(block) || typeof block.type !== 'string') return invalid(`${where}[${j}] must be an object with a type`)
    if (block.type === 'text' && typeof block.text !== 'string') return invalid(`${where}[${j}].text must be a string`)
    if (block.type === 'tool_use' && (typeof block.id !== 'string' || typeof block.name !== 'string')) {
      return invalid(`${where}[${j}]: a tool_use block needs a string id and name`)
    }
    if (block.type === 'tool_result' && typeof block.tool_use_id !== 'string') return invalid(`${where}[${j}].tool_use_id must be a string`)
    if (block.type === 'image' && !isObject(block.source)) return invalid(`${where}[${j}].source must be an object`)
  }
  return null
}

/** Checks what the router and the translation rely on; the rest is the provider's to judge. */
export function parseMessages(json: JsonBody, head?: RequestHead): MessagesRequest | RouterError {
  const body = json.value as Record<string, any>
  const model = body.model
  if (typeof model !== 'string' || model.length === 0) return invalid('model is required and must be a non-empty string')
  const max = body.max_tokens
  if (typeof max !== 'number' || !Number.isSafeInteger(max) || max <= 0) return invalid('max_tokens is required and must be a positive integer')
  const messages = body.messages
  if (!Array.isArray(messages) || messages.length === 0) return invalid('messages is required and must be a non-empty array')
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]
    if (!isObject(m)) return invalid(`messages[${i}] must be an object`)
    if (!ROLES.has(m.role)) return invalid(`messages[${i}].role must be "user", "assistant" or "system"`)
    const bad = checkBlocks(m.content, `messages[${i}].content`)
    if (bad !== null) return bad
  }
  if (body.system !== undefined) {
    const bad = checkBlocks(body.system, 'system')
    if (bad !== null) return bad
  }
  if (body.stream !== undefined && typeof body.stream !== 'boolean') return invalid('stream must be a boolean')
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) return invalid('tools must be an array')
    for (let i = 0; i < body.tools.length; i++) {
      const t = body.tools[i]
      if (!isObject(t)) return invalid(`tools[${i}] must be an object`)
      // A server tool (web_search_20250305, bash_…, mcp_toolset…) is the native provider's to judge.
      if (!isClientTool(t)) {
        if (typeof t.type !== 'string') return invalid(`tools[${i}].type must be a string`)
        continue
      }
      if (typeof t.name !== 'string' || t.name === '') return invalid(`tools[${i}].name must be a non-empty string`)
    }
  }
  const choice = body.tool_choice
  if (choice !== undefined && (!isObject(choice) || !CHOICES.has(choice.type))) return invalid('tool_choice.type must be one of auto, any, tool, none')
  if (choice?.type === 'tool' && typeof choice.name !== 'string') return invalid('tool_choice.name is required when tool_choice.type is "tool"')
  if (body.stop_sequences !== undefined && !(Array.isArray(body.stop_sequences) && body.stop_sequences.every((s: unknown) => typeof s === 'string'))) {
    return invalid('stop_sequences must be an array of strings')
  }
  for (const key of ['temperature', 'top_p', 'top_k'] as const) {
    if (body[key] !== undefined && typeof body[key] !== 'number') return invalid(`${key} must be a number`)
  }
  if (body.metadata !== undefined && !isObject(body.metadata)) return invalid('metadata must be an object')
  let paramMask = 0
  for (const [name, bit] of PARAMS) if (body[name] !== undefined && body[name] !== null) paramMask |= bit
  if (body.thinking !== undefined && body.thinking !== null && !isObject(body.thinking)) return invalid('thinking must be an object')
  if (body.output_config !== undefined && body.output_config !== null && !isObject(body.output_config)) return invalid('output_config must be an object')
  if (reasoningEffortOf(body) !== null) paramMask |= REASONING
  if (outputFormatOf(body) !== null) paramMask |= RESPONSE_FORMAT
  const headers = nativeHeaders(head)
  if (headers instanceof RouterError) return headers
  const verifyTee = verifyTeeOf(json, head)
  if (verifyTee instanceof RouterError) return verifyTee
  const dropped = body.provider === undefined ? (body.verify_tee === undefined ? [] : ['verify_tee']) : body.verify_tee === undefined ? ['provider'] : ['provider', 'verify_tee']
  const native = new BufferBody(dropped.length === 0 ? json.raw : spliceMembers(json, dropped, {}))
  return {
    model,
    stream: body.stream === true,
    paramMask,
    maxOutput: max,
    provider: body.provider,
    promptBytes: native.bytes.length,
    body,
    native,
    nativeHeaders: headers,
    stops: stopSequencesOf(body),
    translated: null,
    variants: null,
    verifyTee,
  }
}

const EMPTY = new BufferBody(Buffer.alloc(0))

/** What the notes call the two members a translated candidate may not get. */
const UNSENT = { reasoning: 'reasoning (thinking / output_config.effort)', format: 'output_config.format' } as const

function isNative(offer: Offer): boolean {
  return offer.model.formats.includes('anthropic')
}

export const messages: Surface<MessagesRequest> = {
  name: 'messages',
  modelType: 'chatbot',
  dimension: DIMENSION_CHAT,
  parse: parseMessages,
  plan(req: MessagesRequest, offer: Offer): AttemptPlan {
    if (isNative(offer)) {
      return {
        path: '/v1/messages',
        headers: req.nativeHeaders,
        body: req.native,
        codec: req.stream ? new AnthropicStreamCodec() : new AnthropicJsonCodec(),
      }
    }
    const translated = (req.translated ??= toOpenAiChat(req.body))
    const names = translated.names
    const codec = req.stream ? new AnthropicTranslatedStreamCodec(req.model, names, req.stops) : new AnthropicTranslatedJsonCodec(req.model, names, req.stops)
    if (translated.refusal !== null) {
      return { path: '/v1/chat/completions', headers: CHAT_HEADERS, body: EMPTY, codec, refusal: invalid(translated.refusal) }
    }
    const { body, notes } = (req.variants ??= new ChatVariants(translated, UNSENT)).for(offer)
    return notes.length === 0 ? { path: '/v1/chat/completions', headers: CHAT_HEADERS, body, codec } : { path: '/v1/chat/completions', headers: CHAT_HEADERS, body, codec, notes }
  },
  worstCase(req, offer) {
    return chatWorstCase(offer, req.promptBytes, req.maxOutput)
  },
  cost: chatCost,
  renderError: renderAnthropicError,
}
