/**
 * The block of the last read of a sub-account is in the books with what was settled (issue 44): a router
 * restarted between two settlements reads the providers' TEESettlementResult events on from there. The
 * settlement made while it was down lands in one block with a top-up of the same amount, so the balance does
 * not move: only its event can count it, on SQLite and on PostgreSQL.
 */
import t from 'tap'
import { join } from 'node:path'
import { request } from 'undici'
import { createPublicClient, createWalletClient, http } from 'viem'
import { loadConfig } from '../../src/config/index.js'
import { chainAccount, SERVICE_NAME } from '../../src/demo/local-chain.js'
import { serve } from '../../src/serve.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider, anvilRpc } from '../helpers/chain-stack.js'
import { startPostgres } from '../helpers/postgres.js'
import { eventually } from '../helpers/wait.js'

const G = 10n ** 18n
const CHEAP: ChainProvider = { account: 1, model: 'qwen', inputPrice: G / 1000n, outputPrice: G / 1000n, tee: true, broker: { settleIntervalMs: 600_000 } }

async function routable(url: string, address: string): Promise<boolean> {
  const res = await request(`${url}/v1/providers?model=qwen`)
  const body = (await res.body.json()) as { data?: { address: string; routable?: boolean }[] }
  const row = (body.data ?? []).find((p) => p.address === address)
  return row !== undefined && row.routable !== false
}

async function metric(url: string, line: string): Promise<number> {
  const text = await (await request(`${url}/metrics`)).body.text()
  const found = text.split('\n').find((l) => l.startsWith(line + ' '))
  return found === undefined ? 0 : Number(found.slice(line.length + 1))
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: a restart between two settlements counts the settlement's event from the block the books left off at`, async (t) => {
    const store = kind === 'postgres' ? { kind, url: (await startPostgres(t)).url } : {}
    const chain = await startChainStack(t, [CHEAP], {
      extra: { settlement: { key_file: payerKeyFile(t), interval_ms: 100, sub_account: { min_0g: '1', target_0g: '2' } }, tee: { sample_rate: 0 }, store },
      beforeRouter: (c) => fundLedger(c, '20'),
    })
    const { stack, providers: [p] } = chain
    const rpcUrl = chain.chain.rpcUrl
    t.ok(await eventually(() => routable(stack.url, p!.address)), 'paid for')
    const chat = await request(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...stack.auth },
      body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] }),
    })
    await chat.body.dump()
    t.equal(chat.statusCode, 200)
    const payer = chainAccount(PAYER_INDEX)
    const owed = p!.sim!.broker!.owed.get(payer.address.toLowerCase())!
    t.ok(owed > 0n, 'the provider is owed what it served')
    const books = async () => (await stack.router.store.settlement.rows()).find((r) => r.provider === p!.address)
    t.ok(await eventually(async () => (await books())?.lastBlock === (await createPublicClient({ transport: http(rpcUrl) }).getBlockNumber())), 'the books hold the block of the latest read')
    t.equal((await books())?.served, owed, 'served is in the books')
    await stack.router.close()

    // While the router is down: the settlement and a top-up of the same amount in one block.
    await anvilRpc(rpcUrl, 'evm_setAutomine', [false])
    const settling = p!.sim!.broker!.settleNow()
    t.ok(await eventually(async () => Number((await anvilRpc(rpcUrl, 'txpool_status')).pending) === 1), 'the settlement is pending')
    const wallet = createWalletClient({ account: payer, transport: http(rpcUrl) })
    await wallet.writeContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'transferFund', args: [p!.account.address, SERVICE_NAME, owed], chain: null })
    await anvilRpc(rpcUrl, 'evm_mine')
    await anvilRpc(rpcUrl, 'evm_setAutomine', [true])
    await settling
    const client = createPublicClient({ transport: http(rpcUrl) })
    const account = await client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [payer.address, p!.account.address] })
    t.equal(account.balance, 2n * G, 'the balance did not move')

    const again = await serve(loadConfig({ file: join(stack.dir, 'config.yaml'), env: {} }))
    t.teardown(() => again.close())
    const rows = async () => (await again.store.settlement.rows()).find((r) => r.provider === p!.address)
    // Two rounds of the restarted router: it has read the sub-account (and the window before it) at least once.
    t.ok(await eventually(async () => (await metric(again.url, 'svc_settlement_rounds_total')) >= 2), 'the restarted router ran its rounds')
    t.equal((await rows())?.settled, owed, 'what the provider took while the router was down is settled, from its event')
    t.equal(await metric(again.url, 'svc_settlement_results_total{provider="' + p!.address + '",status="success"}'), 1, '/metrics counts the event once')
    t.equal((await rows())?.flagged, false, 'not flagged')
  })
}
