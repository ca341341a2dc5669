/**
 * Sampling and reasoning parameters as bits, so "does this provider support everything the request asks
 * for" is one AND on the hot path. Aliases share a bit (reasoning_effort
 * is reasoning).
 */

const BITS = new Map<string, number>()
let nextBit = 0

function define(...names: string[]): void {
  const bit = 1 << nextBit++
  for (const name of names) BITS.set(name, bit)
}

define('temperature')
define('top_p')
define('top_k')
define('min_p')
define('top_a')
define('frequency_penalty')
define('presence_penalty')
define('repetition_penalty')
define('seed')
// max_tokens / max_completion_tokens are not here on purpose: spec §4.7 rule 4 judges the output length by the
// provider's advertised max_completion_tokens cap alone, not by whether it lists the parameter.
define('stop')
define('logit_bias')
define('logprobs', 'top_logprobs')
define('response_format')
define('structured_outputs')
define('tools')
define('tool_choice')
define('parallel_tool_calls')
define('reasoning', 'reasoning_effort', 'include_reasoning')
define('web_search_options')

/** The bit of one parameter name, 0 when the router does not track it. */
export function paramBit(name: string): number {
  return BITS.get(name) ?? 0
}

/** Bits of an advertised `supported_parameters` list. */
export function maskOf(names: readonly string[]): number {
  let mask = 0
  for (const name of names) mask |= paramBit(name)
  return mask
}

/** Bits of the parameters a chat request sets (keys present with a non-null value). */
export function requestMask(body: Record<string, unknown>): number {
  let mask = 0
  for (const key in body) {
    const bit = BITS.get(key)
    if (bit !== undefined && body[key] !== null && body[key] !== undefined) mask |= bit
  }
  return mask
}

/** Names of the tracked parameters in a mask, for error messages. */
export function namesOf(mask: number): string[] {
  const out: string[] = []
  const seen = new Set<number>()
  for (const [name, bit] of BITS) {
    if ((mask & bit) !== 0 && !seen.has(bit)) {
      seen.add(bit)
      out.push(name)
    }
  }
  return out
}
