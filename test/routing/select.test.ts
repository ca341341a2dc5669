/**
 * Unit tests of candidate selection (spec §4.7 rules 1–6) over a RoutingTable built from a parsed registry,
 * and of the index the piscina worker builds on refresh/update (it must order exactly like the inline build).
 */
import t, { type Test } from 'tap'
import { RouterError } from '../../src/errors.js'
import { HealthBook, type HealthSettings } from '../../src/health/health.js'
import { parseRegistry } from '../../src/registry/file-source.js'
import type { RegistrySnapshot } from '../../src/registry/types.js'
import { paramBit } from '../../src/routing/params.js'
import { RoutingPrefs, SORT_LATENCY, SORT_PRICE } from '../../src/routing/preferences.js'
import { DIMENSION_AUDIO, DIMENSION_CHAT, DIMENSION_IMAGE, select, type Selection, type SelectionRequest } from '../../src/routing/select.js'
import { RoutingTable, type ModelIndex } from '../../src/routing/table.js'
import { usd } from './usd.js'

const A = '0x' + 'a'.repeat(40)
const B = '0x' + 'b'.repeat(40)
const C = '0x' + 'c'.repeat(40)
const D = '0x' + 'd'.repeat(40)
const E = '0x' + 'e'.repeat(40)
const NAME: Record<string, string> = { [A]: 'A', [B]: 'B', [C]: 'C', [D]: 'D', [E]: 'E' }

/**
 * Model `chat`, cheapest first: C (private, 0.1 per 1M in all), A (standard, 0.4), B (verified, 0.6), D (standard, 2).
 * Capabilities: A temperature+max_tokens cap 1000; B temperature+tools+max_tokens cap 4000; C nothing, cap unreported;
 * D tools+max_tokens+temperature cap 8000. `std-only` is served by standard providers only; `uncapped` only by E,
 * which advertises max_tokens but never reported a cap. `img` and `asr` are the image and speech surfaces.
 */
const REGISTRY = `
providers:
  - address: "${A}"
    url: http://127.0.0.1:1
    trust_mode: standard
    models:
      - id: chat
        max_completion_tokens: 1000
        supported_parameters: [temperature, max_tokens]
        price: { prompt: 0.1, completion: 0.3 }
      - id: std-only
        price: { prompt: 0.1, completion: 0.3 }
      - id: img
        type: text-to-image
        price: { image: 0.01 }
      - id: asr
        type: speech-to-text
        price: { audio_second: 0.0001 }
  - address: "${B}"
    url: http://127.0.0.1:2
    trust_mode: verified
    verifiability: TeeTLS
    models:
      - id: chat
        max_completion_tokens: 4000
        supported_parameters: [temperature, tools, max_tokens]
        price: { prompt: 0.2, completion: 0.4 }
      - id: img
        type: text-to-image
        price: { image: 0.003 }
  - address: "${C}"
    url: http://127.0.0.1:3
    trust_mode: private
    verifiability: TeeML
    models:
      - id: chat
        price: { prompt: 0.05, completion: 0.05 }
  - address: "${D}"
    url: http://127.0.0.1:4
    trust_mode: standard
    models:
      - id: chat
        max_completion_tokens: 8000
        supported_parameters: [tools, max_tokens, temperature]
        price: { prompt: 1, completion: 1 }
      - id: std-only
        price: { prompt: 1, completion: 1 }
  - address: "${E}"
    url: http://127.0.0.1:5
    models:
      - id: uncapped
        supported_parameters: [max_tokens]
        price: { prompt: 0.1, completion: 0.1 }
`

const FAIL_AT_ONCE: HealthSettings = { failureThreshold: 1, cooldownMs: 600_000, ewmaAlpha: 0.2 }
const TOOLS = paramBit('tools')
const SEED = paramBit('seed')
const MAX_TOKENS = paramBit('max_tokens')

interface Fixture {
  table: RoutingTable
  book: HealthBook
  snapshot: RegistrySnapshot
}

/** `pool`: rebuilds go through the piscina worker whatever the registry's size (else this small one is inline). */
function makeTable(t: Test, text = REGISTRY, book = new HealthBook(), pool = false): Fixture {
  const snapshot = parseRegistry(text, 1, 'select.test')
  const table = new RoutingTable(snapshot, book, { indexThreads: 1, statsRebuildMs: 60_000, ...(pool && { inlineMaxOffers: 0 }) })
  t.teardown(() => table.close())
  return { table, book, snapshot }
}

