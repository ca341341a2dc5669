/**
 * What every answer of the Responses surface shares, native or translated (issue 32): ids, the response
 * object, usage in the Responses shape, SSE event text, and the errors that end a stream. Errors before the
 * answer began use the OpenAI envelope of DESIGN.md §4 (errors.ts renderError), as on chat.
 */
import { randomBytes } from 'node:crypto'
import type { ChatUsage } from '../billing/cost.js'
import { usageCount } from '../billing/usage-bound.js'
import type { RouterError } from '../errors.js'

type Json = Record<string, any>

/** A new id with OpenAI's prefix (`resp_`, `msg_`, `fc_`, `rs_`): 24 random bytes, hex. */
export function newId(prefix: string): string {
  return prefix + randomBytes(24).toString('hex')
}

/** What a response object repeats of its request, and its identity: fixed when the request is read. */
export interface ResponseMeta {
  readonly id: string
  /** Seconds since the epoch. */
  readonly createdAt: number
  readonly model: string
  /** The request's fields a response object echoes (instructions, tools, store, previous_response_id…). */
  readonly echo: Json
}

/** Status of a whole answer, and why it is incomplete when it is. */
export interface Outcome {
  readonly status: 'completed' | 'incomplete' | 'failed' | 'in_progress'
  readonly incomplete?: string
  readonly error?: { code: string; message: string }
}

/** The response object (OpenAI's `object: "response"`), members in OpenAI's order. */
export function responseObject(meta: ResponseMeta, outcome: Outcome, output: unknown[], usage: Json | null): Json {
  return {
    id: meta.id,
    object: 'response',
    created_at: meta.createdAt,
    status: outcome.status,
    error: outcome.error ?? null,
    incomplete_details: outcome.incomplete === undefined ? null : { reason: outcome.incomplete },
    model: meta.model,
    output,
    ...meta.echo,
    usage,
  }
}

function count(n: unknown): number {
  return Math.max(0, usageCount(n))
}

/**
 * Usage in the Responses shape for the usage the request is billed by (`billed`), with the provider's cached
 * prompt tokens and reasoning tokens (from its chat usage `raw`) where it reported them.
 */
export function responsesUsage(billed: ChatUsage, raw: unknown): Json {
  const r = (raw !== null && typeof raw === 'object' ? raw : {}) as Json
  const cached = Math.min(count(r.prompt_tokens_details?.cached_tokens), billed.prompt_tokens)
  const reasoning = Math.min(count(r.completion_tokens_details?.reasoning_tokens), billed.completion_tokens)
  const usage: Json = {
    input_tokens: billed.prompt_tokens,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: billed.completion_tokens,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: billed.prompt_tokens + billed.completion_tokens,
  }
  if (billed.estimated === true) usage.estimated = true
  return usage
}

/** A Responses usage object as the chat usage the loop bills, or null when its counts are missing or not counts. */
export function chatUsageOfResponses(usage: unknown): { prompt_tokens: number; completion_tokens: number } | null {
  if (usage === null || typeof usage !== 'object') return null
  const u = usage as Json
  const input = usageCount(u.input_tokens)
  const output = usageCount(u.output_tokens)
  if (input < 0 || output < 0) return null
  return { prompt_tokens: input, completion_tokens: output }
}

/** One SSE event of the Responses stream: `event: <type>` and its data. */
export function sseEvent(type: string, data: string): string {
  return `event: ${type}\ndata: ${data}\n\n`
}

/** The error a stream ended with: our code and envelope type, and a message. */
export interface StreamError {
  readonly code: string
  readonly type: string
  readonly message: string
}

/** A RouterError as the error a stream ends with. */
export function streamError(err: RouterError): StreamError {
  return { code: err.code, type: err.type, message: err.message }
}

/**
 * The events that end a stream that failed, never a response.completed: `response.failed` with the response
 * as it stood (when one had begun), then an `error` event. The error event holds the error both flat (OpenAI's
 * documented event: code, message, param) and as an `error` object, which is what the openai client raises
 * (an APIError) and the AI SDK reports (an error part); both carry the request id and the trace.
 */
export function failureEvents(response: Json | null, sequence: number, err: StreamError, requestId: string, trace: Record<string, unknown>): string {
  let out = ''
  if (response !== null) {
    const failed = { ...response, status: 'failed', error: { code: err.code, message: err.message }, x_svc_trace: trace }
    out += sseEvent('response.failed', JSON.stringify({ type: 'response.failed', sequence_number: sequence++, response: failed }))
  }
  const error = { type: err.type, code: err.code, message: err.message, param: null }
  const data = { type: 'error', sequence_number: sequence, code: err.code, message: err.message, param: null, error, request_id: requestId, x_svc_trace: trace }
  return out + sseEvent('error', JSON.stringify(data))
}
