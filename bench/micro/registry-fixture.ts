/**
 * A synthetic, deterministic registry for the routing benchmarks: `providers` providers serving `models`
 * chat models each, tiers in rotation, prices and latency stats from a seeded generator, so the main thread
 * and a worker thread build the very same offers from the same two numbers.
 */
import { HealthBook } from '../../src/health/health.js'
import { buildIndex, FLOORS, type IndexInput, type IndexOutput } from '../../src/routing/index-build.js'
import { buildOfferSet, type Offer, type OfferSet } from '../../src/routing/offers.js'
import type { ModelIndex } from '../../src/routing/table.js'
import type { RegistryModel, RegistryProvider, RegistrySnapshot } from '../../src/registry/types.js'
import { TRUST_MODES } from '../../src/vocabulary/trust.js'
import { seeded } from '../../test/helpers/seeded.js'

const PARAMS = ['temperature', 'top_p', 'max_tokens', 'seed', 'tools', 'tool_choice'] as const


export function modelId(m: number): string {
  return `bench-model-${m}`
}

export function providerAddress(i: number): string {
  return '0x' + i.toString(16).padStart(40, '0')
}

/** Prompt prices are drawn from 0.0500..1.0499 USD per 1M tokens; completion is three times that. */
export function syntheticSnapshot(providers: number, models = 1, seed = 42): RegistrySnapshot {
  const random = seeded(seed)
  const list: RegistryProvider[] = []
  for (let i = 0; i < providers; i++) {
    const served: RegistryModel[] = []
    for (let m = 0; m < models; m++) {
      const prompt = 0.05 + Math.floor(random() * 10_000) / 10_000
      served.push({
        id: modelId(m),
        type: 'chatbot',
        formats: ['openai'],
        context_length: 32_768,
        max_completion_tokens: 4096,
        supported_parameters: PARAMS.slice(0, 3 + (i % 4)),
        price: { prompt: prompt.toFixed(4), completion: (prompt * 3).toFixed(4) },
      })
    }
    list.push({
      address: providerAddress(i),
      url: `http://127.0.0.1:${10_000 + (i % 50_000)}`,
      api_path: '/v1',
      trust_mode: TRUST_MODES[i % TRUST_MODES.length]!,
      verifiability: '',
      tee_type: '',
      tee_verifier: '',
      tee_signer: '',
      models: served,
      simulate: null,
    })
  }
  return { providers: list, version: 1 }
}

/**
 * A health book whose latency stats are already observed (90% of offers, 20–500 ms), as after some traffic:
 * the latency sort then has something to sort. Offers never observed sort last.
 */
export function warmBook(snapshot: RegistrySnapshot, seed = 7): HealthBook {
  const random = seeded(seed)
  const book = new HealthBook()
  for (const p of snapshot.providers) {
    for (const m of p.models) {
      const ms = 20 + random() * 480
      if (random() < 0.9) book.offer(p.address, m.id).observeTtfb(ms, 1)
    }
  }
  return book
}

/** The columns the table hands the index builder (the same as table.ts's private `describe`). */
export function indexInputOf(offers: OfferSet): IndexInput {
  const modelIds = [...offers.byModel.keys()]
  const number = new Map(modelIds.map((id, i) => [id, i]))
  const n = offers.all.length
  const model = new Int32Array(n)
  const tier = new Uint8Array(n)
  const sortPrice = new Float64Array(n)
  const latency = new Float64Array(n)
  offers.all.forEach((offer, i) => {
    model[i] = number.get(offer.model.id)!
    tier[i] = offer.tier
    sortPrice[i] = offer.sortPrice
    latency[i] = offer.stats.ewmaTtfbMs
  })
  return { modelCount: modelIds.length, model, tier, sortPrice, latency }
}

/** One model's index from a build output (the same as table.ts's private `assemble`, for one model). */
export function modelIndexOf(offers: OfferSet, output: IndexOutput, m: number): ModelIndex {
  const id = [...offers.byModel.keys()][m]!
  const resolve = (positions: Int32Array): Offer[] => Array.from(positions, (i) => offers.all[i]!)
  const price: Offer[][] = []
  const latency: Offer[][] = []
  for (let floor = 0; floor < FLOORS; floor++) {
    price.push(resolve(output.price[m]![floor]!))
    latency.push(resolve(output.latency[m]![floor]!))
  }
  return { id, offers: offers.byModel.get(id)!, price, latency }
}

/** The whole routing state of one model built without a RoutingTable (no worker pool): for worker threads. */
export function standaloneIndex(providers: number): ModelIndex {
  const snapshot = syntheticSnapshot(providers)
  const offers = buildOfferSet(snapshot, warmBook(snapshot))
  return modelIndexOf(offers, buildIndex(indexInputOf(offers)), 0)
}

/** The prompt price (atto-USD per 1M) below which `share` of the offers of model 0 lie: a ceiling that keeps that share. */
export function promptCeiling(index: ModelIndex, share: number): bigint {
  const prices = index.offers.map((o) => o.promptPerM).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  return prices[Math.min(prices.length - 1, Math.floor(prices.length * share))]!
}