function prefs(fields: Partial<RoutingPrefs> = {}): RoutingPrefs {
  const p = new RoutingPrefs()
  Object.assign(p, fields)
  if (fields.sort !== undefined) p.sortSet = true
  return p
}

function request(fields: Partial<SelectionRequest> = {}): SelectionRequest {
  return { dimension: DIMENSION_CHAT, paramMask: 0, maxOutput: -1, allowedProviders: null, now: performance.now(), ...fields }
}

function index(table: RoutingTable, model = 'chat'): ModelIndex {
  const found = table.model(model)
  if (found === undefined) throw new Error(`model ${model} not in the table`)
  return found
}

/** Every candidate the selection hands out, in order, as provider letters. */
function drain(selection: Selection | RouterError): string[] | string {
  if (selection instanceof RouterError) return selection.code
  const out: string[] = []
  for (let offer = selection.next(); offer !== null; offer = selection.next()) out.push(NAME[offer.provider.address]!)
  return out
}

function route(table: RoutingTable, p: RoutingPrefs, req: Partial<SelectionRequest> = {}, model = 'chat'): string[] | string {
  const pinned = p.address === '' ? null : (table.provider(p.address) ?? null)
  return drain(select(index(table, model), p, request(req), pinned))
}

function markUnhealthy(table: RoutingTable, address: string): void {
  table.provider(address)!.health.recordFailure(performance.now(), FAIL_AT_ONCE)
}

/** Addresses of every pre-sorted list of every model, for comparing two builds. */
function orders(table: RoutingTable): Record<string, { price: string[][]; latency: string[][] }> {
  const out: Record<string, { price: string[][]; latency: string[][] }> = {}
  for (const [id, model] of table.models()) {
    out[id] = {
      price: model.price.map((list) => list.map((o) => NAME[o.provider.address]!)),
      latency: model.latency.map((list) => list.map((o) => NAME[o.provider.address]!)),
    }
  }
  return out
}

t.test('price sort hands out every candidate once, cheapest first', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE })), ['C', 'A', 'B', 'D'])
})

t.test('trust floor keeps only providers at or above the tier', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE, tier: 0 })), ['C', 'A', 'B', 'D'], 'standard: everyone')
  t.same(route(table, prefs({ sort: SORT_PRICE, tier: 1 })), ['C', 'B'], 'verified: a private provider satisfies it too')
  t.same(route(table, prefs({ sort: SORT_PRICE, tier: 2 })), ['C'], 'private: only the private provider')
})

t.test('no provider at the trust floor is 503 no_provider_for_trust_mode', async (t) => {
  const { table } = makeTable(t)
  const err = select(index(table, 'std-only'), prefs({ tier: 1 }), request(), null)
  t.ok(err instanceof RouterError)
  t.equal((err as RouterError).code, 'no_provider_for_trust_mode')
  t.equal((err as RouterError).status, 503)
})

t.test('chat price ceilings are hard filters applied before the walk', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE, maxPrompt: usd('0.15') })), ['C', 'A'], 'prompt ceiling')
  t.same(route(table, prefs({ sort: SORT_PRICE, maxCompletion: usd('0.35') })), ['C', 'A'], 'completion ceiling')
  t.same(route(table, prefs({ sort: SORT_PRICE, maxPrompt: usd('0.2'), maxCompletion: usd('0.4') })), ['C', 'A', 'B'], 'a ceiling equal to the price admits it')
  t.same(route(table, prefs({ sort: SORT_PRICE, maxPrompt: usd('0.05'), maxCompletion: usd('0.05') })), ['C'], 'both ceilings')
  t.same(route(table, prefs({ sort: SORT_PRICE, maxImage: usd('0') })), ['C', 'A', 'B', 'D'], 'the image ceiling is inert on chat')
  t.equal(route(table, prefs({ maxPrompt: usd('0.01') })), 'no_provider_within_max_price')
  t.equal(route(table, prefs({ maxCompletion: usd('0') })), 'no_provider_within_max_price')
})

