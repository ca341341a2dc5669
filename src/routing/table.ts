/**
 * The routing table the hot path reads: offers of the current registry snapshot plus, per model, the
 * pre-sorted lists of index-build.ts. Rebuilds (a new snapshot, or latency stats that moved) are swapped in whole,
 * so a request always sees one consistent table and never waits for a build. A large registry is sorted in a
 * piscina worker; a small one inline, because there the worker costs the event loop more than the sort itself
 * (the structured clone both ways: at 100 offers 2–4× the loop time of the whole rebuild inline, INLINE_MAX_OFFERS)
 * and its idle thread about 10 MB of memory.
 */
import { Piscina } from 'piscina'
import type { HealthBook } from '../health/health.js'
import { log } from '../log.js'
import type { RegistrySnapshot } from '../registry/types.js'
import { buildIndex, FLOORS, type IndexInput, type IndexOutput } from './index-build.js'
import { buildOfferSet, type Offer, type OfferSet, type ProviderEntry } from './offers.js'

export interface ModelIndex {
  readonly id: string
  /** Every offer of the model, registry order (the catalog and error explanations read this). */
  readonly offers: readonly Offer[]
  /** Per tier floor (0..2): offers at or above the floor, cheapest first. */
  readonly price: readonly (readonly Offer[])[]
  /** Per tier floor: offers at or above the floor, lowest time-to-first-byte EWMA first. */
  readonly latency: readonly (readonly Offer[])[]
}

export interface TableSettings {
  readonly indexThreads: number
  readonly statsRebuildMs: number
  /** Registries of at most this many offers are indexed inline (default INLINE_MAX_OFFERS). */
  readonly inlineMaxOffers?: number
}

/**
 * Below where the pool starts to save the loop time it costs (micro benchmark index-build, the whole rebuild with
 * the table's assembly; two runs of 2026-11-23): at 100 offers a rebuild keeps the loop busy 53–72 µs inline
 * against 144–209 µs through the pool, at 1,000 offers 480–865 against 280–678 µs; the lines cross between 300
 * and 500 offers.
 */
export const INLINE_MAX_OFFERS = 250

interface TableState {
  readonly offers: OfferSet
  readonly models: ReadonlyMap<string, ModelIndex>
}

function describe(offers: OfferSet): { input: IndexInput; modelIds: string[] } {
  const modelIds = [...offers.byModel.keys()]
  const number = new Map(modelIds.map((id, i) => [id, i]))
  const n = offers.all.length
  const input: IndexInput = {
    modelCount: modelIds.length,
    model: new Int32Array(n),
    tier: new Uint8Array(n),
    sortPrice: new Float64Array(n),
    latency: new Float64Array(n),
  }
  offers.all.forEach((offer, i) => {
    ;(input.model as Int32Array)[i] = number.get(offer.model.id)!
    ;(input.tier as Uint8Array)[i] = offer.tier
    ;(input.sortPrice as Float64Array)[i] = offer.sortPrice
    ;(input.latency as Float64Array)[i] = offer.stats.ewmaTtfbMs
  })
  return { input, modelIds }
}

function assemble(offers: OfferSet, modelIds: string[], output: IndexOutput): TableState {
  const models = new Map<string, ModelIndex>()
  const resolve = (positions: Int32Array): Offer[] => Array.from(positions, (i) => offers.all[i]!)
  modelIds.forEach((id, m) => {
    const price: Offer[][] = []
    const latency: Offer[][] = []
    for (let floor = 0; floor < FLOORS; floor++) {
      price.push(resolve(output.price[m]![floor]!))
      latency.push(resolve(output.latency[m]![floor]!))
    }
    models.set(id, { id, offers: offers.byModel.get(id)!, price, latency })
  })
  return { offers, models }
}

export class RoutingTable {
  #state: TableState
  readonly #book: HealthBook
  readonly #settings: TableSettings
  /** Started on the first rebuild of a registry too large to index inline. */
  #pool: Piscina<IndexInput, IndexOutput> | null = null
  readonly #timer: NodeJS.Timeout
  /** Builds run one after another; a newer snapshot always lands last. */
  #chain: Promise<void> = Promise.resolve()
  #builtEpoch = -1
  #building = false

  /** Builds the first table inline so the server can answer as soon as it listens. */
  constructor(snapshot: RegistrySnapshot, book: HealthBook, settings: TableSettings) {
    this.#book = book
    const offers = buildOfferSet(snapshot, book)
    const { input, modelIds } = describe(offers)
    this.#state = assemble(offers, modelIds, buildIndex(input))
    this.#builtEpoch = book.latencyEpoch
    this.#settings = settings
    this.#timer = setInterval(() => this.#rebuildIfStatsMoved(), settings.statsRebuildMs)
    this.#timer.unref()
  }

  /** Whether rebuilds have needed the worker pool (a registry larger than the inline limit). */
  get pooled(): boolean {
    return this.#pool !== null
  }

  get version(): number {
    return this.#state.offers.version
  }

  model(id: string): ModelIndex | undefined {
    return this.#state.models.get(id)
  }

  models(): ReadonlyMap<string, ModelIndex> {
    return this.#state.models
  }

  /** Every provider of the current registry, healthy or not. */
  providers(): Iterable<ProviderEntry> {
    return this.#state.offers.providers.values()
  }

  provider(address: string): ProviderEntry | undefined {
    return this.#state.offers.providers.get(address)
  }

  /** Swaps in a new registry snapshot once the worker has indexed it. */
  update(snapshot: RegistrySnapshot): Promise<void> {
    return this.#enqueue(() => buildOfferSet(snapshot, this.#book))
  }

  /** Re-sorts by the latest latency stats (also what the stats timer does). */
  refresh(): Promise<void> {
    return this.#enqueue(() => this.#state.offers)
  }

  #rebuildIfStatsMoved(): void {
    if (this.#building || this.#book.latencyEpoch === this.#builtEpoch) return
    this.refresh().catch((err: unknown) => log.error('routing index rebuild failed', { err: String(err) }))
  }

  #enqueue(offersOf: () => OfferSet): Promise<void> {
    const run = async (): Promise<void> => {
      this.#building = true
      try {
        const offers = offersOf()
        const epoch = this.#book.latencyEpoch
        const { input, modelIds } = describe(offers)
        const inline = offers.all.length <= (this.#settings.inlineMaxOffers ?? INLINE_MAX_OFFERS)
        const output = inline ? buildIndex(input) : await this.#poolRun(input)
        this.#state = assemble(offers, modelIds, output)
        this.#builtEpoch = epoch
      } finally {
        this.#building = false
      }
    }
    const next = this.#chain.then(run, run)
    this.#chain = next.catch(() => {})
    return next
  }

  #poolRun(input: IndexInput): Promise<IndexOutput> {
    this.#pool ??= new Piscina({
      filename: new URL('./index-worker.js', import.meta.url).href,
      minThreads: this.#settings.indexThreads,
      maxThreads: this.#settings.indexThreads,
      idleTimeout: Number.POSITIVE_INFINITY,
    })
    return this.#pool.run(input)
  }

  async close(): Promise<void> {
    clearInterval(this.#timer)
    await this.#chain
    await this.#pool?.close({ force: true })
  }
}
