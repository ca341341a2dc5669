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

/** Worst case of a chat request: its prompt estimate plus the whole output it may ask for. */
export function chatReservation(offer: Offer, promptTokens: number, maxOutputTokens: number): bigint {
  return BigInt(promptTokens) * offer.promptPrice + BigInt(maxOutputTokens) * offer.completionPrice
}

/**
 * Usage as the provider reported it, or an estimate marked `estimated` (DESIGN.md §4): about four bytes of
 * text per token, and for streams one token per content event.
 */
export function meteredUsage(reported: unknown, promptBytes: number, completionEstimate: number): ChatUsage {
  if (reported !== null && typeof reported === 'object') {
    const r = reported as Record<string, unknown>
    if (typeof r.prompt_tokens === 'number' && typeof r.completion_tokens === 'number') {
      const prompt = r.prompt_tokens
      const completion = r.completion_tokens
      return {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: typeof r.total_tokens === 'number' ? r.total_tokens : prompt + completion,
      }
    }
  }
  const prompt = Math.max(1, Math.ceil(promptBytes / 4))
  const completion = Math.max(0, completionEstimate)
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, estimated: true }
}
