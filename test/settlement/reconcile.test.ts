/**
 * What the router owes a provider against what it takes (issue 44): sub-accounts drained by what was served are
 * topped up before the provider finds them short, and a provider that settles more than it served is flagged,
 * unrouted and its sub-account asked back.
 */
import t from 'tap'
import { request } from 'undici'
import { createPublicClient, createWalletClient, http } from 'viem'
import { chainAccount, SERVICE_NAME } from '../../src/demo/local-chain.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider, type ChainStack, anvilRpc, chatQwen } from '../helpers/chain-stack.js'
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
  t.equal(await chatQwen(stack.url, stack.auth), 200)
  t.equal(await chatQwen(stack.url, stack.auth), 200)
  const owed = p!.sim!.broker!.owed.get(chainAccount(PAYER_INDEX).address.toLowerCase())!
  t.ok(owed > G, `more than min is served and unsettled (${owed})`)
  t.ok(await eventually(async () => (await subAccount(chain, p!.address)).balance === 2n * G + owed), 'topped up by what was served, before any settlement')
  await p!.sim!.broker!.settleNow()
  t.equal((await subAccount(chain, p!.address)).balance, 2n * G, 'the settlement leaves the target')
  t.ok(await eventually(async () => (await row(stack.url, p!.address))?.routable !== false))
  t.equal(await chatQwen(stack.url, stack.auth), 200, 'still served')
  t.equal(p!.sim!.stats.unpaid, 0, 'the provider never found the balance short')
})

t.test('a provider that settles more than it served is flagged, unrouted and refunded', async (t) => {
  const greedy: ChainProvider = { ...DEAR, inputPrice: G / 1000n, outputPrice: G / 1000n, broker: { settleIntervalMs: 600_000, overcharge: G / 2n } }
  const chain = await startChainStack(t, [greedy], { extra: config(t), beforeRouter: (c) => fundLedger(c, '20') })
  const { stack, providers: [p] } = chain
  t.ok(await eventually(async () => (await row(stack.url, p!.address)) !== undefined && (await row(stack.url, p!.address)).routable !== false))
  t.equal(await chatQwen(stack.url, stack.auth), 200)
  await p!.sim!.broker!.settleNow()
  t.ok(await eventually(async () => /flagged/.test((await row(stack.url, p!.address))?.unrouted_reason ?? '')), '/v1/providers says it is flagged')
  t.not(await chatQwen(stack.url, stack.auth), 200, 'no longer routed')
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

/** An unlabelled sample of /metrics (-1 when absent). */
async function plain(url: string, name: string): Promise<number> {
  const text = await (await request(`${url}/metrics`)).body.text()
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? -1 : Number(line.slice(name.length + 1))
}

async function metric(url: string, name: string, provider: string, status: string): Promise<number> {
  const text = await (await request(`${url}/metrics`)).body.text()
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`provider="${provider}"`) && l.includes(`status="${status}"`))
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1))
}

