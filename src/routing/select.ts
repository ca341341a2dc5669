/**
 * The request-dependent half of routing (spec §4.7 rules 1–7), walked inline over the pre-sorted lists of the
 * routing table. Candidates are produced lazily: the first one costs O(1) in the common case however many
 * providers serve the model, and the rest are only looked at when a failover needs them.
 *
 * Order of the walk: healthy before unhealthy (a provider whose circuit is open is a last resort, never
 * skipped for good), and when Require-Parameters is off, capable before incapable within each.
 */
import { RouterError } from '../errors.js'
import { tierName } from '../vocabulary/trust.js'
import type { Offer, ProviderEntry } from './offers.js'
import { namesOf } from './params.js'
import { RoutingPrefs, SORT_DEFAULT, SORT_LATENCY, UNSET } from './preferences.js'
import type { ModelIndex } from './table.js'

/** Which price ceilings apply to the surface (spec §4.7 rule 5 table). */
export const DIMENSION_CHAT = 0
export const DIMENSION_IMAGE = 1
export const DIMENSION_AUDIO = 2

export interface SelectionRequest {
  readonly dimension: number
  /** Bits of the sampling/reasoning parameters the request sets. */
  readonly paramMask: number
  /** Requested maximum output length, -1 when the request sets none. */
  readonly maxOutput: number
  /** The key's allowed providers, null when unrestricted. */
  readonly allowedProviders: ReadonlySet<string> | null
  /** performance.now(), for health. */
  readonly now: number
}

const PASS_HEALTHY_CAPABLE = 0
const PASS_HEALTHY_OTHER = 1
const PASS_UNHEALTHY_CAPABLE = 2
const PASS_UNHEALTHY_OTHER = 3
const PASS_END = 4
/** Random draws of the default strategy before it gives way to the list order. */
const P2C_DRAWS = 4

/** Exact: ceilings and offer prices are both atto-USD bigints in the ceiling's unit (per 1M tokens, per image). */
function withinCeiling(offer: Offer, prefs: RoutingPrefs, dimension: number): boolean {
  if (dimension === DIMENSION_CHAT) {
    return (
      (prefs.maxPrompt === null || offer.promptPerM <= prefs.maxPrompt) &&
      (prefs.maxCompletion === null || offer.completionPerM <= prefs.maxCompletion)
    )
  }
  if (dimension === DIMENSION_IMAGE) return prefs.maxImage === null || offer.imagePrice <= prefs.maxImage
  return true
}

function supportsParams(offer: Offer, mask: number): boolean {
  return (mask & ~offer.paramMask) === 0
}

/** Rule 4: with Require-Parameters on, an unreported cap excludes; off, only a reported cap that is too small. */
function holdsOutput(offer: Offer, maxOutput: number, strict: boolean): boolean {
  if (maxOutput < 0) return true
  if (offer.maxCompletionTokens < 0) return !strict
  return offer.maxCompletionTokens >= maxOutput
}

function allowed(provider: ProviderEntry, allowedProviders: ReadonlySet<string> | null): boolean {
  return allowedProviders === null || allowedProviders.has(provider.address)
}

/** A lazy cursor over the candidates of one request, in the order they should be tried. */
export class Selection {
  readonly #list: readonly Offer[]
  readonly #prefs: RoutingPrefs
  readonly #req: SelectionRequest
  readonly #strict: boolean
  /** Whether anything can be incapable at all; if not, the "other" passes are skipped. */
  readonly #prefer: boolean
  #pinned: Offer | null
  /** The candidate handed out first; later passes skip it. */
  #first: Offer | null = null
  #firstPending = false
  #pass = PASS_HEALTHY_CAPABLE
  #pos = 0
  #yielded = 0

