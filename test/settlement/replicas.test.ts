/**
 * Two router processes on one PostgreSQL and one anvil pay the same providers (issue 44): one funds (the
 * advisory lock), both route and sign with the same payer key; a sub-account is never funded twice. Mining is
 * held while the funder's first transfer is pending, so that a second funder, if there were one, would have
 * read the same unfunded sub-account and sent its own transfer beside it: at the first funding, and at a
 * top-up of every sub-account at once.
 */
import t from 'tap'
import { request } from 'undici'
import { createPublicClient, createWalletClient, decodeFunctionData, http, parseEther, type Hex } from 'viem'
import { chainAccount, SERVICE_NAME } from '../../src/demo/local-chain.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { payerKeyFile, PAYER_INDEX, startChain, type ChainProvider, anvilRpc } from '../helpers/chain-stack.js'
import { startPostgres } from '../helpers/postgres.js'
import { chat, provision, startFleet } from '../helpers/replicas.js'
import { eventually } from '../helpers/wait.js'

const G = 10n ** 18n
const FLEET: ChainProvider[] = [1, 2, 3].map((account) => ({ account, model: 'qwen', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n, tee: true, broker: { settleIntervalMs: 600_000 } }))

/** The provider a transaction's input funds, when it is a transferFund. */
function fundedBy(input: Hex): string | null {
  try {
    const call = decodeFunctionData({ abi: LEDGER_MANAGER_ABI, data: input })
    return call.functionName === 'transferFund' ? (call.args[0] as string).toLowerCase() : null
  } catch {
    return null
  }
}

/** The providers of the transferFund transactions waiting in anvil's pool. */
async function pendingTransfers(rpcUrl: string): Promise<string[]> {
  const pool = (await anvilRpc(rpcUrl, 'txpool_content')) as { pending: Record<string, Record<string, { input: Hex }>> }
  return Object.values(pool.pending)
    .flatMap((byNonce) => Object.values(byNonce))
    .map((tx) => fundedBy(tx.input))
    .filter((p): p is string => p !== null)
}

async function metric(url: string, name: string): Promise<number> {
  const text = await (await request(`${url}/metrics`)).body.text()
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? -1 : Number(line.slice(name.length + 1))
}

async function routesAll(url: string): Promise<boolean> {
  const res = await request(`${url}/v1/providers?model=qwen`)
  const body = (await res.body.json()) as { data?: { routable?: boolean }[] }
  return (body.data ?? []).filter((p) => p.routable !== false).length === FLEET.length
}

