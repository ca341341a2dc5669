/**
 * Two routers on one PostgreSQL store pay the same providers (issue 44): one funds (the advisory lock), both
 * route and sign with the same payer key; a sub-account is never funded twice.
 */
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { createPublicClient, http } from 'viem'
import { stringify } from 'yaml'
import { loadConfig } from '../../src/config/index.js'
import { chainAccount } from '../../src/demo/local-chain.js'
import { serve } from '../../src/serve.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChain, type ChainProvider } from '../helpers/chain-stack.js'
import { startPostgres } from '../helpers/postgres.js'
import { eventually } from '../helpers/wait.js'

const G = 10n ** 18n
const FLEET: ChainProvider[] = [1, 2, 3].map((account) => ({ account, model: 'qwen', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n, tee: true, broker: { settleIntervalMs: 600_000 } }))

t.test('two replicas never both fund a sub-account', async (t) => {
  const pg = await startPostgres(t)
  const chain = await startChain(t, FLEET)
  await fundLedger(chain, '20')
  const dir = t.testdir()
  const file = join(dir, 'config.yaml')
  writeFileSync(
    file,
    stringify({
      server: { host: '127.0.0.1', port: 0 },
      registry: { source: 'chain', path: '', chain: { rpc_url: chain.chain.rpcUrl, contract: chain.contract.address, refresh_ms: 500, usd_per_0g: '0.5', allow_private_urls: true } },
      store: { kind: 'postgres', url: pg.url },
      settlement: { key_file: payerKeyFile(t), interval_ms: 100, sub_account: { min_0g: '1', target_0g: '2' } },
      log: { level: 'error' },
      health: { probes: false },
    }),
  )
  // Both start at once: each sees every sub-account missing at its first round.
  const [a, b] = await Promise.all([serve(loadConfig({ file, env: {} })), serve(loadConfig({ file, env: {} }))])
  t.teardown(async () => {
    await a.close()
    await b.close()
  })
  const routable = async (url: string) => {
    const res = await request(`${url}/v1/providers?model=qwen`)
    const body = (await res.body.json()) as { data?: any[] }
    return (body.data ?? []).filter((p) => p.routable !== false).length === FLEET.length
  }
  t.ok(await eventually(async () => (await routable(a.url)) && (await routable(b.url))), 'both replicas route every provider')
  // A few more rounds of both, which would each fund again if they did not share the lock.
  await new Promise((resolve) => setTimeout(resolve, 600))
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  for (const p of chain.providers) {
    const account = await client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [chainAccount(PAYER_INDEX).address, p.account.address] })
    t.equal(account.balance, 2n * G, `${p.address} funded once, to target`)
  }
  const ledger = await client.readContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [chainAccount(PAYER_INDEX).address] })
  t.equal(ledger.availableBalance, 20n * G - BigInt(FLEET.length) * 2n * G, 'the ledger paid each sub-account once')
})