  constructor(list: readonly Offer[], prefs: RoutingPrefs, req: SelectionRequest, pinned: Offer | null) {
    this.#list = list
    this.#prefs = prefs
    this.#req = req
    this.#strict = prefs.requiresParameters()
    this.#prefer = !this.#strict && (req.paramMask !== 0 || req.maxOutput >= 0)
    this.#pinned = pinned
  }

  /** Makes `offer` (found by pickTwo or a first next()) the first candidate handed out. */
  setFirst(offer: Offer): void {
    this.#first = offer
    this.#firstPending = true
    this.#yielded = 0
  }

  /** The candidate tried first (the pin, or the one select() drew), without moving the cursor. */
  get first(): Offer | null {
    return this.#pinned ?? this.#first
  }

  next(): Offer | null {
    // Without fallbacks (an explicit false, or a pin without true), only the first candidate is ever tried.
    if (this.#yielded > 0 && !this.#prefs.fallbacksAllowed()) return null
    if (this.#pinned !== null) {
      const pinned = this.#pinned
      this.#pinned = null
      this.#first = pinned
      this.#yielded++
      return pinned
    }
    if (this.#firstPending) {
      this.#firstPending = false
      this.#yielded++
      return this.#first
    }
    const list = this.#list
    while (this.#pass < PASS_END) {
      const pass = this.#pass
      const wantHealthy = pass < PASS_UNHEALTHY_CAPABLE
      const wantCapable = pass === PASS_HEALTHY_CAPABLE || pass === PASS_UNHEALTHY_CAPABLE
      while (this.#pos < list.length) {
        const offer = list[this.#pos++]!
        if (offer === this.#first) continue
        if (offer.provider.health.isHealthy(this.#req.now) !== wantHealthy) continue
        if (!this.#eligible(offer)) continue
        if (this.#prefer && this.#capable(offer) !== wantCapable) continue
        this.#yielded++
        return offer
      }
      this.#pos = 0
      this.#pass = this.#nextPass(pass)
    }
    return null
  }

  #nextPass(pass: number): number {
    if (!this.#prefer) return pass === PASS_HEALTHY_CAPABLE ? PASS_UNHEALTHY_CAPABLE : PASS_END
    switch (pass) {
      case PASS_HEALTHY_CAPABLE:
        return PASS_HEALTHY_OTHER
      case PASS_HEALTHY_OTHER:
        return PASS_UNHEALTHY_CAPABLE
      case PASS_UNHEALTHY_CAPABLE:
        return PASS_UNHEALTHY_OTHER
      default:
        return PASS_END
    }
  }

  /** Hard filters: price ceilings, the key's providers, and with Require-Parameters on, capability. */
  #eligible(offer: Offer): boolean {
    if (!withinCeiling(offer, this.#prefs, this.#req.dimension)) return false
    if (!allowed(offer.provider, this.#req.allowedProviders)) return false
    if (this.#strict) return this.#capable(offer)
    return true
  }

  #capable(offer: Offer): boolean {
    return supportsParams(offer, this.#req.paramMask) && holdsOutput(offer, this.#req.maxOutput, this.#strict)
  }

  /**
   * Power of two choices on in-flight requests among healthy, eligible, capable offers (default strategy).
   * A bounded number of random draws keeps it O(1) however many offers there are: when filters (a tight price
   * ceiling, the key's providers) leave too few offers for the draws to find two, it returns what it found or
   * null, and the caller falls back to the list's own order (cheapest first), found by next().
   */
  pickTwo(): Offer | null {
    const list = this.#list
    const n = list.length
    let a: Offer | null = null
    let b: Offer | null = null
    let ai = -1
    for (let draw = 0; draw < P2C_DRAWS && b === null; draw++) {
      // Once one is found, the draws are among the others: two offers are always both looked at (drawing from all
      // of them, four draws of two offers found only one in 8 requests, and that one was chosen alone).
      let i = Math.floor(Math.random() * (a === null ? n : n - 1))
      if (a !== null && i >= ai) i++
      const offer = list[i]!
      if (offer === a || !this.#firstPass(offer)) continue
      if (a === null) {
        a = offer
        ai = i
      } else b = offer
    }
    if (a === null || b === null) return a
    if (a.stats.inflight !== b.stats.inflight) return a.stats.inflight < b.stats.inflight ? a : b
    return a.sortPrice <= b.sortPrice ? a : b
  }

  /** The tests of the first pass: healthy, eligible and, when preferred, capable. */
  #firstPass(offer: Offer): boolean {
    return offer.provider.health.isHealthy(this.#req.now) && this.#eligible(offer) && (!this.#prefer || this.#capable(offer))
  }

}

/**
 * Starts the selection for a model, or returns the RouterError that says why nothing can serve it.
 * The error paths walk the model's offers again to name the constraint that removed the last candidate.
 */
export function select(index: ModelIndex, prefs: RoutingPrefs, req: SelectionRequest, pinned: ProviderEntry | null): Selection | RouterError {
  const floor = prefs.tier === UNSET ? 0 : prefs.tier
  const list = prefs.sort === SORT_LATENCY ? index.latency[floor]! : index.price[floor]!

  if (prefs.address !== '') {
    const offer = pinned === null ? undefined : index.offers.find((o) => o.provider === pinned)
    if (offer === undefined) {
      return new RouterError(
        'provider_not_found',
        pinned === null
          ? `X-SVC-Provider-Address ${prefs.address} is not a registered provider`
          : `provider ${prefs.address} does not serve model ${index.id}`,
      )
    }
    if (offer.tier < floor) {
      return new RouterError(
        'no_provider_for_trust_mode',
        `pinned provider ${offer.provider.address} is ${offer.provider.trustMode}, below the requested trust mode ${tierName(floor)}`,
      )
    }
    if (!allowed(offer.provider, req.allowedProviders)) {
      return new RouterError('provider_not_allowed', `this key may not use provider ${offer.provider.address}`)
    }
    if (!withinCeiling(offer, prefs, req.dimension)) {
      return new RouterError('pinned_provider_exceeds_max_price', `pinned provider ${offer.provider.address} is priced above the requested maximum`)
    }
    // Rule 1: the parameter filters of rule 4 are skipped for a pinned provider.
    return new Selection(list, prefs, req, offer)
  }

  const selection = new Selection(list, prefs, req, null)
  const first = (prefs.sort === SORT_DEFAULT && list.length > 1 ? selection.pickTwo() : null) ?? selection.next()
  if (first === null) return explainEmpty(index, prefs, req, floor)
  selection.setFirst(first)
  return selection
}

function explainEmpty(index: ModelIndex, prefs: RoutingPrefs, req: SelectionRequest, floor: number): RouterError {
  let left = index.offers.filter((o) => o.tier >= floor)
  if (left.length === 0) {
    return new RouterError('no_provider_for_trust_mode', `no provider of model ${index.id} is available at trust mode ${tierName(floor)} or above`)
  }
  left = left.filter((o) => allowed(o.provider, req.allowedProviders))
  if (left.length === 0) return new RouterError('provider_not_allowed', `this key may not use any provider of model ${index.id}`)
  left = left.filter((o) => withinCeiling(o, prefs, req.dimension))
  if (left.length === 0) {
    return new RouterError('no_provider_within_max_price', `no provider of model ${index.id} is priced within the requested maximum`)
  }
  left = left.filter((o) => supportsParams(o, req.paramMask))
  if (left.length === 0) {
    return new RouterError(
      'model_not_capable',
      `no provider of model ${index.id} supports all requested parameters (${namesOf(req.paramMask).join(', ')}) and X-SVC-Provider-Require-Parameters is true`,
    )
  }
  return new RouterError(
    'no_provider_within_max_tokens',
    `no provider of model ${index.id} advertises room for ${req.maxOutput} output tokens and X-SVC-Provider-Require-Parameters is true`,
  )
}
