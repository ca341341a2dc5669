/**
 * POST /v1/chat/completions (OpenAI style, spec §4.2): validate, route, forward, stream back with the trace.
 */
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import { requestMask } from '../routing/params.js'
import { mergeBodyPreferences } from '../routing/preferences.js'
import { DIMENSION_CHAT, select } from '../routing/select.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'
import { Exchange } from '../upstream/exchange.js'
import { applyKeyPolicy, beginInference, parseJsonObject, type InferenceDeps, type InferenceStart } from './inference.js'

const STREAM_USAGE_PREFIX = Buffer.from('{"stream_options":{"include_usage":true},')

interface ChatRequest {
  readonly model: string
  readonly stream: boolean
  readonly clientWantsUsage: boolean
  readonly maxOutput: number
}

function isPositiveInteger(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0
}

/** Checks the fields the router relies on; the rest is the provider's to judge. */
export function validateChat(body: Record<string, unknown>): ChatRequest | RouterError {
  const model = body.model
  if (typeof model !== 'string' || model.length === 0) return new RouterError('invalid_request', 'model is required and must be a non-empty string')
  const messages = body.messages
  if (!Array.isArray(messages) || messages.length === 0) {
    return new RouterError('invalid_request', 'messages is required and must be a non-empty array')
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Record<string, unknown> | null
    if (m === null || typeof m !== 'object' || Array.isArray(m)) return new RouterError('invalid_request', `messages[${i}] must be an object`)
    if (typeof m.role !== 'string' || m.role.length === 0) return new RouterError('invalid_request', `messages[${i}].role must be a non-empty string`)
    const c = m.content
    if (c !== undefined && c !== null && typeof c !== 'string' && !Array.isArray(c)) {
      return new RouterError('invalid_request', `messages[${i}].content must be a string or an array of content parts`)
    }
  }
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') {
    return new RouterError('invalid_request', 'stream must be a boolean')
  }
  const so = body.stream_options
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so))) {
    return new RouterError('invalid_request', 'stream_options must be an object')
  }
  let maxOutput = -1
  for (const name of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = body[name]
    if (v === undefined || v === null) continue
    if (!isPositiveInteger(v)) return new RouterError('invalid_request', `${name} must be a positive integer`)
    if (maxOutput === -1) maxOutput = v
  }
  const stream = body.stream === true
  const clientWantsUsage = stream && (so as { include_usage?: unknown } | null | undefined)?.include_usage === true
  return { model, stream, clientWantsUsage, maxOutput }
}

/**
 * The body sent upstream: the client's bytes, except that the deprecated `provider` object is removed and
 * streams ask for usage. The common stream case is a byte splice, not a re-serialisation.
 */
export function upstreamBody(raw: Buffer, body: Record<string, unknown>, chat: ChatRequest): Buffer {
  const hasProvider = body.provider !== undefined
  const addUsage = chat.stream && !chat.clientWantsUsage
  if (!hasProvider && !addUsage) return raw
  if (!hasProvider && body.stream_options === undefined) {
    const open = raw.indexOf(123 /* { */)
    return Buffer.concat([STREAM_USAGE_PREFIX, raw.subarray(open + 1)])
  }
  const copy: Record<string, unknown> = { ...body }
  delete copy.provider
  if (addUsage) copy.stream_options = { ...(body.stream_options as object | null | undefined), include_usage: true }
  return Buffer.from(JSON.stringify(copy))
}

export function createChatCompletions(deps: InferenceDeps): (head: RequestHead, reply: Reply) => void {
  function onBody(start: InferenceStart, raw: Buffer): void {
    const { reply, head, headers, prefs, principal } = start
    const fail = (err: RouterError): void => sendError(reply, err, head.requestId, headers)
    const body = parseJsonObject(raw)
    if (body instanceof RouterError) return fail(body)
    const chat = validateChat(body)
    if (chat instanceof RouterError) return fail(chat)
    try {
      mergeBodyPreferences(body.provider, prefs)
    } catch (err) {
      return fail(err as RouterError)
    }
    const policy = applyKeyPolicy(principal, prefs, chat.model)
    if (policy !== null) return fail(policy)

    const index = deps.table.model(chat.model)
    if (index === undefined) return fail(new RouterError('model_not_found', `model ${chat.model} is not in the catalog (see GET /v1/models)`))
    if (index.offers[0]!.model.type !== 'chatbot') {
      return fail(new RouterError('model_not_supported_on_surface', `model ${chat.model} is a ${index.offers[0]!.model.type} model, not a chat model`))
    }
    const pinned = prefs.address === '' ? null : (deps.table.provider(prefs.address) ?? null)
    const selection = select(
      index,
      prefs,
      {
        dimension: DIMENSION_CHAT,
        paramMask: requestMask(body),
        maxOutput: chat.maxOutput,
        allowedProviders: principal.allowedProviders,
        now: performance.now(),
      },
      pinned,
    )
    if (selection instanceof RouterError) return fail(selection)

    const forward = (): void => {
      if (reply.aborted) return
      const billing = principal.keyId === null ? null : ledger.open(principal, head.requestId)
      const exchange = new Exchange(
        deps.exchange,
        {
          requestId: head.requestId,
          startedAt: head.startedAt,
          model: chat.model,
          path: '/v1/chat/completions',
          body: upstreamBody(raw, body, chat),
          stream: chat.stream,
          clientWantsUsage: chat.clientWantsUsage,
          baseHeaders: headers,
          maxOutput: chat.maxOutput,
          billing,
        },
        reply,
        selection,
      )
      exchange.start()
    }
    // The ledger reads a principal's books from the store once; after that admission is synchronous.
    const ledger = deps.exchange.ledger
    const warming = principal.keyId === null ? null : ledger.prepare(principal)
    if (warming === null) return forward()
    warming.then(forward, (err: unknown) => {
      log.error('billing: loading the account books failed', { err: String(err), account: principal.accountId })
      fail(toRouterError(err))
    })
  }

  return function handleChatCompletions(head: RequestHead, reply: Reply): void {
    beginInference(deps, head, reply, onBody)
  }
}
