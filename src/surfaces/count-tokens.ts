/**
 * POST /v1/messages/count_tokens (Anthropic's token counting, the SDKs' `messages.countTokens`): `{"input_tokens":
 * N}` for a Messages request. N is the provider's own count where an Anthropic-native provider of the model can
 * give it (the request forwarded to its /v1/messages/count_tokens, as sent), else the router's estimate, about
 * four bytes a token over the system prompt, messages and tools (what billing estimates a prompt by). The
 * `X-SVC-Token-Count` header says which (`provider` or `estimate`). Not billed; it needs an `sk-` key (x-api-key
 * or Bearer, as /v1/messages) and counts as a request of the account's rate limit, since it may reach a
 * provider. The routing headers are checked as on /v1/messages (a malformed one is the same 400) and two of them
 * choose who counts: a pinned provider counts only if it is that one, and the trust mode is a floor. The others
 * (sort, fallbacks, parameters, prices) have nothing to choose here. Errors are in Anthropic's envelope.
 */
import type { Authenticator, Principal } from '../auth/principal.js'
import { rateLimitHeaders, type RateDecision, type RateGate } from '../auth/rate-limit.js'
import { renderAnthropicError } from '../codecs/anthropic-wire.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import type { Offer } from '../routing/offers.js'
import { parseRoutingHeaders, RoutingPrefs } from '../routing/preferences.js'
import type { RoutingTable } from '../routing/table.js'
import type { Handler } from '../server/app.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'
import type { UpstreamPools } from '../upstream/pools.js'
import { DEFAULT_ANTHROPIC_VERSION } from './messages.js'

export interface CountTokensDeps {
  readonly authenticate: Authenticator
  readonly limiter: RateGate
  readonly table: RoutingTable
  readonly pools: UpstreamPools
  readonly maxBodyBytes: number
  /** The longest wait for a provider's count before the estimate answers instead. */
  readonly timeoutMs: number
}

/** The most input tokens a provider's count is believed up to: past it (or not a count at all), the estimate. */
const MAX_COUNT = 1e9
/** The longest provider answer read. */
const MAX_ANSWER_BYTES = 64 * 1024

type Json = Record<string, unknown>

function fail(reply: Reply, head: RequestHead, err: RouterError, headers: readonly string[]): void {
  sendError(reply, err, head.requestId, headers, renderAnthropicError)
}

/** About four bytes a token over what the model reads: the system prompt, the messages and the tools. */
export function estimateInputTokens(body: Json): number {
  let bytes = 0
  for (const part of [body.system, body.messages, body.tools]) {
    if (part === undefined) continue
    try {
      bytes += typeof part === 'string' ? Buffer.byteLength(part) : Buffer.byteLength(JSON.stringify(part))
    } catch {
      // Nesting too deep to write out: counted by the whole body instead, below.
      return Math.max(1, Math.ceil(Buffer.byteLength(String(part)) / 4))
    }
  }
  return Math.max(1, Math.ceil(bytes / 4))
}

/** The healthy Anthropic-native offers of the model that this key and the routing headers allow, in registry order. */
function nativeOffers(offers: readonly Offer[], principal: Principal, prefs: RoutingPrefs): Offer[] {
  const now = performance.now()
  const floor = Math.max(principal.tier, prefs.tier)
  const usable = offers.filter(
    (o) =>
      o.model.formats.includes('anthropic') &&
      o.tier >= floor &&
      (prefs.address === '' || o.provider.address.toLowerCase() === prefs.address) &&
      (principal.allowedProviders === null || principal.allowedProviders.has(o.provider.address)),
  )
  return usable.filter((o) => o.provider.health.isHealthy(now))
}