t.test('two router processes never both fund a sub-account', async (t) => {
  const pg = await startPostgres(t)
  const chain = await startChain(t, FLEET)
  const rpcUrl = chain.chain.rpcUrl
  const fleet = await startFleet(t, {
    n: 2,
    together: true,
    pgUrl: pg.url,
    providers: [],
    config: {
      registry: { source: 'chain', path: '', chain: { rpc_url: rpcUrl, contract: chain.contract.address, refresh_ms: 500, usd_per_0g: '0.5', allow_private_urls: true } },
      settlement: { key_file: payerKeyFile(t), interval_ms: 100, sub_account: { min_0g: '1', target_0g: '2' } },
    },
  })
  const [a, b] = fleet.replicas as [(typeof fleet.replicas)[0], (typeof fleet.replicas)[0]]
  // Each has finished a round without a ledger to fund from: every sub-account is missing for both.
  t.ok(await eventually(async () => (await metric(a.url, 'svc_settlement_rounds_total')) >= 1 && (await metric(b.url, 'svc_settlement_rounds_total')) >= 1, 30_000), 'both replicas ran a round')

  /**
   * With mining held since `cause` was mined: waits until a transfer is pending and then until either a second
   * one joins it or the replica that does not fund finishes two more rounds (it has read the same sub-accounts
   * the funder is topping up, and left them to it); checks one transfer is pending; mines on.
   */
  const oneFunds = async (round: string, cause: () => Promise<unknown>) => {
    await anvilRpc(rpcUrl, 'evm_setAutomine', [false])
    await cause()
    await anvilRpc(rpcUrl, 'evm_mine')
    t.ok(await eventually(async () => (await pendingTransfers(rpcUrl)).length >= 1, 30_000), `${round}: a funding transfer is pending`)
    const since = [await metric(a.url, 'svc_settlement_rounds_total'), await metric(b.url, 'svc_settlement_rounds_total')]
    const settled = await eventually(async () => {
      if ((await pendingTransfers(rpcUrl)).length >= 2) return true
      for (const [i, r] of [a, b].entries()) {
        if ((await metric(r.url, 'svc_settlement_funder')) === 0 && (await metric(r.url, 'svc_settlement_rounds_total')) >= since[i]! + 2) return true
      }
      return false
    }, 30_000)
    t.ok(settled, `${round}: the other replica had its chance to fund`)
    // One transfer, whichever provider's (the funder takes them one at a time; a retry after the test's own
    // transaction took the payer's next nonce can put the second provider first).
    const pending = await pendingTransfers(rpcUrl)
    t.equal(pending.length, 1, `${round}: one transfer pending, from one replica (${pending.join(', ')})`)
    t.ok(pending.every((p) => chain.providers.some((c) => c.address === p)), `${round}: for a provider of the registry`)
    t.same([await metric(a.url, 'svc_settlement_funder'), await metric(b.url, 'svc_settlement_funder')].sort(), [0, 1], `${round}: exactly one process holds the funding lock`)
    await anvilRpc(rpcUrl, 'evm_setAutomine', [true])
    await anvilRpc(rpcUrl, 'evm_mine')
    t.ok(await eventually(async () => (await routesAll(a.url)) && (await routesAll(b.url)), 30_000), `${round}: both replicas route every provider`)
  }
  const payer = chainAccount(PAYER_INDEX)
  const wallet = createWalletClient({ account: payer, transport: http(rpcUrl) })
  const client = createPublicClient({ transport: http(rpcUrl) })
  const subAccount = (p: (typeof chain.providers)[0]) =>
    client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [payer.address, p.account.address] })
  /** transferFund transactions mined so far, per provider. */
  const transfers = async () => {
    const out = new Map<string, number>()
    const latest = await client.getBlockNumber({ cacheTime: 0 })
    for (let n = 0n; n <= latest; n++) {
      const block = await client.getBlock({ blockNumber: n, includeTransactions: true })
      for (const tx of block.transactions) {
        if (tx.to?.toLowerCase() !== chain.contract.ledger.toLowerCase()) continue
        const provider = fundedBy(tx.input)
        if (provider !== null) out.set(provider, (out.get(provider) ?? 0) + 1)
      }
    }
    return out
  }

  // Round 1: the ledger is opened; every sub-account is missing.
  await oneFunds('first funding', () =>
    wallet.writeContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'addLedger', args: [''], value: parseEther('20'), chain: null }),
  )
  let mined = await transfers()
  for (const p of chain.providers) {
    t.equal(mined.get(p.address), 1, `${p.address}: one transferFund on chain`)
    t.equal((await subAccount(p)).balance, 2n * G, `${p.address} funded once, to target`)
  }
  const ledger = () => client.readContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [payer.address] })
  t.equal((await ledger()).availableBalance, 20n * G - BigInt(FLEET.length) * 2n * G, 'the ledger paid each sub-account once')

  // Round 2: every sub-account asked back at once (nothing free in any): each is topped up again, once.
  await oneFunds('top-up', () =>
    wallet.writeContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'retrieveFund', args: [chain.providers.map((p) => p.account.address), SERVICE_NAME], chain: null }),
  )
  mined = await transfers()
  for (const p of chain.providers) {
    t.equal(mined.get(p.address), 2, `${p.address}: one more transferFund, for the second round`)
    const a = await subAccount(p)
    t.equal(a.balance - a.pendingRefund, 2n * G, `${p.address}: free at target again`)
  }

  // Both sign with the one payer key: each process's tokens are accepted by the providers' brokers.
  const { sk } = provision(fleet, '0x' + 'ab'.repeat(20))
  for (const r of [a, b]) {
    const answer = await chat(r.url, sk, { model: 'qwen' })
    t.equal(answer.status, 200, `replica ${r.index} is answered by a paid provider`)
  }
  t.equal(chain.providers.reduce((n, p) => n + p.sim!.stats.unpaid, 0), 0, 'no broker refused a token')
})