t.test('ceilings are exact: a price a hair above the ceiling is excluded where a float comparison would admit it', async (t) => {
  // As doubles, 0.499999999999999999 and 0.5 are equal, and so are 0.1 and 0.10000000000000001.
  const { table } = makeTable(
    t,
    `
providers:
  - address: "${A}"
    url: http://127.0.0.1:1
    models:
      - id: chat
        price: { prompt: 0.5, completion: 0.5 }
      - id: img
        type: text-to-image
        price: { image: "0.10000000000000001" }
`,
  )
  t.equal(route(table, prefs({ maxPrompt: usd('0.499999999999999999') })), 'no_provider_within_max_price', 'prompt')
  t.equal(route(table, prefs({ maxCompletion: usd('0.499999999999999999') })), 'no_provider_within_max_price', 'completion')
  t.equal(route(table, prefs({ address: A, maxPrompt: usd('0.499999999999999999') })), 'pinned_provider_exceeds_max_price', 'pinned')
  t.same(route(table, prefs({ maxPrompt: usd('0.5'), maxCompletion: usd('0.5') })), ['A'], 'a ceiling equal to the price admits it')
  const img = { dimension: DIMENSION_IMAGE }
  t.equal(route(table, prefs({ maxImage: usd('0.1') }), img, 'img'), 'no_provider_within_max_price', 'image')
  t.same(route(table, prefs({ maxImage: usd('0.10000000000000001') }), img, 'img'), ['A'], 'image, equal')
})

t.test('the image ceiling filters image models and the token ceilings are inert there', async (t) => {
  const { table } = makeTable(t)
  const img = { dimension: DIMENSION_IMAGE }
  t.same(route(table, prefs({ sort: SORT_PRICE }), img, 'img'), ['B', 'A'])
  t.same(route(table, prefs({ sort: SORT_PRICE, maxImage: usd('0.005') }), img, 'img'), ['B'])
  t.same(route(table, prefs({ sort: SORT_PRICE, maxPrompt: usd('0'), maxCompletion: usd('0') }), img, 'img'), ['B', 'A'])
  t.equal(route(table, prefs({ maxImage: usd('0.001') }), img, 'img'), 'no_provider_within_max_price')
})

t.test('speech-to-text enforces no price ceiling', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ maxPrompt: usd('0'), maxCompletion: usd('0'), maxImage: usd('0') }), { dimension: DIMENSION_AUDIO }, 'asr'), ['A'])
})

t.test('unhealthy providers are tried last, never dropped', async (t) => {
  const { table } = makeTable(t)
  markUnhealthy(table, C)
  t.same(route(table, prefs({ sort: SORT_PRICE })), ['A', 'B', 'D', 'C'])
  t.same(route(table, prefs({ sort: SORT_PRICE, tier: 2 })), ['C'], 'an unhealthy provider still serves its tier')
})

t.test('Require-Parameters off: capable providers first, incapable ones after, healthy before unhealthy', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE }), { paramMask: TOOLS }), ['B', 'D', 'C', 'A'])
  t.same(route(table, prefs({ sort: SORT_PRICE }), { paramMask: SEED }), ['C', 'A', 'B', 'D'], 'none capable: plain price order, no error')
  markUnhealthy(table, D)
  t.same(route(table, prefs({ sort: SORT_PRICE }), { paramMask: TOOLS }), ['B', 'C', 'A', 'D'])
})

t.test('Require-Parameters on drops incapable providers, and none left is model_not_capable', async (t) => {
  const { table } = makeTable(t)
  const on = { sort: SORT_PRICE, requireParameters: 1 }
  t.same(route(table, prefs(on), { paramMask: TOOLS }), ['B', 'D'])
  t.same(route(table, prefs(on), { paramMask: 0 }), ['C', 'A', 'B', 'D'], 'no parameters asked: nobody is dropped')
  t.equal(route(table, prefs(on), { paramMask: SEED }), 'model_not_capable')
  t.equal(route(table, prefs(on), { paramMask: TOOLS | SEED }), 'model_not_capable')
})

t.test('Require-Parameters on with a maximum output length keeps only reported caps that hold it', async (t) => {
  const { table } = makeTable(t)
  const on = { sort: SORT_PRICE, requireParameters: 1 }
  t.same(route(table, prefs(on), { paramMask: MAX_TOKENS, maxOutput: 1000 }), ['A', 'B', 'D'], 'a cap equal to the request holds it')
  t.same(route(table, prefs(on), { paramMask: MAX_TOKENS, maxOutput: 2000 }), ['B', 'D'])
  t.equal(route(table, prefs(on), { paramMask: MAX_TOKENS, maxOutput: 9000 }), 'no_provider_within_max_tokens')
  t.equal(
    route(table, prefs(on), { paramMask: MAX_TOKENS, maxOutput: 10 }, 'uncapped'),
    'no_provider_within_max_tokens',
    'a cap never reported is excluded',
  )
})