export function createCountTokens(deps: CountTokensDeps): Handler {
  /** The provider's own count, or null (no answer, an error, not a count): the estimate answers then. */
  async function providerCount(offer: Offer, head: RequestHead, raw: Buffer): Promise<number | null> {
    const { pool, basePath } = deps.pools.upstream(offer.provider.url)
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'anthropic-version': head.anthropicVersion !== undefined && head.anthropicVersion !== '' ? head.anthropicVersion : DEFAULT_ANTHROPIC_VERSION,
    }
    if (head.anthropicBeta !== undefined && head.anthropicBeta !== '') headers['anthropic-beta'] = head.anthropicBeta
    const signal = AbortSignal.timeout(deps.timeoutMs)
    const res = await pool.request({ method: 'POST', path: basePath + '/v1/messages/count_tokens', headers, body: raw, signal })
    let size = 0
    const chunks: Buffer[] = []
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length
      if (size > MAX_ANSWER_BYTES) {
        res.body.destroy()
        return null
      }
      chunks.push(chunk)
    }
    if (res.statusCode !== 200) return null
    const value = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { input_tokens?: unknown } | null
    const n = value?.input_tokens
    return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && n <= MAX_COUNT ? n : null
  }

  function answer(reply: Reply, headers: readonly string[], count: number, source: 'provider' | 'estimate'): void {
    reply.send(200, ['Content-Type', 'application/json', ...headers, 'X-SVC-Token-Count', source], `{"input_tokens":${count}}`)
  }

  function counted(head: RequestHead, reply: Reply, principal: Principal, headers: readonly string[], raw: Buffer): void {
    let body: unknown
    try {
      body = JSON.parse(raw.toString('utf8'))
    } catch {
      return fail(reply, head, new RouterError('invalid_request', 'the request body is not valid JSON'), headers)
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      return fail(reply, head, new RouterError('invalid_request', 'the request body must be a JSON object'), headers)
    }
    const b = body as Json
    const prefs = new RoutingPrefs()
    const badHeader = parseRoutingHeaders(head, prefs)
    if (badHeader !== null) return fail(reply, head, badHeader, headers)
    if (typeof b.model !== 'string' || b.model === '') return fail(reply, head, new RouterError('invalid_request', 'model is required'), headers)
    if (!Array.isArray(b.messages) || b.messages.length === 0) {
      return fail(reply, head, new RouterError('invalid_request', 'messages is required (a non-empty array)'), headers)
    }
    const model = b.model
    if (principal.allowedModels !== null && !principal.allowedModels.has(model)) {
      return fail(reply, head, new RouterError('model_not_allowed', `this key may not use model ${model}`), headers)
    }
    const index = deps.table.model(model)
    if (index === undefined) return fail(reply, head, new RouterError('model_not_found', `model ${model} is not in the catalog`), headers)
    const offer = nativeOffers(index.offers, principal, prefs)[0]
    if (offer === undefined) return answer(reply, headers, estimateInputTokens(b), 'estimate')
    // The router's own `provider` object (deprecated routing preferences) is no field of Anthropic's.
    let forwarded = raw
    if (Object.hasOwn(b, 'provider')) {
      const { provider: _, ...rest } = b
      forwarded = Buffer.from(JSON.stringify(rest))
    }
    providerCount(offer, head, forwarded).then(
      (n) => answer(reply, headers, n ?? estimateInputTokens(b), n === null ? 'estimate' : 'provider'),
      (err: unknown) => {
        log.warn('count_tokens: the provider gave no count, the estimate answers', { request_id: head.requestId, provider: offer.provider.address, err: String(err) })
        answer(reply, headers, estimateInputTokens(b), 'estimate')
      },
    )
  }

  return function countTokens(head: RequestHead, reply: Reply): void {
    const bare = ['x-request-id', head.requestId]
    // The body is read at once (uWS needs its reader attached in this callback); it is used once the key passed.
    let raw: Buffer | null = null
    let principal: Principal | null = null
    let headers: readonly string[] = bare
    let refused = false
    const go = (): void => {
      if (raw !== null && principal !== null) counted(head, reply, principal, headers, raw)
    }
    const refuse = (err: RouterError, with_: readonly string[] = bare): void => {
      if (refused) return
      refused = true
      fail(reply, head, err, with_)
    }
    reply.readBody(
      deps.maxBodyBytes,
      (body) => {
        raw = body
        if (!refused) go()
      },
      (err) => refuse(err),
    )
    const onAuth = (authed: Principal | RouterError): void => {
      if (authed instanceof RouterError) return refuse(authed)
      const onRate = (rate: RateDecision): void => {
        const withRate = rateLimitHeaders(head.requestId, rate)
        if (!rate.allowed) {
          return refuse(new RouterError('rate_limit_exceeded', `account request limit of ${rate.limit} per minute reached`, { 'Retry-After': String(rate.retryAfter) }), withRate)
        }
        principal = authed
        headers = withRate
        if (!refused) go()
      }
      const rate = deps.limiter.take(authed.accountId, Date.now(), authed.rateLimit)
      if (rate instanceof Promise) rate.then(onRate, (err: unknown) => refuse(toRouterError(err)))
      else onRate(rate)
    }
    let authed
    try {
      authed = deps.authenticate(head)
    } catch (err) {
      return refuse(toRouterError(err))
    }
    if (authed instanceof Promise) authed.then(onAuth, (err: unknown) => refuse(toRouterError(err)))
    else onAuth(authed)
  }
}
