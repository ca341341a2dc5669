/**
 * A provider that finds the sub-account too low answers 402 (issue 44): the request fails over to the next paid
 * provider without the client seeing it, and the refusal starts a round at once that tops the sub-account up,
 * rounds being far apart here. The sub-account is emptied behind the router's back (its whole balance asked
 * back with retrieveFund), which only the provider sees until the router reads the chain again.
 */
import t from 'tap'
import { request } from 'undici'
import { createPublicClient, createWalletClient, http } from 'viem'
import { chainAccount, SERVICE_NAME } from '../../src/demo/local-chain.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider } from '../helpers/chain-stack.js'
import { eventually } from '../helpers/wait.js'

const G = 10n ** 18n
/** The cheaper one is tried first. */
const CHEAP: ChainProvider = { account: 1, model: 'qwen', inputPrice: G / 10_000n, outputPrice: G / 10_000n, tee: true, broker: { settleIntervalMs: 600_000 } }
const DEAR: ChainProvider = { account: 2, model: 'qwen', inputPrice: G / 1000n, outputPrice: G / 1000n, tee: true, broker: { settleIntervalMs: 600_000 } }

t.test("a provider's 402 fails the request over and tops its sub-account up at once", async (t) => {
  const chain = await startChainStack(t, [CHEAP, DEAR], {
    extra: { settlement: { key_file: payerKeyFile(t), interval_ms: 600_000, sub_account: { min_0g: '1', target_0g: '2' } }, tee: { sample_rate: 0 } },
    beforeRouter: (c) => fundLedger(c, '20'),
  })
  const { stack, providers: [p, q] } = chain
  const payer = chainAccount(PAYER_INDEX)
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  const account = () => client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [payer.address, p!.account.address] })
  const routable = async (address: string) => {
    const res = await request(`${stack.url}/v1/providers?model=qwen`)
    const body = (await res.body.json()) as { data?: { address: string; routable?: boolean }[] }
    return (body.data ?? []).some((r) => r.address === address && r.routable !== false)
  }
  const chat = async () => {
    const res = await request(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...stack.auth },
      body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] }),
    })
    const text = await res.body.text()
    return { status: res.statusCode, attempts: (JSON.parse(text).x_svc_trace?.attempts ?? []) as { provider: string; status: number | null }[] }
  }
  t.ok(await eventually(async () => (await routable(p!.address)) && (await routable(q!.address)), 30_000), 'both paid for')
  const first = await chat()
  t.equal(first.status, 200)
  t.same(first.attempts.map((a) => a.provider), [p!.address], 'the cheaper provider answers')

  const wallet = createWalletClient({ account: payer, transport: http(chain.chain.rpcUrl) })
  await client.waitForTransactionReceipt({
    hash: await wallet.writeContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'retrieveFund', args: [[p!.account.address], SERVICE_NAME], chain: null }),
  })
  const emptied = await account()
  t.equal(emptied.pendingRefund, emptied.balance, 'its sub-account is all pending refund: nothing the provider can count on')

  const refused = await chat()
  t.equal(refused.status, 200, 'the client gets its answer')
  t.same(
    refused.attempts.map((a) => [a.provider, a.status]),
    [
      [p!.address, 402],
      [q!.address, 200],
    ],
    'from the next provider, after the 402',
  )
  t.equal(p!.sim!.stats.unpaid, 1, 'the provider refused it once')
  t.ok(
    await eventually(async () => {
      const a = await account()
      return a.pendingRefund === 0n && a.balance >= 2n * G
    }, 30_000),
    'the refusal topped the sub-account up (the pending refund cancelled) long before the next scheduled round',
  )
  t.ok(await eventually(() => routable(p!.address)), 'and it is routed')
})
