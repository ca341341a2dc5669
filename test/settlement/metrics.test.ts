/**
 * The settlement series of /metrics, scraped from a router paying a chain provider (issue 44), as the provider
 * goes from unpaid to funded, serves, settles, and settles more than it served.
 */
import t from 'tap'
import { request } from 'undici'
import { chainAccount } from '../../src/demo/local-chain.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider, chatQwen } from '../helpers/chain-stack.js'
import { eventually } from '../helpers/wait.js'

const G = 10n ** 18n
/** Below the tolerance (0.01 0G) once, above it twice: the second settlement gets the provider flagged. */
const OVERCHARGE = 6n * 10n ** 15n
const GREEDY: ChainProvider = { account: 1, model: 'qwen', inputPrice: G / 1000n, outputPrice: G / 1000n, tee: true, broker: { settleIntervalMs: 600_000, overcharge: OVERCHARGE } }

/** Each sample of the scrape: `name{labels}` → value. */
async function scrape(url: string): Promise<Map<string, number>> {
  const text = await (await request(`${url}/metrics`)).body.text()
  const samples = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (!line.startsWith('svc_settlement_')) continue
    const at = line.lastIndexOf(' ')
    samples.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return samples
}

t.test('/metrics follows a provider from unpaid to funded, served, settled and flagged', async (t) => {
  const chain = await startChainStack(t, [GREEDY], { extra: { settlement: { key_file: payerKeyFile(t), interval_ms: 100, sub_account: { min_0g: '1', target_0g: '2' } }, tee: { sample_rate: 0 } } })
  const { stack, providers: [p] } = chain
  const url = stack.url
  const routable = (flagged: boolean) => `svc_settlement_provider_routable{provider="${p!.address}",flagged="${flagged}"}`
  const unsettled = `svc_settlement_unsettled_0g{provider="${p!.address}"}`
  const success = `svc_settlement_results_total{provider="${p!.address}",status="success"}`
  const owedBy = () => p!.sim!.broker!.owed.get(chainAccount(PAYER_INDEX).address.toLowerCase()) ?? 0n
  const near = (value: number | undefined, neuron: bigint) => value !== undefined && Math.abs(value - Number(neuron) / 1e18) < 1e-12

  t.ok(await eventually(async () => ((await scrape(url)).get('svc_settlement_rounds_total') ?? 0) >= 2), 'rounds are counted')
  let m = await scrape(url)
  t.equal(m.get('svc_settlement_funder'), 1, 'the one process funds')
  t.equal(m.get(routable(false)), 0, 'no ledger: not routable')
  t.equal(m.get(unsettled), 0, 'nothing served')
  t.equal(m.get(success), undefined, 'no settlement yet')

  await fundLedger(chain, '20')
  t.ok(await eventually(async () => (await scrape(url)).get(routable(false)) === 1), 'funded: routable')

  t.equal(await chatQwen(url, stack.auth), 200)
  const owed = owedBy()
  t.ok(owed > 0n)
  t.ok(await eventually(async () => near((await scrape(url)).get(unsettled), owed)), `what it served is unsettled (${owed} neuron)`)

  await p!.sim!.broker!.settleNow()
  t.ok(await eventually(async () => (await scrape(url)).get(success) === 1), 'its settlement is counted')
  m = await scrape(url)
  t.equal(m.get(unsettled), 0, 'nothing left unsettled (it took a little more, within the tolerance)')
  t.equal(m.get(routable(false)), 1, 'still routable, not flagged')

  t.equal(await chatQwen(url, stack.auth), 200)
  await p!.sim!.broker!.settleNow()
  t.ok(await eventually(async () => (await scrape(url)).get(routable(true)) === 0), 'over the tolerance: flagged and not routable')
  m = await scrape(url)
  t.equal(m.get(routable(false)), undefined, 'the unflagged series is gone')
  t.equal(m.get(success), 2, 'both settlements counted')
  t.equal(m.get(unsettled), 0)
})
