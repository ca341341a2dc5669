/**
 * The client's routing constraints (spec §4.7): the eight X-SVC-Provider-* headers, merged field by field
 * with the deprecated body `provider` object (header wins). Parsing is a character scan with no regex and no
 * intermediate objects; a present but malformed value is an error, never a default.
 */
import { decimalToAtto, numberToDecimal } from '../billing/money.js'
import { RouterError, type ErrorCode } from '../errors.js'
import { HEADER, type RequestHead } from '../server/request-head.js'
import { tierRank, TRUST_MODES } from '../vocabulary/trust.js'
import { trimOws } from '../vocabulary/http.js'

export const SORT_DEFAULT = 0
export const SORT_LATENCY = 1
export const SORT_PRICE = 2

/** -1 marks a field the client left unset. */
export const UNSET = -1

export class RoutingPrefs {
  /** Lower-case pinned address, '' when unset. */
  address = ''
  sort = SORT_DEFAULT
  sortSet = false
  /** Tier floor rank 0..2, or UNSET. */
  tier = UNSET
  /** 1 / 0, or UNSET (then: on, or off when pinned). */
  allowFallbacks = UNSET
  /** 1 / 0, or UNSET (off). */
  requireParameters = UNSET
  /**
   * Price ceilings as exact atto-USD (10^-18 USD, billing/money.ts) per 1M prompt / completion tokens and per
   * image, or null when unset. A ceiling is money: it is compared with the offers' exact prices, never as a
   * float. (null, not a bigint sentinel, so that "is there a ceiling" costs no BigInt operation.)
   */
  maxPrompt: bigint | null = null
  maxCompletion: bigint | null = null
  maxImage: bigint | null = null

  /** Fallbacks after defaults: on unless an address is pinned (rule 1). */
  fallbacksAllowed(): boolean {
    if (this.allowFallbacks !== UNSET) return this.allowFallbacks === 1
    return this.address === ''
  }

  requiresParameters(): boolean {
    return this.requireParameters === 1
  }
}


/** `true`/`false` in any case; UNSET for anything else. */
function parseBool(value: string): number {
  if (value.length === 4) {
    return (value.charCodeAt(0) | 32) === 116 &&
      (value.charCodeAt(1) | 32) === 114 &&
      (value.charCodeAt(2) | 32) === 117 &&
      (value.charCodeAt(3) | 32) === 101
      ? 1
      : UNSET
  }
  if (value.length === 5) {
    return (value.charCodeAt(0) | 32) === 102 &&
      (value.charCodeAt(1) | 32) === 97 &&
      (value.charCodeAt(2) | 32) === 108 &&
      (value.charCodeAt(3) | 32) === 115 &&
      (value.charCodeAt(4) | 32) === 101
      ? 0
      : UNSET
  }
  return UNSET
}

/**
 * Most significant digits before the point of a ceiling written as text: far above any price, and a bound on
 * the BigInt work one header or body string can ask for.
 */
const MAX_INTEGER_DIGITS = 64

/**
 * A ceiling header or body string: a plain non-negative decimal (`12`, `0.25`) as exact atto-USD, or null for
 * signs, exponents, NaN, Inf, stray characters or more than 64 significant digits before the point.
 *
 * Digits past the 18th after the point are dropped, truncating toward zero, rather than rejected: the spec
 * takes any finite non-negative decimal, and for a ceiling the truncation is exact, not an approximation.
 * Every offer price is a whole number of atto-USD, and for a whole number p and any c >= 0, p <= c exactly
 * when p <= trunc(c). So 0.49999999999999999999 still excludes a price of 0.5 and admits 0.499999999999999999,
 * as the full decimal would. (Rounding to nearest would make that ceiling 0.5 and admit the 0.5 offer.)
 */
export function parseCeiling(text: string): bigint | null {
  return decimalToAtto(text, MAX_INTEGER_DIGITS, true)
}

/**
 * A JSON number ceiling (body `provider.max_price`) as the decimal it prints as, then as parseCeiling reads
 * it: 0.1 is the ceiling 0.1, not the binary double nearest to it. No digit bound: a double prints in at
 * most a few hundred characters.
 */
function numberCeiling(value: number): bigint | null {
  const text = numberToDecimal(value)
  return text === null ? null : decimalToAtto(text, Number.POSITIVE_INFINITY, true)
}


function badPrice(header: string, value: string): RouterError {
  return new RouterError(
    'invalid_max_price_usd',
    `${header} must be a finite non-negative decimal such as 0.25, got ${JSON.stringify(value)}`,
  )
}

function badBool(header: string, value: string): RouterError {
  return new RouterError('invalid_provider_header', `${header} must be true or false, got ${JSON.stringify(value)}`)
}

