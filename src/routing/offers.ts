/**
 * Offers: one per (provider, model) of a registry snapshot, carrying what selection reads on the hot path in
 * ready form (tier rank, capability bits, prices as exact bigints for billing and as numbers for ceilings) and
 * the live stats shared with the health book.
 */
import { perTokenPrice, parseUsd } from '../billing/money.js'
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
  /** atto-USD per prompt token / completion token / image / audio second. */
  readonly promptPrice: bigint
  readonly completionPrice: bigint
  readonly imagePrice: bigint
  readonly audioPrice: bigint
  /** The same prices as plain numbers in the units of the ceiling headers (USD per 1M tokens, per image). */
  readonly promptPerM: number
  readonly completionPerM: number
  readonly imageUsd: number
  /** Sort key for `price`: prompt + completion per 1M for chat, image price for images, audio price for speech. */
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
  const promptPerM = numberOf(p.prompt)
  const completionPerM = numberOf(p.completion)
  const imageUsd = numberOf(p.image)
  const audioUsd = numberOf(p.audio_second)
  return {
    provider,
    model,
    tier: provider.tier,
    promptPrice: p.prompt === undefined ? 0n : (perTokenPrice(p.prompt) ?? 0n),
    completionPrice: p.completion === undefined ? 0n : (perTokenPrice(p.completion) ?? 0n),
    imagePrice: p.image === undefined ? 0n : (parseUsd(p.image) ?? 0n),
    audioPrice: p.audio_second === undefined ? 0n : (parseUsd(p.audio_second) ?? 0n),
    promptPerM,
    completionPerM,
    imageUsd,
    sortPrice:
      model.type === 'chatbot' ? promptPerM + completionPerM : model.type === 'text-to-image' ? imageUsd : audioUsd,
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
