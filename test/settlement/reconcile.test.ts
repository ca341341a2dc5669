/**
 * What the router owes a provider against what it takes (issue 44): sub-accounts drained by what was served are
 * topped up before the provider finds them short, and a provider that settles more than it served is flagged,
 * unrouted and its sub-account asked back.
 */
import t from 'tap'
import { request } from 'undici'
import { createPublicClient, http } from 'viem'
import { chainAccount } from '../../src/demo/local-chain.js'
import { SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider, type ChainStack } from '../helpers/chain-stack.js'
import { eventually } from '../helpers/wait.js'
import { join } from 'node:path'
import { loadConfig } from '../../src/config/index.js'
import { chainCommand } from '../../src/operator/chain-command.js'
import { serve } from '../../src/serve.js'

const G = 10n ** 18n
/** About 0.85 0G a request (5 prompt tokens at 0.01, 16 completion tokens at 0.05). */
const DEAR: ChainProvider = { account: 1, model: 'qwen', inputPrice: G / 100n, outputPrice: G / 20n, tee: true, broker: { settleIntervalMs: 600_000 } }

async function subAccount(chain: ChainStack, provider: string) {
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  return client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [chainAccount(PAYER_INDEX).address, provider as `0x${string}`] })
}

async function chat(url: string, auth: Record<string, string>): Promise<number> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] }),
  })
  await res.body.dump()
  return res.statusCode
}

async function row(url: string, address: string): Promise<any> {
  const res = await request(`${url}/v1/providers?model=qwen`)
  const body = (await res.body.json()) as { data?: any[] }
  return (body.data ?? []).find((p) => p.address === address)
}

function config(t: Parameters<typeof payerKeyFile>[0]) {
  return { settlement: { key_file: payerKeyFile(t), interval_ms: 200, sub_account: { min_0g: '1', target_0g: '2' } }, tee: { sample_rate: 0 } }
}

t.test('a sub-account drained by what was served is topped up before the provider settles', async (t) => {
  const chain = await startChainStack(t, [DEAR], { extra: config(t), beforeRouter: (c) => fundLedger(c, '20') })
  const { stack, providers: [p] } = chain
  t.ok(await eventually(async () => (await row(stack.url, p!.address))?.routable !== false && (await row(stack.url, p!.address)) !== undefined))
  t.equal(await chat(stack.url, stack.auth), 200)
  t.equal(await chat(stack.url, stack.auth), 200)
  const owed = p!.sim!.broker!.owed.get(chainAccount(PAYER_INDEX).address.toLowerCase())!
  t.ok(owed > G, `more than min is served and unsettled (${owed})`)
  t.ok(await eventually(async () => (await subAccount(chain, p!.address)).balance === 2n * G + owed), 'topped up by what was served, before any settlement')
  await p!.sim!.broker!.settleNow()
  t.equal((await subAccount(chain, p!.address)).balance, 2n * G, 'the settlement leaves the target')
  t.ok(await eventually(async () => (await row(stack.url, p!.address))?.routable !== false))
  t.equal(await chat(stack.url, stack.auth), 200, 'still served')
  t.equal(p!.sim!.stats.unpaid, 0, 'the provider never found the balance short')
})

t.test('a provider that settles more than it served is flagged, unrouted and refunded', async (t) => {
  const greedy: ChainProvider = { ...DEAR, inputPrice: G / 1000n, outputPrice: G / 1000n, broker: { settleIntervalMs: 600_000, overcharge: G / 2n } }
  const chain = await startChainStack(t, [greedy], { extra: config(t), beforeRouter: (c) => fundLedger(c, '20') })
  const { stack, providers: [p] } = chain
  t.ok(await eventually(async () => (await row(stack.url, p!.address)) !== undefined && (await row(stack.url, p!.address)).routable !== false))
  t.equal(await chat(stack.url, stack.auth), 200)
  await p!.sim!.broker!.settleNow()
  t.ok(await eventually(async () => /flagged/.test((await row(stack.url, p!.address))?.unrouted_reason ?? '')), '/v1/providers says it is flagged')
  t.not(await chat(stack.url, stack.auth), 200, 'no longer routed')
  t.ok(
    await eventually(async () => {
      const a = await subAccount(chain, p!.address)
      return a.balance > 0n && a.pendingRefund === a.balance
    }),
    'its whole sub-account is asked back (retrieveFund)',
  )
  const requests = p!.sim!.stats.requests
  t.equal(requests, 1, 'nothing more was sent to it')

  // The operator's view, from the store and the chain (another process would see the same).
  const configFile = join(stack.dir, 'config.yaml')
  const out: string[] = []
  const io = { out: (s: string) => void out.push(s), err: () => {}, env: {} }
  t.equal(await chainCommand(['status', '--config', configFile], io), 0)
  t.match(out.join(''), new RegExp(`${p!.address}.*FLAGGED`), 'chain status shows the flag')

  // A restart keeps the books: still flagged, still not routed.
  await stack.router.close()
  const again = await serve(loadConfig({ file: configFile, env: {} }))
  t.teardown(() => again.close())
  t.ok(await eventually(async () => /flagged/.test((await row(again.url, p!.address))?.unrouted_reason ?? '')), 'still flagged after a restart')

  t.equal(await chainCommand(['clear-flag', p!.address, '--config', configFile], io), 0)
  t.ok(await eventually(async () => (await row(again.url, p!.address))?.routable !== false && (await row(again.url, p!.address)) !== undefined), 'routed again once cleared')
})
