/**
 * Offers: one per (provider, model) of a registry snapshot, carrying what selection reads on the hot path in
 * ready form (tier rank, capability bits, exact prices for billing and in the units of the price ceilings, a
 * float sort key) and the live stats shared with the health book.
 */
import { parseUsd, perTokenPrice, TOKENS_PER_PRICE_UNIT } from '../billing/money.js'
import type { HealthBook, OfferStats, ProviderHealth } from '../health/health.js'
import type { RegistryModel, RegistryProvider, RegistrySnapshot } from '../registry/types.js'
import { TIER_RANK, type TrustMode } from '../vocabulary/trust.js'
import { maskOf } from './params.js'

export interface ProviderEntry {
  readonly address: string
  readonly url: string
  readonly tier: number
  readonly trustMode: TrustMode
  readonly record: RegistryProvider
  readonly health: ProviderHealth
}

export interface Offer {
  readonly provider: ProviderEntry
  readonly model: RegistryModel
  readonly tier: number
  /** atto-USD per prompt token / completion token / image / audio second: what billing charges. */
  readonly promptPrice: bigint
  readonly completionPrice: bigint
  readonly imagePrice: bigint
  readonly audioPrice: bigint
  /**
   * atto-USD per 1M prompt / completion tokens: the same prices in the unit of the ceiling headers, computed
   * once here so a ceiling check is one bigint comparison (the image ceiling compares imagePrice as it is).
   */
  readonly promptPerM: bigint
  readonly completionPerM: bigint
  /**
   * Sort key for `price`, in USD: prompt + completion per 1M for chat, image price for images, audio price for
   * speech. A float, as the one place one is right: it only orders offers, it never decides a charge or a
   * ceiling.
   */
  readonly sortPrice: number
  readonly paramMask: number
  /** Advertised output capacity, -1 when never reported. */
  readonly maxCompletionTokens: number
  readonly stats: OfferStats
}

export interface OfferSet {
  readonly version: number
  readonly providers: ReadonlyMap<string, ProviderEntry>
  /** Offers per model id, in registry order. */
  readonly byModel: ReadonlyMap<string, readonly Offer[]>
  /** Every offer, in a stable order the index refers to by position. */
  readonly all: readonly Offer[]
}

function numberOf(decimal: string | undefined): number {
  return decimal === undefined ? 0 : Number(decimal)
}

function buildOffer(provider: ProviderEntry, model: RegistryModel, stats: OfferStats): Offer {
  const p = model.price
  const promptPrice = p.prompt === undefined ? 0n : (perTokenPrice(p.prompt) ?? 0n)
  const completionPrice = p.completion === undefined ? 0n : (perTokenPrice(p.completion) ?? 0n)
  return {
    provider,
    model,
    tier: provider.tier,
    promptPrice,
    completionPrice,
    imagePrice: p.image === undefined ? 0n : (parseUsd(p.image) ?? 0n),
    audioPrice: p.audio_second === undefined ? 0n : (parseUsd(p.audio_second) ?? 0n),
    promptPerM: promptPrice * TOKENS_PER_PRICE_UNIT,
    completionPerM: completionPrice * TOKENS_PER_PRICE_UNIT,
    sortPrice:
      model.type === 'chatbot'
        ? numberOf(p.prompt) + numberOf(p.completion)
        : numberOf(model.type === 'text-to-image' ? p.image : p.audio_second),
    paramMask: maskOf(model.supported_parameters),
    maxCompletionTokens: model.max_completion_tokens ?? -1,
    stats,
  }
}

/** Turns a snapshot into offers, reusing the health book's live stats for providers that stay. */
export function buildOfferSet(snapshot: RegistrySnapshot, book: HealthBook): OfferSet {
  const providers = new Map<string, ProviderEntry>()
  const byModel = new Map<string, Offer[]>()
  const all: Offer[] = []
  for (const record of snapshot.providers) {
    const entry: ProviderEntry = {
      address: record.address,
      url: record.url,
      tier: TIER_RANK[record.trust_mode],
      trustMode: record.trust_mode,
      record,
      health: book.provider(record.address),
    }
    providers.set(record.address, entry)
    for (const model of record.models) {
      const offer = buildOffer(entry, model, book.offer(record.address, model.id))
      all.push(offer)
      let list = byModel.get(model.id)
      if (list === undefined) {
        list = []
        byModel.set(model.id, list)
      }
      list.push(offer)
    }
  }
  book.retain(new Set(providers.keys()))
  return { version: snapshot.version, providers, byModel, all }
}
