/**
 * What every Anthropic-format answer shares, native or translated (DESIGN.md §4 `/v1/messages`): the error
 * envelope (Anthropic's shape with our code added) and the usage as the ledger bills it.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
import { usageCount } from '../billing/usage-bound.js'
import type { RouterError } from '../errors.js'

/** `{"type":"error","error":{"type","message","code"},"request_id"}`, the trace added after a provider was tried. */
export function renderAnthropicError(err: RouterError, requestId: string, trace?: Record<string, unknown>): string {
  const error = { type: err.type, message: err.message, code: err.code }
  return JSON.stringify(
    trace === undefined ? { type: 'error', error, request_id: requestId } : { type: 'error', error, request_id: requestId, x_svc_trace: trace },
  )
}

/** The `event: error` that ends a broken stream (never a message_stop). */
export function anthropicErrorEvent(err: RouterError, requestId: string, trace: Record<string, unknown>): string {
  return `event: error\ndata: ${renderAnthropicError(err, requestId, trace)}\n\n`
}

/**
 * An OpenAI usage object as Anthropic's: the cached prompt tokens apart (cache_read_input_tokens, which
 * input_tokens excludes). A count that is not one (billing/usage-bound.ts) is not passed on (the router bills
 * an estimate then, which the trace shows): `output` stands in for the completion, and `input` for the
 * prompt, or input_tokens is left out when `input` is null.
 */
export function anthropicUsageOf(usage: unknown, input: number | null, output: number): Record<string, unknown> {
  const u = (usage !== null && typeof usage === 'object' ? usage : {}) as Record<string, any>
  const prompt = usageCount(u.prompt_tokens)
  const completion = usageCount(u.completion_tokens)
  // Cache reads are part of the prompt: a figure beyond it is not one.
  const cached = usageCount(u.prompt_tokens_details?.cached_tokens)
  const cacheRead = prompt >= 0 && cached > 0 && cached <= prompt ? cached : 0
  const out: Record<string, unknown> = {}
  if (prompt >= 0) out.input_tokens = prompt - cacheRead
  else if (input !== null) out.input_tokens = input
  out.output_tokens = completion >= 0 ? completion : output
  if (cacheRead > 0) out.cache_read_input_tokens = cacheRead
  return out
}

/**
 * Anthropic usage as the chat usage the loop bills. Anthropic's input_tokens excludes the cache tokens, which
 * are prompt tokens all the same (billed at the prompt price). Null when the counts are missing or not counts.
 */
export function chatUsageOf(input: unknown, output: unknown, cacheCreation: unknown, cacheRead: unknown): { prompt_tokens: number; completion_tokens: number } | null {
  const i = usageCount(input)
  const o = usageCount(output)
  if (i < 0 || o < 0) return null
  return { prompt_tokens: i + Math.max(0, usageCount(cacheCreation)) + Math.max(0, usageCount(cacheRead)), completion_tokens: o }
}

/** Usage of an Anthropic `usage` object, or estimated from the prompt size and `completionEstimate`. */
export function meteredAnthropicUsage(usage: unknown, promptBytes: number, completionEstimate: number): ChatUsage {
  const u = (usage ?? {}) as Record<string, unknown>
  const reported = typeof usage === 'object' && usage !== null ? chatUsageOf(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens) : null
  return meteredUsage(reported, promptBytes, completionEstimate)
}

/**
 * Usage of an Anthropic stream. Its message_start carries output_tokens as counted when the message began (1
 * or so); only message_delta carries the whole count. A stream that ended without it (its client went away,
 * its provider broke, or never sent one) is billed for the larger of that early count and `completionEstimate`
 * (the content it relayed), marked estimated: billed the early count, a client could read a whole answer but
 * its last event, leave, and pay for one output token.
 */
export function meteredAnthropicStreamUsage(usage: unknown, final: boolean, promptBytes: number, completionEstimate: number): ChatUsage {
  const metered = meteredAnthropicUsage(usage, promptBytes, completionEstimate)
  if (final || metered.estimated === true || metered.completion_tokens >= completionEstimate) return metered
  const prompt = metered.prompt_tokens
  return { prompt_tokens: prompt, completion_tokens: completionEstimate, total_tokens: prompt + completionEstimate, estimated: true }
}

/** Anthropic's error type for an HTTP status of a provider's error answer. */
function anthropicErrorType(status: number): string {
  switch (status) {
    case 401:
      return 'authentication_error'
    case 403:
      return 'permission_error'
    case 404:
      return 'not_found_error'
    case 413:
      return 'request_too_large'
    case 429:
      return 'rate_limit_error'
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error'
  }
}

/**
 * What a provider's error answer says, whichever format it is in: OpenAI's `{"error":{"message","type"}}`,
 * Anthropic's `{"type":"error","error":{"type","message"}}`, vLLM's top-level `message`, FastAPI's `detail`.
 * `code`, ours: `invalid_request` when the provider refused the request itself (400, 413, 422), else
 * `provider_error`; the status stays the provider's.
 */
export function providerError(status: number, body: Buffer): { message: string; type: string | null; code: 'invalid_request' | 'provider_error' } {
  let message = ''
  let type: string | null = null
  try {
    const v = JSON.parse(body.toString('utf8')) as Record<string, any>
    const e = v?.error !== null && typeof v?.error === 'object' ? v.error : v
    if (typeof e?.message === 'string') message = e.message
    else if (typeof v?.detail === 'string') message = v.detail
    else if (v?.detail !== undefined) message = JSON.stringify(v.detail)
    if (typeof e?.type === 'string' && e.type !== 'error') type = e.type
  } catch {
    // Not JSON: the status says it all.
  }
  if (message === '') message = `the provider answered HTTP ${status}`
  const code = status === 400 || status === 413 || status === 422 ? 'invalid_request' : 'provider_error'
  return { message, type, code }
}

/** A translated (OpenAI) provider's error answer as this surface's error envelope, status kept. */
export function anthropicErrorOf(status: number, body: Buffer, requestId: string): string {
  const { message, code } = providerError(status, body)
  return JSON.stringify({ type: 'error', error: { type: anthropicErrorType(status), message, code }, request_id: requestId })
}
