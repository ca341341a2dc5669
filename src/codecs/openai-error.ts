/**
 * A provider's own error answer (a 4xx other than 429, which goes back with its status: DESIGN.md §4 failover)
 * as the body the client of an OpenAI-format surface gets: always the envelope of DESIGN.md §4,
 * `{"error":{message,type,code},"request_id"}`, JSON, whatever the provider wrote (an HTML page, text, no body).
 */
import { isUtf8 } from 'node:buffer'
import { providerError } from './anthropic-wire.js'
import { spliceTrace } from './trace-splice.js'

/**
 * Any provider's error answer rewritten into the envelope, status kept: the message the provider gave (in
 * whichever format, see providerError) or one naming the status, the provider's type or ours, and our code
 * (`invalid_request` for 400, 413 and 422, else `provider_error`).
 */
export function openAiEnvelopeOf(status: number, body: Buffer, requestId: string): string {
  const { message, type, code } = providerError(status, body)
  return JSON.stringify({ error: { message, type: type ?? (code === 'invalid_request' ? 'invalid_request_error' : 'provider_error'), code }, request_id: requestId })
}

/**
 * An OpenAI-compatible provider's error answer for the client: an OpenAI error object (`{"error":{"message",…}}`,
 * UTF-8) is relayed as the provider wrote it, with the request's `request_id` added (spliced in, or replacing
 * the provider's own); anything else is rewritten by openAiEnvelopeOf.
 */
export function openAiErrorOf(status: number, body: Buffer, requestId: string): string | Buffer {
  // Not UTF-8: relayed, it would reach the client as bytes a strict decoder refuses.
  if (!isUtf8(body)) return openAiEnvelopeOf(status, body, requestId)
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch {
    return openAiEnvelopeOf(status, body, requestId)
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return openAiEnvelopeOf(status, body, requestId)
  const error = (value as { error?: unknown }).error
  if (error === null || typeof error !== 'object' || Array.isArray(error) || typeof (error as { message?: unknown }).message !== 'string') {
    return openAiEnvelopeOf(status, body, requestId)
  }
  // A second request_id member would be a duplicate key, which JSON readers resolve differently: ours replaces it.
  if (Object.hasOwn(value, 'request_id')) {
    try {
      return JSON.stringify({ ...value, request_id: requestId })
    } catch {
      // Nested deeper than JSON.stringify's recursion goes (JSON.parse has no such limit): our envelope instead.
      return openAiEnvelopeOf(status, body, requestId)
    }
  }
  return spliceTrace(body, ',"request_id":' + JSON.stringify(requestId)) ?? openAiEnvelopeOf(status, body, requestId)
}