/**
 * Whether two copies of routing header `name` (lower case, trimmed, neither blank) say the same: a repeat that
 * does is no conflict. Booleans ignore case (true, TRUE), a pinned address its hex case, and price ceilings
 * compare as amounts (1 and 1.0); sort and trust mode are exact words. Any other header: the same text.
 */
export function sameRoutingValue(name: string, a: string, b: string): boolean {
  if (a === b) return true
  switch (name) {
    case HEADER.providerAddress:
      return a.toLowerCase() === b.toLowerCase()
    case HEADER.providerAllowFallbacks:
    case HEADER.providerRequireParameters: {
      const x = parseBool(a)
      return x !== UNSET && x === parseBool(b)
    }
    case HEADER.maxPricePrompt:
    case HEADER.maxPriceCompletion:
    case HEADER.maxPriceImage: {
      const x = parseCeiling(a)
      return x !== null && x === parseCeiling(b)
    }
    default:
      return false
  }
}

/** Each routing header by its lower-case name: how messages spell it, and the 400 code its bad value gets. */
const ROUTING_HEADERS: ReadonlyMap<string, { readonly name: string; readonly code: ErrorCode }> = new Map([
  [HEADER.providerAddress, { name: 'X-SVC-Provider-Address', code: 'invalid_provider_header' }],
  [HEADER.providerSort, { name: 'X-SVC-Provider-Sort', code: 'invalid_provider_header' }],
  [HEADER.providerTrustMode, { name: 'X-SVC-Provider-Trust-Mode', code: 'invalid_trust_mode' }],
  [HEADER.providerAllowFallbacks, { name: 'X-SVC-Provider-Allow-Fallbacks', code: 'invalid_provider_header' }],
  [HEADER.providerRequireParameters, { name: 'X-SVC-Provider-Require-Parameters', code: 'invalid_provider_header' }],
  [HEADER.maxPricePrompt, { name: 'X-SVC-Provider-Max-Price-Usd-Prompt', code: 'invalid_max_price_usd' }],
  [HEADER.maxPriceCompletion, { name: 'X-SVC-Provider-Max-Price-Usd-Completion', code: 'invalid_max_price_usd' }],
  [HEADER.maxPriceImage, { name: 'X-SVC-Provider-Max-Price-Usd-Image', code: 'invalid_max_price_usd' }],
])

/**
 * Parses the routing headers into `prefs`. Returns null, or the RouterError of the first malformed header.
 * The pin header is only normalised here; the registry decides whether it names a provider.
 */
export function parseRoutingHeaders(head: RequestHead, prefs: RoutingPrefs): RouterError | null {
  // A routing header sent twice with different values has no one value to honour: neither copy wins.
  if (head.conflictingHeader.length !== 0) {
    const header = ROUTING_HEADERS.get(head.conflictingHeader)
    if (header !== undefined) return new RouterError(header.code, `${header.name} was sent twice with different values`)
  }

  let v = trimOws(head.providerAddress)
  if (v.length !== 0) prefs.address = v.toLowerCase()

  v = trimOws(head.providerSort)
  if (v.length !== 0) {
    if (v === 'latency') prefs.sort = SORT_LATENCY
    else if (v === 'price') prefs.sort = SORT_PRICE
    else {
      return new RouterError(
        'invalid_provider_header',
        `X-SVC-Provider-Sort must be "latency" or "price" (lower case), got ${JSON.stringify(v)}`,
      )
    }
    prefs.sortSet = true
  }

  v = trimOws(head.providerTrustMode)
  if (v.length !== 0) {
    const rank = tierRank(v)
    if (rank === -1) {
      return new RouterError(
        'invalid_trust_mode',
        `X-SVC-Provider-Trust-Mode must be one of ${TRUST_MODES.join(', ')}, got ${JSON.stringify(v)}`,
      )
    }
    prefs.tier = rank
  }

  v = trimOws(head.providerAllowFallbacks)
  if (v.length !== 0) {
    prefs.allowFallbacks = parseBool(v)
    if (prefs.allowFallbacks === UNSET) return badBool('X-SVC-Provider-Allow-Fallbacks', v)
  }

  v = trimOws(head.providerRequireParameters)
  if (v.length !== 0) {
    prefs.requireParameters = parseBool(v)
    if (prefs.requireParameters === UNSET) return badBool('X-SVC-Provider-Require-Parameters', v)
  }

  v = trimOws(head.maxPricePrompt)
  if (v.length !== 0) {
    const ceiling = parseCeiling(v)
    if (ceiling === null) return badPrice('X-SVC-Provider-Max-Price-Usd-Prompt', v)
    prefs.maxPrompt = ceiling
  }
  v = trimOws(head.maxPriceCompletion)
  if (v.length !== 0) {
    const ceiling = parseCeiling(v)
    if (ceiling === null) return badPrice('X-SVC-Provider-Max-Price-Usd-Completion', v)
    prefs.maxCompletion = ceiling
  }
  v = trimOws(head.maxPriceImage)
  if (v.length !== 0) {
    const ceiling = parseCeiling(v)
    if (ceiling === null) return badPrice('X-SVC-Provider-Max-Price-Usd-Image', v)
    prefs.maxImage = ceiling
  }
  return null
}

