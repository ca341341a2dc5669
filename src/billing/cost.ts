/**
 * Exact cost of a served request from the provider's (or estimated) usage and the offer's prices, in atto-USD.
 */
import type { Offer } from '../routing/offers.js'

export interface ChatUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  /** Set when the provider reported no usage and the router estimated it. */
  estimated?: true
}

export interface Cost {
  readonly input: bigint
  readonly output: bigint
}

function tokens(n: unknown): bigint {
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? BigInt(n) : 0n
}

export function chatCost(offer: Offer, usage: ChatUsage): Cost {
  return {
    input: tokens(usage.prompt_tokens) * offer.promptPrice,
    output: tokens(usage.completion_tokens) * offer.completionPrice,
  }
}

/** Output bound of a request that sent no max_tokens to an offer that reports neither output cap nor context. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 4096

/**
 * The most output a chat request can produce at this offer: its max_tokens / max_completion_tokens when sent
 * (-1 when not), else the offer's reported output cap, else its context length, else the default.
 */
export function maxOutputTokens(offer: Offer, requested: number): number {
  if (requested > 0) return requested
  if (offer.maxCompletionTokens > 0) return offer.maxCompletionTokens
  const context = offer.model.context_length
  if (typeof context === 'number' && Number.isSafeInteger(context) && context > 0) return context
  return DEFAULT_MAX_OUTPUT_TOKENS
}

/**
 * What admission reserves for a chat request at this offer: every byte of the body counted as a prompt token
 * (a BPE token covers at least one byte, so this bounds any tokenizer) plus the most output it can produce.
 */
export function chatWorstCase(offer: Offer, bodyBytes: number, requestedMaxOutput: number): bigint {
  return chatReservation(offer, bodyBytes, maxOutputTokens(offer, requestedMaxOutput))
}

/** Worst case of a chat request: its prompt estimate plus the whole output it may ask for. */
export function chatReservation(offer: Offer, promptTokens: number, maxOutputTokens: number): bigint {
  return BigInt(promptTokens) * offer.promptPrice + BigInt(maxOutputTokens) * offer.completionPrice
}

function isCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0
}

/**
 * Usage as the provider reported it, or an estimate marked `estimated` (DESIGN.md §4): about four bytes of
 * text per token, and for streams one token per content event.
 */
export function meteredUsage(reported: unknown, promptBytes: number, completionEstimate: number): ChatUsage {
  if (reported !== null && typeof reported === 'object') {
    const r = reported as Record<string, unknown>
    // Counts that are not whole non-negative numbers are no usage at all: estimated, never billed as zero.
    if (isCount(r.prompt_tokens) && isCount(r.completion_tokens)) {
      const prompt = r.prompt_tokens
      const completion = r.completion_tokens
      return {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: isCount(r.total_tokens) ? r.total_tokens : prompt + completion,
      }
    }
  }
  const prompt = Math.max(1, Math.ceil(promptBytes / 4))
  const completion = Math.max(0, completionEstimate)
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, estimated: true }
}