t.test('Require-Parameters off: an unreported cap is unknown, a small reported cap is tried last', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE }), { paramMask: MAX_TOKENS, maxOutput: 10 }, 'uncapped'), ['E'])
  // C never reported a cap (unknown, so capable when off); A's reported 1000 cannot hold 2000, so it goes last.
  t.same(route(table, prefs({ sort: SORT_PRICE }), { paramMask: MAX_TOKENS, maxOutput: 2000 }), ['C', 'B', 'D', 'A'])
  t.same(route(table, prefs({ sort: SORT_PRICE }), { paramMask: 0, maxOutput: 9000 }), ['C', 'A', 'B', 'D'], 'nothing holds it: served anyway')
})

t.test("the key's allowed providers bound the walk", async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE }), { allowedProviders: new Set([A, D]) }), ['A', 'D'])
  t.equal(route(table, prefs(), { allowedProviders: new Set([E]) }), 'provider_not_allowed')
})

t.test('pin: the pinned provider comes first whatever the sort, alone without fallbacks', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ address: D, sort: SORT_PRICE })), ['D'])
  t.same(route(table, prefs({ address: D, sort: SORT_LATENCY })), ['D'])
  t.same(route(table, prefs({ address: D })), ['D'])
})

t.test('Allow-Fallbacks false without a pin: only the first candidate is handed out', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_PRICE, allowFallbacks: 0 })), ['C'])
  t.same(route(table, prefs({ sort: SORT_LATENCY, allowFallbacks: 0, tier: 1 })), ['C'])
  const order = route(table, prefs({ allowFallbacks: 0 }))
  t.equal(order.length, 1, 'default strategy: one candidate')
})

t.test('pin with Allow-Fallbacks true: the pinned provider, then the others once each', async (t) => {
  const { table } = makeTable(t)
  t.same(route(table, prefs({ address: B, allowFallbacks: 1, sort: SORT_PRICE })), ['B', 'C', 'A', 'D'])
  t.same(route(table, prefs({ address: A, allowFallbacks: 1, sort: SORT_PRICE, maxPrompt: usd('0.15') })), ['A', 'C'], 'fallbacks respect the ceiling')
  t.same(route(table, prefs({ address: B, allowFallbacks: 1, sort: SORT_PRICE, tier: 1 })), ['B', 'C'], 'fallbacks respect the tier')
})

t.test('pin skips the parameter filters of rule 4', async (t) => {
  const { table } = makeTable(t)
  const on = { sort: SORT_PRICE, requireParameters: 1 }
  t.same(route(table, prefs({ ...on, address: A }), { paramMask: TOOLS }), ['A'], 'A lacks tools')
  t.same(route(table, prefs({ ...on, address: A }), { paramMask: MAX_TOKENS, maxOutput: 5000 }), ['A'], 'A cap 1000 < 5000')
  t.same(route(table, prefs({ ...on, address: C }), { paramMask: SEED }), ['C'])
})

t.test('pin: an unhealthy pinned provider is still tried', async (t) => {
  const { table } = makeTable(t)
  markUnhealthy(table, B)
  t.same(route(table, prefs({ address: B })), ['B'])
})

t.test('pin errors: above the ceiling, below the tier, not serving the model, unknown, not allowed', async (t) => {
  const { table } = makeTable(t)
  t.equal(route(table, prefs({ address: D, maxPrompt: usd('0.5') })), 'pinned_provider_exceeds_max_price')
  t.equal(route(table, prefs({ address: D, maxCompletion: usd('0.5') })), 'pinned_provider_exceeds_max_price')
  t.same(route(table, prefs({ address: D, maxImage: usd('0') })), ['D'], 'the image ceiling is inert on chat, pinned too')
  t.equal(route(table, prefs({ address: A, tier: 1 })), 'no_provider_for_trust_mode')
  t.same(route(table, prefs({ address: C, tier: 1 })), ['C'], 'a stronger pinned tier satisfies the floor')
  t.equal(route(table, prefs({ address: E })), 'provider_not_found', 'E does not serve chat')
  t.equal(route(table, prefs({ address: '0x' + '9'.repeat(40) })), 'provider_not_found', 'unregistered')
  t.equal(route(table, prefs({ address: A }), { allowedProviders: new Set([B]) }), 'provider_not_allowed')
})

t.test('default strategy hands out every eligible candidate exactly once, healthy first', async (t) => {
  const { table } = makeTable(t)
  markUnhealthy(table, C)
  const firsts = new Set<string>()
  for (let i = 0; i < 100; i++) {
    const order = route(table, prefs())
    t.equal(Array.isArray(order) ? order.length : 0, 4, 'four candidates')
    if (!Array.isArray(order)) continue
    t.same([...order].sort(), ['A', 'B', 'C', 'D'], 'each once')
    t.equal(order[3], 'C', 'the unhealthy provider is last')
    firsts.add(order[0]!)
  }
  t.ok(firsts.size > 1, `load is spread over several first choices (${[...firsts].join(',')})`)
  t.same(route(table, prefs({ maxPrompt: usd('0.15') })).length, 2, 'ceilings apply to the default strategy too')
})

