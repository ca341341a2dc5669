/**
 * Money is never a float (DESIGN.md §4). Amounts are bigints of atto-USD (1e-18 USD): fine enough that a price
 * written with up to 12 decimals per 1M tokens gives an exact per-token price, and costs add up exactly.
 */

export const ATTO_PER_USD = 10n ** 18n
const DECIMALS = 18
/** Chat prices and ceilings are quoted per this many tokens (USD per 1M tokens). */
export const TOKENS_PER_PRICE_UNIT = 1_000_000n

/**
 * A non-negative decimal (string as written, or a number from YAML) as atto-USD. Returns null for anything
 * that is not a plain finite non-negative decimal with at most 18 decimals.
 */
export function parseUsd(value: string | number): bigint | null {
  const text = typeof value === 'number' ? numberToDecimal(value) : value.trim()
  return text === null ? null : decimalToAtto(text, Number.POSITIVE_INFINITY, false)
}

/** Digits gathered in a plain number before they move into a bigint: 15 digits stay below 2^53, so exact. */
const CHUNK_DIGITS = 15
/** 10^0 … 10^18 as bigints. */
const POW10: readonly bigint[] = Array.from({ length: DECIMALS + 1 }, (_, i) => 10n ** BigInt(i))

/**
 * A plain decimal (`12`, `0.25`: digits and at most one point, with digits on both sides of it) as exact
 * atto-USD; null for signs, exponents, NaN, Inf, stray characters or more than `maxIntegerDigits` significant
 * digits before the point. Digits past the 18th decimal are dropped toward zero when `truncate` (a ceiling,
 * where that is exact: see routing/preferences.ts parseCeiling), else they make the text invalid (an amount
 * that atto-USD cannot hold exactly).
 */
export function decimalToAtto(text: string, maxIntegerDigits: number, truncate: boolean): bigint | null {
  const n = text.length
  if (n === 0 || text.charCodeAt(0) === 46 || text.charCodeAt(n - 1) === 46) return null
  let dot = false
  let integerDigits = 0
  let fractionDigits = 0
  // Significant digits gather in `chunk` and move into `big` CHUNK_DIGITS at a time, so a usual ceiling
  // ("0.25") costs two BigInt operations in all.
  let chunk = 0
  let chunkDigits = 0
  let big = 0n
  let started = false
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === 46) {
      if (dot) return null
      dot = true
      continue
    }
    const digit = c - 48
    if (digit < 0 || digit > 9) return null
    if (dot) {
      if (fractionDigits === DECIMALS) {
        if (truncate) continue
        return null
      }
      fractionDigits++
    }
    if (!started && digit === 0) continue // a leading zero adds nothing
    started = true
    if (!dot && ++integerDigits > maxIntegerDigits) return null
    chunk = chunk * 10 + digit
    if (++chunkDigits === CHUNK_DIGITS) {
      big = big * POW10[CHUNK_DIGITS]! + BigInt(chunk)
      chunk = 0
      chunkDigits = 0
    }
  }
  const units = big === 0n ? BigInt(chunk) : big * POW10[chunkDigits]! + BigInt(chunk)
  return fractionDigits === DECIMALS ? units : units * POW10[DECIMALS - fractionDigits]!
}

/** Price per 1M tokens (decimal) as an exact atto-USD price per token, or null if it is not exact. */
export function perTokenPrice(pricePerMillion: string | number): bigint | null {
  const units = parseUsd(pricePerMillion)
  if (units === null || units % TOKENS_PER_PRICE_UNIT !== 0n) return null
  return units / TOKENS_PER_PRICE_UNIT
}

const ZEROS = '0'.repeat(DECIMALS + 1)
/** "0." followed by k zeros, k = 0 … DECIMALS - 1: what comes before the digits of an amount under 1 USD. */
const FRACTION_PREFIX: readonly string[] = Array.from({ length: DECIMALS }, (_, k) => '0.' + '0'.repeat(k))

/** atto-USD as a plain decimal string: "0.000021", "3", never exponent notation. */
export function formatUsd(atto: bigint): string {
  // Under 1 USD (every trace's costs, nearly): one bigint-to-text conversion, at most one slice and one join
  // onto a prefix made once. The general path pads, flattens and slices a few strings more (3 times a trace:
  // 637 against 247 bytes allocated per request, 2026-11-28, V8's sampling heap profiler).
  if (atto > 0n && atto < ATTO_PER_USD) {
    const digits = atto.toString()
    let end = digits.length
    while (digits.charCodeAt(end - 1) === 48 /* 0 */) end--
    return FRACTION_PREFIX[DECIMALS - digits.length]! + (end === digits.length ? digits : digits.slice(0, end))
  }
  const negative = atto < 0n
  let digits = (negative ? -atto : atto).toString()
  if (digits.length <= DECIMALS) digits = ZEROS.slice(0, DECIMALS + 1 - digits.length) + digits
  const point = digits.length - DECIMALS
  let end = digits.length
  while (end > point && digits.charCodeAt(end - 1) === 48 /* 0 */) end--
  const out = end === point ? digits.slice(0, point) : digits.slice(0, point) + '.' + digits.slice(point, end)
  return negative ? '-' + out : out
}

/**
 * A JS number (as YAML hands it over) back to the decimal the user wrote. Number#toString gives the shortest
 * text that round-trips, which is the literal for any price written with 15 or fewer significant digits;
 * exponent forms (1e-9) are expanded here.
 */
export function numberToDecimal(n: number): string | null {
  if (!Number.isFinite(n) || n < 0) return null
  const s = n.toString()
  const e = s.indexOf('e')
  if (e === -1) return s
  const mantissa = s.slice(0, e)
  const exp = Number(s.slice(e + 1))
  const dot = mantissa.indexOf('.')
  const digits = dot === -1 ? mantissa : mantissa.slice(0, dot) + mantissa.slice(dot + 1)
  const pointAt = (dot === -1 ? mantissa.length : dot) + exp
  if (pointAt <= 0) return '0.' + '0'.repeat(-pointAt) + digits
  if (pointAt >= digits.length) return digits + '0'.repeat(pointAt - digits.length)
  return digits.slice(0, pointAt) + '.' + digits.slice(pointAt)
}

/** Neuron per 0G: the contract's prices are in neuron (1e-18 0G). */
export const NEURON_PER_0G = 10n ** 18n

/**
 * A price in neuron as atto-USD at `attoUsdPer0g` (the operator's rate, atto-USD per 0G). Exact in bigints:
 * neuron × rate / 1e18, rounded UP to the next atto-USD when it does not divide, so the router never bills
 * (or filters on) less than what the provider charges it.
 */
export function neuronToAtto(neuron: bigint, attoUsdPer0g: bigint): bigint {
  const product = neuron * attoUsdPer0g
  const whole = product / NEURON_PER_0G
  return product % NEURON_PER_0G === 0n ? whole : whole + 1n
}
