/**
 * The one gate every usage figure a provider reports passes before it touches money or storage (issue 43: a
 * provider is as untrusted as a client). A count is believed only when it is a whole number from 0 to
 * MAX_USAGE_COUNT; anything else (negative, fractional, a string, Infinity, or past the bound) is no count at
 * all, and the answer is billed by the router's estimate, marked `estimated`, as when no usage came.
 *
 * Why 10^9: no model's context plus output comes near a billion tokens (the largest are a few million), so an
 * honest provider never reaches it, while a billion per charge keeps every sum the stores keep exact: the
 * daily roll-up would need nine million such charges on one (account, day, model, key) to reach 2^53, where
 * it saturates (store/ledger.ts MAX_STORED_COUNT). It is one compare per figure, on each answer's end.
 */

/** The largest token (or image, or audio-millisecond) count of one answer the router believes. */
export const MAX_USAGE_COUNT = 1_000_000_000

/** The longest audio a transcription answer may report, in seconds: its milliseconds stay within the bound. */
export const MAX_AUDIO_SECONDS = MAX_USAGE_COUNT / 1000

/** `n` when it is a whole number from 0 to MAX_USAGE_COUNT, else -1 (no count). */
export function usageCount(n: unknown): number {
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= MAX_USAGE_COUNT ? n : -1
}

/** Audio seconds `v` (fractional allowed) when finite, non-negative and within MAX_AUDIO_SECONDS, else null. */
export function usageSeconds(v: unknown): number | null {
  return typeof v === 'number' && v >= 0 && v <= MAX_AUDIO_SECONDS ? v : null
}