t.test('default strategy prefers the candidate with fewer requests in flight', async (t) => {
  const { table } = makeTable(t)
  const offers = index(table, 'std-only').offers
  const busy = offers.find((o) => o.provider.address === A)!
  busy.stats.inflight = 5
  let idleFirst = 0
  for (let i = 0; i < 400; i++) {
    const order = route(table, prefs(), {}, 'std-only')
    if (Array.isArray(order) && order[0] === 'D') idleFirst++
  }
  busy.stats.inflight = 0
  // Two random probes: the idle one wins unless both probes hit the busy one (1 in 4).
  t.ok(idleFirst > 200, `idle provider first in ${idleFirst} of 400`)
})

t.test('latency sort follows the observed time to first byte once the table is re-sorted', async (t) => {
  const { table, book } = makeTable(t)
  t.same(route(table, prefs({ sort: SORT_LATENCY })), ['C', 'A', 'B', 'D'], 'nothing observed yet: price order')
  book.offer(D, 'chat').observeTtfb(5, 1)
  book.offer(B, 'chat').observeTtfb(20, 1)
  book.offer(A, 'chat').observeTtfb(80, 1)
  t.same(route(table, prefs({ sort: SORT_LATENCY })), ['C', 'A', 'B', 'D'], 'the table is not re-sorted on the hot path')
  await table.refresh()
  t.same(route(table, prefs({ sort: SORT_LATENCY })), ['D', 'B', 'A', 'C'], 'observed fastest first, never observed last')
  t.same(route(table, prefs({ sort: SORT_LATENCY, tier: 1 })), ['B', 'C'])
  t.same(route(table, prefs({ sort: SORT_PRICE })), ['C', 'A', 'B', 'D'], 'price order unchanged')
  t.equal(table.pooled, false, 'a registry this small is re-sorted inline: no worker thread started')
})

t.test('the worker-built index orders exactly like the inline build', async (t) => {
  const { table, book, snapshot } = makeTable(t, REGISTRY, new HealthBook(), true)
  book.offer(D, 'chat').observeTtfb(5, 1)
  book.offer(A, 'chat').observeTtfb(5, 1)
  book.offer(B, 'chat').observeTtfb(40, 1)
  book.offer(A, 'std-only').observeTtfb(30, 1)
  book.offer(D, 'std-only').observeTtfb(10, 1)
  await table.refresh()
  const inline = makeTable(t, REGISTRY, book).table
  t.equal(table.pooled, true, 'the rebuild went through the pool')
  t.same(orders(table), orders(inline), 'refresh() through piscina == inline')
  t.same(orders(table).chat!.latency[0], ['A', 'D', 'B', 'C'], 'latency ties break on price')
  t.equal(table.version, snapshot.version)
})

t.test('update() swaps in a new snapshot indexed by the worker, the same as an inline build of it', async (t) => {
  const { table, book } = makeTable(t, REGISTRY, new HealthBook(), true)
  book.offer(B, 'chat').observeTtfb(7, 1)
  // Providers reversed and D dropped: a new registry version (YAML is a superset of JSON).
  const current = parseRegistry(REGISTRY, 1, 'select.test').providers
  const providers = current.filter((p) => p.address !== D).reverse()
  // Back to the file's fields: a record also carries what the file does not take (the base path, an empty signer).
  const asFile = providers.map((p) => ({ ...p, simulate: undefined, api_path: undefined, tee_signer: p.tee_signer === '' ? undefined : p.tee_signer }))
  const next = parseRegistry(JSON.stringify({ providers: asFile }), 2, 'select.test')
  await table.update(next)
  t.equal(table.pooled, true, 'the update went through the pool')
  t.equal(table.version, 2)
  t.equal(table.provider(D), undefined, 'the dropped provider is gone')
  t.same(route(table, prefs({ sort: SORT_PRICE })), ['C', 'A', 'B'])
  t.same(route(table, prefs({ sort: SORT_LATENCY })), ['B', 'C', 'A'], 'latency stats survive the reload')
  const inline = new RoutingTable(next, book, { indexThreads: 1, statsRebuildMs: 60_000 })
  t.teardown(() => inline.close())
  t.same(orders(table), orders(inline))
})