function bodyField(name: string): string {
  return `provider.${name}`
}

function bodyPrice(value: unknown, name: string): bigint {
  const ceiling = typeof value === 'number' ? numberCeiling(value) : typeof value === 'string' ? parseCeiling(trimOws(value)) : null
  if (ceiling !== null) return ceiling
  throw new RouterError(
    'invalid_max_price_usd',
    `${bodyField(name)} must be a finite non-negative decimal, got ${JSON.stringify(value)}`,
  )
}

function bodyBool(value: unknown, name: string): number {
  if (typeof value === 'boolean') return value ? 1 : 0
  if (typeof value === 'string') {
    const b = parseBool(trimOws(value))
    if (b !== UNSET) return b
  }
  throw new RouterError('invalid_provider_header', `${bodyField(name)} must be true or false, got ${JSON.stringify(value)}`)
}

/**
 * Merges the deprecated body `provider` object into prefs: a field applies only where the header left it
 * unset (rule 8). Throws a RouterError naming the field for a malformed value or an unknown field.
 */
export function mergeBodyPreferences(provider: unknown, prefs: RoutingPrefs): void {
  if (provider === undefined || provider === null) return
  if (typeof provider !== 'object' || Array.isArray(provider)) {
    throw new RouterError('invalid_request', 'provider must be an object (deprecated: prefer the X-SVC-Provider-* headers)')
  }
  const p = provider as Record<string, unknown>
  for (const key in p) {
    const value = p[key]
    if (value === undefined || value === null) continue
    switch (key) {
      case 'address': {
        if (typeof value !== 'string') throw new RouterError('invalid_request', 'provider.address must be a string')
        const address = trimOws(value)
        if (prefs.address === '' && address !== '') prefs.address = address.toLowerCase()
        break
      }
      case 'sort': {
        const sort = typeof value === 'string' ? trimOws(value) : value
        if (sort !== 'latency' && sort !== 'price') {
          throw new RouterError('invalid_provider_header', `provider.sort must be "latency" or "price", got ${JSON.stringify(value)}`)
        }
        if (!prefs.sortSet) {
          prefs.sort = sort === 'latency' ? SORT_LATENCY : SORT_PRICE
          prefs.sortSet = true
        }
        break
      }
      case 'trust_mode': {
        const rank = typeof value === 'string' ? tierRank(trimOws(value)) : -1
        if (rank === -1) {
          throw new RouterError('invalid_trust_mode', `provider.trust_mode must be one of ${TRUST_MODES.join(', ')}, got ${JSON.stringify(value)}`)
        }
        if (prefs.tier === UNSET) prefs.tier = rank
        break
      }
      case 'allow_fallbacks': {
        const b = bodyBool(value, key)
        if (prefs.allowFallbacks === UNSET) prefs.allowFallbacks = b
        break
      }
      case 'require_parameters': {
        const b = bodyBool(value, key)
        if (prefs.requireParameters === UNSET) prefs.requireParameters = b
        break
      }
      case 'max_price': {
        if (typeof value !== 'object' || Array.isArray(value)) {
          throw new RouterError('invalid_max_price_usd', 'provider.max_price must be an object with prompt, completion and/or image')
        }
        const m = value as Record<string, unknown>
        for (const dim in m) {
          if (m[dim] === undefined || m[dim] === null) continue
          if (dim === 'prompt') {
            const n = bodyPrice(m[dim], 'max_price.prompt')
            if (prefs.maxPrompt === null) prefs.maxPrompt = n
          } else if (dim === 'completion') {
            const n = bodyPrice(m[dim], 'max_price.completion')
            if (prefs.maxCompletion === null) prefs.maxCompletion = n
          } else if (dim === 'image') {
            const n = bodyPrice(m[dim], 'max_price.image')
            if (prefs.maxImage === null) prefs.maxImage = n
          } else {
            throw new RouterError('invalid_request', `unknown field provider.max_price.${dim} (known: prompt, completion, image)`)
          }
        }
        break
      }
      default:
        throw new RouterError(
          'invalid_request',
          `unknown field provider.${key} (known: address, sort, trust_mode, allow_fallbacks, require_parameters, max_price)`,
        )
    }
  }
}
