/**
 * The routing index build (filter by tier floor, sort by price and by latency, for every model): the sort alone,
 * and a whole rebuild with `table.refresh()` (what the router does on every registry change or latency-stats
 * move) both ways: inline, and through the piscina pool (structured clone both ways plus the main-thread
 * assembly of the new table). The loop time of the two rebuilds sets the table's INLINE_MAX_OFFERS.
 */
import { Bench } from 'tinybench'
import { buildIndex, FLOORS, type IndexInput, type IndexOutput } from '../../src/routing/index-build.js'
import { buildOfferSet } from '../../src/routing/offers.js'
import { INLINE_MAX_OFFERS, RoutingTable } from '../../src/routing/table.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary, type Finding } from './measure.js'
import { indexInputOf, modelId, syntheticSnapshot, warmBook } from './registry-fixture.js'

const SIZES = [100, 1_000, 10_000] as const
const MODELS = 10

function latencyKey(v: number): number {
  return Number.isNaN(v) ? Number.POSITIVE_INFINITY : v
}

function checkOutput(input: IndexInput, output: IndexOutput, n: number): void {
  for (let m = 0; m < input.modelCount; m++) {
    for (let floor = 0; floor < FLOORS; floor++) {
      const byPrice = output.price[m]![floor]!
      const byLatency = output.latency[m]![floor]!
      check(byPrice.length === byLatency.length, `both lists hold the same offers @${n}`)
      for (let k = 0; k < byPrice.length; k++) {
        const i = byPrice[k]!
        check(input.model[i] === m && input.tier[i]! >= floor, `offer of the model at or above the floor @${n}`)
        if (k > 0) check(input.sortPrice[byPrice[k - 1]!]! <= input.sortPrice[i]!, `price order @${n}`)
        if (k > 0) check(latencyKey(input.latency[byLatency[k - 1]!]!) <= latencyKey(input.latency[byLatency[k]!]!), `latency order @${n}`)
      }
    }
    check(output.price[m]![0]!.length === n / MODELS, `floor 0 keeps every offer of the model @${n}`)
  }
}

const bench = new Bench({ name: 'index-build', time: 500, warmupTime: 150 })
const tables: { pooled: RoutingTable; inline: RoutingTable }[] = []

for (const n of SIZES) {
  const snapshot = syntheticSnapshot(n / MODELS, MODELS)
  const book = warmBook(snapshot)
  const input = indexInputOf(buildOfferSet(snapshot, book))
  checkOutput(input, buildIndex(input), n)

  const table = new RoutingTable(snapshot, book, { indexThreads: 1, statsRebuildMs: 3_600_000, inlineMaxOffers: 0 })
  const inline = new RoutingTable(snapshot, book, { indexThreads: 1, statsRebuildMs: 3_600_000, inlineMaxOffers: Number.POSITIVE_INFINITY })
  tables.push({ pooled: table, inline })
  const before = table.model(modelId(0))!.price[0]!.map((o) => o.provider.address)
  await table.refresh()
  await inline.refresh()
  check(table.pooled && !inline.pooled, `one table rebuilds through the pool, the other inline @${n}`)
  for (const t of [table, inline]) {
    const after = t.model(modelId(0))!.price[0]!.map((o) => o.provider.address)
    check(before.length === after.length && before.every((a, i) => a === after[i]), `a rebuild yields the start-up order @${n}`)
  }

  bench.add(`buildIndex inline @${n} offers`, batched(n >= 10_000 ? 1 : 10, () => buildIndex(input)))
  bench.add(`table.refresh() inline @${n} offers`, async () => {
    await inline.refresh()
  })
  bench.add(`table.refresh() through the pool @${n} offers`, async () => {
    await table.refresh()
  })
}

await bench.run()
console.table(bench.table())

/**
 * What the pool buys is not wall time but main-thread time: the event loop stays free while the worker
 * sorts. Event-loop utilisation over a run of rebuilds gives the main thread's share (describe + clone +
 * assemble) per rebuild, to set against the inline build that would block it entirely.
 */
async function mainThreadMsPerRefresh(table: RoutingTable, runs: number): Promise<number> {
  const before = performance.eventLoopUtilization()
  for (let i = 0; i < runs; i++) await table.refresh()
  return performance.eventLoopUtilization(before).active / runs
}

const findings: Finding[] = []
for (const [k, n] of SIZES.entries()) {
  const sort = nsPerOp(bench.getTask(`buildIndex inline @${n} offers`))
  const pooled = nsPerOp(bench.getTask(`table.refresh() through the pool @${n} offers`))
  const runs = n >= 10_000 ? 10 : 50
  const inlineBusy = (await mainThreadMsPerRefresh(tables[k]!.inline, runs)) * 1e6
  const pooledBusy = (await mainThreadMsPerRefresh(tables[k]!.pooled, runs)) * 1e6
  findings.push({
    label: `rebuild @${n} offers`,
    value: `the sort alone ${formatNs(sort)}; a whole rebuild inline keeps the event loop ${formatNs(inlineBusy)}, through the pool ${formatNs(pooledBusy)} (${ratio(pooledBusy, inlineBusy)}; ${formatNs(pooled)} wall); the router indexes inline up to ${INLINE_MAX_OFFERS} offers (${n <= INLINE_MAX_OFFERS ? 'inline' : 'pool'} here)`,
  })
}
recordSummary(bench, findings)
for (const { pooled, inline } of tables) await Promise.all([pooled.close(), inline.close()])
