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
  if (text === null || text.length === 0) return null
  let intPart = 0n
  let frac = ''
  let seenDot = false
  let digits = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 46 /* . */) {
      if (seenDot) return null
      seenDot = true
      continue
    }
    if (c < 48 || c > 57) return null
    digits++
    if (seenDot) frac += text[i]
    else intPart = intPart * 10n + BigInt(c - 48)
  }
  if (digits === 0 || (seenDot && frac.length === 0) || text.charCodeAt(0) === 46) return null
  if (frac.length > DECIMALS) return null
  const fracUnits = frac.length === 0 ? 0n : BigInt(frac.padEnd(DECIMALS, '0'))
  return intPart * ATTO_PER_USD + fracUnits
}

/** Price per 1M tokens (decimal) as an exact atto-USD price per token, or null if it is not exact. */
export function perTokenPrice(pricePerMillion: string | number): bigint | null {
  const units = parseUsd(pricePerMillion)
  if (units === null || units % TOKENS_PER_PRICE_UNIT !== 0n) return null
  return units / TOKENS_PER_PRICE_UNIT
}

/** atto-USD as a plain decimal string: "0.000021", "3", never exponent notation. */
export function formatUsd(atto: bigint): string {
  const negative = atto < 0n
  const abs = negative ? -atto : atto
  const whole = abs / ATTO_PER_USD
  const frac = abs % ATTO_PER_USD
  let out = whole.toString()
  if (frac !== 0n) out += '.' + frac.toString().padStart(DECIMALS, '0').replace(/0+$/, '')
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
