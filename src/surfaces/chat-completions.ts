/**
 * POST /v1/chat/completions (OpenAI style, spec §4.2) as a surface record: what the router checks in the body,
 * the body sent upstream, the reservation, and the codecs of its answers. A candidate whose model speaks only
 * Anthropic's format gets the request translated. Admission and failover are the engine's.
 */
import { chatCost, chatWorstCase } from '../billing/cost.js'
import type { JsonBody } from '../codecs/json-body.js'
import { spliceMembers } from '../codecs/json-body.js'
import { ChatFromAnthropicJsonCodec, ChatFromAnthropicStreamCodec } from '../codecs/chat-answer-translation.js'
import { toAnthropicMessages } from '../codecs/chat-request-translation.js'
import { ChatJsonCodec, ChatStreamCodec } from '../codecs/openai-chat.js'
import { renderError, RouterError } from '../errors.js'
import type { Offer } from '../routing/offers.js'
import { requestMask } from '../routing/params.js'
import { DIMENSION_CHAT } from '../routing/select.js'
import type { AttemptPlan } from '../upstream/plan.js'
import { BufferBody } from '../upstream/request-body.js'
import type { RequestHead } from '../server/request-head.js'
import { verifyTeeOf } from '../tee/flag.js'
import type { Surface, SurfaceRequest } from './surface.js'

export interface ChatRequest extends SurfaceRequest {
  /** The client asked for stream usage itself (otherwise the router's usage chunk is withheld). */
  readonly clientWantsUsage: boolean
  /** What every attempt sends: the client's bytes, `provider` removed, usage asked for on streams. */
  readonly upstream: BufferBody
  readonly body: Record<string, unknown>
  /** The Anthropic translation, for a candidate whose model speaks only Anthropic's format; made once, on the first. */
  anthropic: BufferBody | null
  /** `n`: how many choices the provider generates, each up to the output bound (1 when not sent). */
  readonly choices: number
}

/** The most choices one request may ask for (`n`), as OpenAI's API bounds it. */
export const MAX_CHOICES = 128

const UPSTREAM_HEADERS = ['content-type', 'application/json', 'accept', 'application/json, text/event-stream']
const PATH = '/v1/chat/completions'
const ANTHROPIC_HEADERS = ['content-type', 'application/json', 'accept', 'application/json, text/event-stream', 'anthropic-version', '2023-06-01']

function isPositiveInteger(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0
}

function invalid(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

/** Checks the fields the router relies on; the rest is the provider's to judge. */
export function parseChat(json: JsonBody, head?: RequestHead): ChatRequest | RouterError {
  const body = json.value
  const model = body.model
  if (typeof model !== 'string' || model.length === 0) return invalid('model is required and must be a non-empty string')
  const messages = body.messages
  if (!Array.isArray(messages) || messages.length === 0) return invalid('messages is required and must be a non-empty array')
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Record<string, unknown> | null
    if (m === null || typeof m !== 'object' || Array.isArray(m)) return invalid(`messages[${i}] must be an object`)
    if (typeof m.role !== 'string' || m.role.length === 0) return invalid(`messages[${i}].role must be a non-empty string`)
    const c = m.content
    if (c !== undefined && c !== null && typeof c !== 'string' && !Array.isArray(c)) {
      return invalid(`messages[${i}].content must be a string or an array of content parts`)
    }
  }
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') return invalid('stream must be a boolean')
  const so = body.stream_options
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so))) return invalid('stream_options must be an object')
  let maxOutput = -1
  for (const name of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = body[name]
    if (v === undefined || v === null) continue
    if (!isPositiveInteger(v)) return invalid(`${name} must be a positive integer`)
    if (maxOutput === -1) maxOutput = v
  }
  const n = body.n
  if (n !== undefined && n !== null && !(isPositiveInteger(n) && n <= MAX_CHOICES)) return invalid(`n must be an integer from 1 to ${MAX_CHOICES}`)
  const verifyTee = verifyTeeOf(json, head)
  if (verifyTee instanceof RouterError) return verifyTee
  const stream = body.stream === true
  const clientWantsUsage = stream && (so as { include_usage?: unknown } | null | undefined)?.include_usage === true
  const upstream = new BufferBody(upstreamBody(json, stream, clientWantsUsage))
  return {
    model,
    stream,
    clientWantsUsage,
    maxOutput,
    paramMask: requestMask(body),
    provider: body.provider,
    promptBytes: upstream.bytes.length,
    upstream,
    body,
    anthropic: null,
    choices: typeof n === 'number' ? n : 1,
    verifyTee,
  }
}

/**
 * The body sent upstream: the client's bytes, except that the deprecated `provider` object is removed and
 * streams ask for usage. Members are spliced as bytes; only a client's own `stream_options` object is
 * re-serialised (small, and its depth is bounded by the body guard).
 */
function upstreamBody(json: JsonBody, stream: boolean, clientWantsUsage: boolean): Buffer {
  const body = json.value
  const hasProvider = body.provider !== undefined
  const hasVerify = body.verify_tee !== undefined
  const addUsage = stream && !clientWantsUsage
  if (!hasProvider && !hasVerify && !addUsage) return json.raw
  const set: Record<string, string> = {}
  if (addUsage) {
    const so = body.stream_options
    set.stream_options = so === undefined || so === null ? '{"include_usage":true}' : JSON.stringify({ ...(so as object), include_usage: true })
  }
  const removed = hasProvider ? (hasVerify ? ['provider', 'verify_tee'] : ['provider']) : hasVerify ? ['verify_tee'] : []
  return spliceMembers(json, removed, set)
}

// Anthropic's output format always carries a schema: JSON mode has no equivalent there (toAnthropicMessages).
const JSON_MODE_NOTES = ['response_format json_object has no Anthropic equivalent and was not sent'] as const

export const chatCompletions: Surface<ChatRequest> = {
  name: 'chat',
  modelType: 'chatbot',
  dimension: DIMENSION_CHAT,
  parse: parseChat,
  plan(req: ChatRequest, offer: Offer): AttemptPlan {
    if (!offer.model.formats.includes('openai')) {
      req.anthropic ??= new BufferBody(toAnthropicMessages(req.body))
      return {
        path: '/v1/messages',
        headers: ANTHROPIC_HEADERS,
        body: req.anthropic,
        codec: req.stream ? new ChatFromAnthropicStreamCodec(req.model, req.clientWantsUsage) : new ChatFromAnthropicJsonCodec(req.model),
        ...((req.body.response_format as { type?: unknown } | null | undefined)?.type === 'json_object' ? { notes: JSON_MODE_NOTES } : {}),
      }
    }
    return {
      path: PATH,
      headers: UPSTREAM_HEADERS,
      body: req.upstream,
      codec: req.stream ? new ChatStreamCodec(req.model, req.clientWantsUsage) : new ChatJsonCodec(),
    }
  },
  worstCase(req, offer) {
    // Each of the n choices may run to the output bound: the provider bills every token of every one.
    return chatWorstCase(offer, req.promptBytes, req.maxOutput, req.choices)
  },
  cost: chatCost,
  renderError,
}
