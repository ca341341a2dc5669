/**
 * Candidate selection for one request (select + the first next()) at 10 to 10,000 providers per model:
 * inline on the routing table's precomputed index, as the router does it, against a piscina round trip per
 * request to a worker that does the same selection. The gap is why DESIGN.md §1 keeps selection inline and
 * sends only the index build to the pool.
 */
import { Piscina } from 'piscina'
import { Bench } from 'tinybench'
import { RouterError } from '../../src/errors.js'
import { RoutingPrefs, SORT_DEFAULT, SORT_LATENCY, SORT_PRICE, UNSET } from '../../src/routing/preferences.js'
import { DIMENSION_CHAT, select, type SelectionRequest } from '../../src/routing/select.js'
import type { Offer } from '../../src/routing/offers.js'
import { RoutingTable, type ModelIndex } from '../../src/routing/table.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary, type Finding } from './measure.js'
import { modelId, promptCeiling, syntheticSnapshot, warmBook } from './registry-fixture.js'
import type { SelectTask } from './select-worker.js'

const SIZES = [10, 100, 1_000, 10_000] as const
const CEILING_SHARE = 0.25
const BATCH = 200

interface Variant {
  readonly label: string
  readonly sort: number
  readonly ceiling: boolean
}

const VARIANTS: readonly Variant[] = [
  { label: 'default (power of two)', sort: SORT_DEFAULT, ceiling: false },
  { label: 'sort=price', sort: SORT_PRICE, ceiling: false },
  { label: 'sort=latency', sort: SORT_LATENCY, ceiling: false },
  { label: `default + price ceiling (${CEILING_SHARE * 100}% of offers under it)`, sort: SORT_DEFAULT, ceiling: true },
]

function prefsFor(variant: Variant, ceiling: bigint): RoutingPrefs {
  const prefs = new RoutingPrefs()
  prefs.sort = variant.sort
  prefs.sortSet = variant.sort !== SORT_DEFAULT
  if (variant.ceiling) prefs.maxPrompt = ceiling
  return prefs
}

function firstOffer(index: ModelIndex, prefs: RoutingPrefs, req: SelectionRequest): Offer {
  const selection = select(index, prefs, req, null)
  if (selection instanceof RouterError) throw selection
  const offer = selection.next()
  if (offer === null) throw new Error('no candidate')
  return offer
}

const tables = new Map<number, RoutingTable>()
const pool = new Piscina<SelectTask, string>({
  filename: new URL('./select-worker.js', import.meta.url).href,
  minThreads: 1,
  maxThreads: 1,
  idleTimeout: Number.POSITIVE_INFINITY,
})
const bench = new Bench({ name: 'select', time: 400, warmupTime: 200 })

for (const n of SIZES) {
  const snapshot = syntheticSnapshot(n)
  const table = new RoutingTable(snapshot, warmBook(snapshot), { indexThreads: 1, statsRebuildMs: 3_600_000 })
  tables.set(n, table)
  const index = table.model(modelId(0))!
  const ceiling = promptCeiling(index, CEILING_SHARE)
  const req: SelectionRequest = { dimension: DIMENSION_CHAT, paramMask: 0, maxOutput: -1, allowedProviders: null, now: performance.now() }

  // Right answers first: the cheapest, the fastest, something under the ceiling, something at all.
  check(firstOffer(index, prefsFor(VARIANTS[1]!, ceiling), req) === index.price[0]![0], `sort=price picks the cheapest at ${n}`)
  check(firstOffer(index, prefsFor(VARIANTS[2]!, ceiling), req) === index.latency[0]![0], `sort=latency picks the fastest at ${n}`)
  for (let i = 0; i < 50; i++) {
    check(index.offers.includes(firstOffer(index, prefsFor(VARIANTS[0]!, ceiling), req)), `default picks an offer at ${n}`)
    check(firstOffer(index, prefsFor(VARIANTS[3]!, ceiling), req).promptPerM <= ceiling, `ceiling respected at ${n}`)
  }
  const cheapest = await pool.run({ providers: n, sort: SORT_PRICE, tier: UNSET, maxPrompt: null, maxOutput: -1, paramMask: 0 })
  check(cheapest === index.price[0]![0]!.provider.address, `the worker's copy selects like the main thread at ${n}`)

  for (const variant of VARIANTS) {
    const prefs = prefsFor(variant, ceiling)
    bench.add(`inline ${variant.label} @${n}`, batched(BATCH, () => firstOffer(index, prefs, req)))
  }
  const task: SelectTask = { providers: n, sort: SORT_DEFAULT, tier: UNSET, maxPrompt: null, maxOutput: -1, paramMask: 0 }
  // Warm the worker's JIT on this size too, so the first task measured is not the one that pays for it.
  for (let i = 0; i < 300; i++) await pool.run(task)
  bench.add(`piscina round trip, default @${n}`, async () => {
    await pool.run(task)
  })
}

await bench.run()
console.table(bench.table())

const findings: Finding[] = []
const inline100 = nsPerOp(bench.getTask(`inline ${VARIANTS[0]!.label} @100`))
findings.push({ label: 'target: inline selection at 100 providers < 1 µs', value: formatNs(inline100), pass: inline100 < 1000 })
for (const n of SIZES) {
  const inline = nsPerOp(bench.getTask(`inline ${VARIANTS[0]!.label} @${n}`))
  const trip = nsPerOp(bench.getTask(`piscina round trip, default @${n}`))
  findings.push({ label: `pool round trip vs inline (default) @${n}`, value: `${formatNs(trip)} vs ${formatNs(inline)} = ${ratio(trip, inline)}` })
}
for (const n of SIZES) {
  const ceiling = nsPerOp(bench.getTask(`inline ${VARIANTS[3]!.label} @${n}`))
  const price = nsPerOp(bench.getTask(`inline ${VARIANTS[1]!.label} @${n}`))
  findings.push({ label: `price ceiling vs sort=price @${n}`, value: `${formatNs(ceiling)} vs ${formatNs(price)} = ${ratio(ceiling, price)}` })
}
recordSummary(bench, findings)

for (const table of tables.values()) await table.close()
await pool.close()
