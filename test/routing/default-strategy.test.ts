/**
 * The default strategy (power of two choices on in-flight requests) over large candidate lists: it honours every
 * filter, spreads load, and with a ceiling that leaves few candidates still finds one (via the price order).
 */
import t, { type Test } from 'tap'
import { HealthBook } from '../../src/health/health.js'
import { parseRegistry } from '../../src/registry/file-source.js'
import { RoutingPrefs } from '../../src/routing/preferences.js'
import { DIMENSION_CHAT, select, Selection } from '../../src/routing/select.js'
import { RoutingTable } from '../../src/routing/table.js'
import { usd } from './usd.js'

const N = 2000

function table(t: Test, n = N): RoutingTable {
  const providers = Array.from({ length: n }, (_, i) => ({
    address: '0x' + i.toString(16).padStart(40, '0'),
    url: `http://127.0.0.1:${10000 + (i % 50000)}`,
    models: [{ id: 'm', price: { prompt: `${(i + 1) / 1000}`, completion: '0.1' } }],
  }))
  const rt = new RoutingTable(parseRegistry(JSON.stringify({ providers }), 1), new HealthBook(), { indexThreads: 1, statsRebuildMs: 600_000 })
  t.teardown(() => rt.close())
  return rt
}

const REQ = { dimension: DIMENSION_CHAT, paramMask: 0, maxOutput: -1, allowedProviders: null, now: 0 }

t.test('a tight ceiling over 2,000 providers: the pick is always within it', async (t) => {
  const rt = table(t)
  const prefs = new RoutingPrefs()
  const ceiling = usd('0.003')
  prefs.maxPrompt = ceiling // only the three cheapest qualify
  for (let i = 0; i < 200; i++) {
    const sel = select(rt.model('m')!, prefs, { ...REQ, now: performance.now() }, null)
    if (!(sel instanceof Selection)) return t.fail(String(sel))
    const first = sel.next()!
    if (first.promptPerM > ceiling) return t.fail(`picked ${first.model.price.prompt}`)
  }
  t.pass('200 selections, all within the ceiling')
})

t.test('without filters the picks spread over many providers', async (t) => {
  const rt = table(t)
  const prefs = new RoutingPrefs()
  t.equal(prefs.maxPrompt, null)
  const seen = new Set<string>()
  for (let i = 0; i < 200; i++) {
    const sel = select(rt.model('m')!, prefs, { ...REQ, now: performance.now() }, null) as Selection
    seen.add(sel.next()!.provider.address)
  }
  t.ok(seen.size > 100, `${seen.size} distinct providers over 200 picks`)
})

t.test('between an idle and a busy provider, the idle one takes most requests', async (t) => {
  const rt = table(t, 2)
  const offers = rt.model('m')!.offers
  offers[0]!.stats.inflight = 5
  let idle = 0
  for (let i = 0; i < 400; i++) {
    const sel = select(rt.model('m')!, new RoutingPrefs(), { ...REQ, now: performance.now() }, null) as Selection
    if (sel.next() === offers[1]) idle++
  }
  // Of two offers both are always looked at, and then the idle one wins.
  t.equal(idle, 400, `idle provider took ${idle} of 400`)
})

t.test('two idle providers: the cheaper one, every time (both are always compared)', async (t) => {
  const rt = table(t, 2)
  const offers = rt.model('m')!.offers
  const cheaper = offers[0]!.sortPrice <= offers[1]!.sortPrice ? offers[0] : offers[1]
  let picked = 0
  for (let i = 0; i < 400; i++) {
    const sel = select(rt.model('m')!, new RoutingPrefs(), { ...REQ, now: performance.now() }, null) as Selection
    if (sel.next() === cheaper) picked++
  }
  t.equal(picked, 400, `the cheaper provider took ${picked} of 400 (four draws from both used to find one alone in 1 of 8)`)
})
