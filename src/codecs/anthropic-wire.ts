/**
 * What every Anthropic-format answer shares, native or translated (DESIGN.md §4 `/v1/messages`): the error
 * envelope (Anthropic's shape with our code added) and the usage as the ledger bills it.
 */
import { meteredUsage, type ChatUsage } from '../billing/cost.js'
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

function count(n: unknown): number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : -1
}

/**
 * Anthropic usage as the chat usage the loop bills. Anthropic's input_tokens excludes the cache tokens, which
 * are prompt tokens all the same (billed at the prompt price). Null when the counts are missing or not counts.
 */
export function chatUsageOf(input: unknown, output: unknown, cacheCreation: unknown, cacheRead: unknown): { prompt_tokens: number; completion_tokens: number } | null {
  const i = count(input)
  const o = count(output)
  if (i < 0 || o < 0) return null
  return { prompt_tokens: i + Math.max(0, count(cacheCreation)) + Math.max(0, count(cacheRead)), completion_tokens: o }
}

/** Usage of an Anthropic `usage` object, or estimated from the prompt size and `completionEstimate`. */
export function meteredAnthropicUsage(usage: unknown, promptBytes: number, completionEstimate: number): ChatUsage {
  const u = (usage ?? {}) as Record<string, unknown>
  const reported = typeof usage === 'object' && usage !== null ? chatUsageOf(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens) : null
  return meteredUsage(reported, promptBytes, completionEstimate)
}
