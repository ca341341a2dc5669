/**
 * Exact cost of a served request from the provider's (or estimated) usage and the offer's prices, in atto-USD.
 */
import type { Offer } from '../routing/offers.js'
import { MAX_AUDIO_SECONDS, usageCount } from './usage-bound.js'

export interface ChatUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  /** Set when the provider reported no usage and the router estimated it. */
  estimated?: true
}

/** What an image answer is billed for: the images in its `data[]`. */
export interface ImageUsage {
  images: number
}

/** What a transcription is billed for: seconds of audio, from the provider or, `estimated`, the upload's header. */
export interface AudioUsage {
  seconds: number
  estimated?: true
}

/** Any surface's usage: each surface's cost() takes its own kind. */
export type Usage = ChatUsage | ImageUsage | AudioUsage

/** The counts of a usage as the ledger's usage record keeps them. */
export interface UsageCounts {
  readonly promptTokens: number
  readonly completionTokens: number
  readonly images: number
  /** Audio duration in whole milliseconds, rounded up. */
  readonly audioMs: number
}

export function usageCounts(usage: Usage): UsageCounts {
  const u = usage as Partial<ChatUsage & ImageUsage & AudioUsage>
  return {
    promptTokens: u.prompt_tokens ?? 0,
    completionTokens: u.completion_tokens ?? 0,
    images: u.images ?? 0,
    audioMs: audioMillis(u.seconds),
  }
}

/**
 * Whole milliseconds of `seconds`, rounded up. A provider's figure past the bound never gets here (the codec
 * estimates instead); an estimate read from an upload's header is capped at the bound, never billed as 0.
 */
function audioMillis(seconds: unknown): number {
  return typeof seconds === 'number' && seconds > 0 ? Math.ceil(Math.min(seconds, MAX_AUDIO_SECONDS) * 1000) : 0
}

export interface Cost {
  readonly input: bigint
  readonly output: bigint
}

function tokens(n: unknown): bigint {
  const c = usageCount(n)
  return c > 0 ? BigInt(c) : 0n
}

export function chatCost(offer: Offer, usage: ChatUsage): Cost {
  return {
    input: tokens(usage.prompt_tokens) * offer.promptPrice,
    output: tokens(usage.completion_tokens) * offer.completionPrice,
  }
}

/** images × image price (DESIGN.md §4): an image is output. */
export function imageCost(offer: Offer, usage: ImageUsage): Cost {
  return { input: 0n, output: tokens(usage.images) * offer.imagePrice }
}

/** The most an image request can cost: `n` images at the offer's price. */
export function imageWorstCase(offer: Offer, n: number): bigint {
  return BigInt(n) * offer.imagePrice
}

/**
 * Audio seconds × audio price (DESIGN.md §4), to the millisecond and rounded up to the next atto-USD (exact for
 * any price written with at most 15 decimals). Audio is input.
 */
export function audioCost(offer: Offer, usage: AudioUsage): Cost {
  const ms = BigInt(audioMillis(usage.seconds))
  return { input: (ms * offer.audioPrice + 999n) / 1000n, output: 0n }
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
 * (a BPE token covers at least one byte, so this bounds any tokenizer) plus the most output it can produce: each
 * of `choices` (the request's `n`) up to the output bound.
 */
export function chatWorstCase(offer: Offer, bodyBytes: number, requestedMaxOutput: number, choices = 1): bigint {
  return chatReservation(offer, bodyBytes, maxOutputTokens(offer, requestedMaxOutput) * choices)
}

/** Worst case of a chat request: its prompt estimate plus the whole output it may ask for. */
export function chatReservation(offer: Offer, promptTokens: number, maxOutputTokens: number): bigint {
  return BigInt(promptTokens) * offer.promptPrice + BigInt(maxOutputTokens) * offer.completionPrice
}

/**
 * Usage as the provider reported it, or an estimate marked `estimated` (DESIGN.md §4): about four bytes of
 * text per token, and for streams one token per content event. Every codec's usage ends here (chat, Anthropic
 * and Responses answers, native or translated), so this is where a provider's figures are bounded.
 */
export function meteredUsage(reported: unknown, promptBytes: number, completionEstimate: number): ChatUsage {
  if (reported !== null && typeof reported === 'object') {
    const r = reported as Record<string, unknown>
    // Counts that are not whole numbers within the bound are no usage at all (usage-bound.ts): estimated,
    // never billed as zero nor as reported.
    const prompt = usageCount(r.prompt_tokens)
    const completion = usageCount(r.completion_tokens)
    if (prompt >= 0 && completion >= 0) {
      const total = usageCount(r.total_tokens)
      return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: total >= 0 ? total : prompt + completion }
    }
  }
  const prompt = Math.max(1, Math.ceil(promptBytes / 4))
  const completion = Math.max(0, completionEstimate)
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, estimated: true }
}