t.test('settled also from TEESettlementResult: a settlement a top-up hides from the balance is counted once; a partial one is counted and reported', async (t) => {
  const cheap: ChainProvider = { ...DEAR, account: 1, inputPrice: G / 1000n, outputPrice: G / 1000n }
  const greedy: ChainProvider = { ...DEAR, account: 2, model: 'qwen', inputPrice: G / 1000n, outputPrice: G / 1000n, broker: { settleIntervalMs: 600_000, overcharge: 10n * G } }
  const chain = await startChainStack(t, [cheap, greedy], { extra: config(t), beforeRouter: (c) => fundLedger(c, '20') })
  const { stack, providers: [p, q] } = chain
  const books = async (address: string) => (await stack.router.store.settlement.rows()).find((r) => r.provider === address)
  t.ok(await eventually(async () => (await row(stack.url, p!.address))?.routable !== false && (await row(stack.url, q!.address))?.routable !== false), 'both paid for')
  // Answers until each provider has served something (routing picks either).
  t.ok(await eventually(async () => (await chatQwen(stack.url, stack.auth)) === 200 && p!.sim!.stats.requests > 0 && q!.sim!.stats.requests > 0, 20_000), 'both served')
  const payer = chainAccount(PAYER_INDEX).address.toLowerCase()
  const owed = p!.sim!.broker!.owed.get(payer)!
  t.ok(owed > 0n)
  t.ok(await eventually(async () => (await books(p!.address))?.lastBalance === 2n * G), 'the router has read the funded balance')

  // The provider's settlement and a top-up of the same amount land in one block: the balance does not move.
  await anvilRpc(chain.chain.rpcUrl, 'evm_setAutomine', [false])
  const settling = p!.sim!.broker!.settleNow()
  const wallet = createWalletClient({ account: chainAccount(PAYER_INDEX), transport: http(chain.chain.rpcUrl) })
  t.ok(await eventually(async () => Number((await anvilRpc(chain.chain.rpcUrl, 'txpool_status')).pending) === 1), 'the settlement is pending')
  await wallet.writeContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'transferFund', args: [p!.account.address, SERVICE_NAME, owed], chain: null })
  await anvilRpc(chain.chain.rpcUrl, 'evm_mine')
  await anvilRpc(chain.chain.rpcUrl, 'evm_setAutomine', [true])
  await settling
  t.equal((await subAccount(chain, p!.address)).balance, 2n * G, 'the balance is where it was')
  t.ok(await eventually(async () => (await books(p!.address))?.settled === owed), 'what it took is settled, from its event')
  t.ok(await eventually(async () => (await metric(stack.url, 'svc_settlement_results_total', p!.address, 'success')) === 1), '/metrics counts the success')
  const rounds = await plain(stack.url, 'svc_settlement_rounds_total')
  t.ok(await eventually(async () => (await plain(stack.url, 'svc_settlement_rounds_total')) >= rounds + 3), 'three more rounds read the same blocks again')
  t.equal((await books(p!.address))?.settled, owed, 'counted once over the next rounds')
  t.equal((await books(p!.address))?.flagged, false, 'not flagged')

  // The greedy provider asks for more than its sub-account holds: the contract settles part of it.
  await q!.sim!.broker!.settleNow()
  t.ok(await eventually(async () => (await metric(stack.url, 'svc_settlement_results_total', q!.address, 'partial')) === 1), '/metrics counts the partial settlement')
  t.ok(await eventually(async () => (await books(q!.address))?.settled === 2n * G), 'what it took (its whole balance) is settled once')
  t.ok(await eventually(async () => /flagged/.test((await row(stack.url, q!.address))?.unrouted_reason ?? '')), 'and it is flagged: it took more than it served')
})

t.test('a refund paid out of a sub-account is no settlement: the provider is not flagged for it', async (t) => {
  // min 0: a sub-account asked back whole (free balance 0) is not topped up, so the refund is paid out.
  const extra = { settlement: { key_file: payerKeyFile(t), interval_ms: 200, sub_account: { min_0g: '0', target_0g: '2' } }, tee: { sample_rate: 0 } }
  const chain = await startChainStack(t, [DEAR], { extra, beforeRouter: (c) => fundLedger(c, '20') })
  const { stack, providers: [p] } = chain
  // (No sub-account at all until the router's first transfer: getAccount reverts until then.)
  t.ok(await eventually(async () => (await subAccount(chain, p!.address).catch(() => null))?.balance === 2n * G), 'funded to target')
  const wallet = createWalletClient({ account: chainAccount(PAYER_INDEX), transport: http(chain.chain.rpcUrl) })
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  const retrieve = async () => {
    const hash = await wallet.writeContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'retrieveFund', args: [[p!.account.address], SERVICE_NAME], chain: null })
    await client.waitForTransactionReceipt({ hash })
  }
  /** Resolves once the router has read the sub-account twice more (its rounds counted on /metrics). */
  const twoReads = async () => {
    const since = await plain(stack.url, 'svc_settlement_rounds_total')
    return eventually(async () => (await plain(stack.url, 'svc_settlement_rounds_total')) >= since + 2, 30_000)
  }
  // The operator asks it back (the payer's own transaction, as `svc-router chain retrieve` sends it).
  await retrieve()
  t.equal((await subAccount(chain, p!.address)).pendingRefund, 2n * G, 'the whole sub-account is pending refund')
  t.ok(await twoReads(), 'the router read it pending')
  // Past the lock time, asked again: the refund is paid out, and balance and pending refund fall by it together.
  await anvilRpc(chain.chain.rpcUrl, 'evm_increaseTime', [3_601])
  await anvilRpc(chain.chain.rpcUrl, 'evm_mine')
  await retrieve()
  const after = await subAccount(chain, p!.address)
  t.same([after.balance, after.pendingRefund], [0n, 0n], 'paid back to the ledger')
  t.ok(await twoReads(), 'the router read it paid out')
  const books = (await stack.router.store.settlement.rows()).find((r) => r.provider === p!.address)
  t.equal(books?.settled, 0n, 'nothing counted as settled')
  t.equal(books?.flagged, false, 'not flagged')
  t.notMatch((await row(stack.url, p!.address))?.unrouted_reason ?? '', /flagged/)
})
