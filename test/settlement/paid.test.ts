/**
 * Paying chain providers (issue 44) on anvil with both contracts: the router funds a sub-account per provider
 * from its own ledger, signs session tokens, and routes only to providers it has paid for; the simulator acts as
 * a 0G broker that serves only a token it accepts and settles its fees on chain.
 */
import t from 'tap'
import { request } from 'undici'
import { createPublicClient, http } from 'viem'
import { chainAccount } from '../../src/demo/local-chain.js'
import { SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { readSessionToken } from '../../src/settlement/session-token.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider, type ChainStack } from '../helpers/chain-stack.js'
import type { Stack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'

const CHAT: ChainProvider = { account: 1, model: 'qwen', inputPrice: 2_000_000_000n, outputPrice: 6_000_000_000n, tee: true, broker: { settleIntervalMs: 60_000 } }
const IMAGE: ChainProvider = { account: 2, model: 'flux', serviceType: 'text-to-image', inputPrice: 0n, outputPrice: 5_000_000_000_000n, tee: true, broker: { settleIntervalMs: 60_000 } }

function settlementConfig(t: Parameters<typeof payerKeyFile>[0], extra: Record<string, unknown> = {}): Record<string, Record<string, unknown>> {
  return { settlement: { key_file: payerKeyFile(t), interval_ms: 200, sub_account: { min_0g: '1', target_0g: '2' }, ...extra }, tee: { sample_rate: 0 } }
}

async function providers(url: string, model: string): Promise<{ status: number; data: any[] }> {
  const res = await request(`${url}/v1/providers?model=${model}`)
  const body = (await res.body.json()) as { data?: any[] }
  return { status: res.statusCode, data: body.data ?? [] }
}

async function routable(stack: Stack, model: string, address: string): Promise<boolean> {
  const r = await providers(stack.url, model)
  return r.data.some((p) => p.address === address && p.routable !== false)
}

async function post(stack: Stack, path: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await request(`${stack.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...stack.auth, ...headers }, body: JSON.stringify(body) })
  return { status: res.statusCode, text: await res.body.text() }
}

async function subAccount(chain: ChainStack, provider: string) {
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  return client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [chainAccount(PAYER_INDEX).address, provider as `0x${string}`] })
}

t.test('a paid request on chat, messages and images; the provider settles and the balance falls', async (t) => {
  const chain = await startChainStack(t, [CHAT, IMAGE], { extra: settlementConfig(t) })
  const { stack, providers: [chat, image] } = chain
  await fundLedger(chain, '10')
  t.ok(await eventually(() => routable(stack, 'qwen', chat!.address)), 'the chat provider becomes routable once funded')
  t.ok(await eventually(() => routable(stack, 'flux', image!.address)), 'the image provider too')
  const funded = await subAccount(chain, chat!.address)
  t.equal(funded.balance, 2n * 10n ** 18n, 'its sub-account was topped up to target')
  t.equal(funded.acknowledged, true)

  for (const stream of [false, true]) {
    const r = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }], stream })
    t.equal(r.status, 200, `chat (${stream ? 'stream' : 'json'}) answered`)
  }
  const m = await post(stack, '/v1/messages', { model: 'qwen', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] })
  t.equal(m.status, 200, 'messages answered')
  const img = await post(stack, '/v1/images/generations', { model: 'flux', prompt: 'a cat', n: 2 })
  t.equal(img.status, 200, 'images answered')
  t.equal(chat!.sim!.stats.unpaid, 0, 'the chat provider never refused a token')
  t.equal(image!.sim!.stats.unpaid, 0)
  t.match(String(chat!.sim!.stats.lastHeaders.authorization), /^Bearer app-sk-/, 'the request carried the payer\'s session token')

  const owedChat = chat!.sim!.broker!.owed.get(chainAccount(PAYER_INDEX).address.toLowerCase())!
  const owedImage = image!.sim!.broker!.owed.get(chainAccount(PAYER_INDEX).address.toLowerCase())!
  t.ok(owedChat > 0n && owedImage === 2n * IMAGE.outputPrice, 'the providers are owed for what they served')
  // Each charge records the provider's price of the answer in neuron beside the USD billed: per provider, the
  // charges add up to what its broker counts as owed, exactly.
  const charges = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 4, 'four answers billed')
  t.ok(charges.every((e) => typeof e.neuron === 'bigint' && e.neuron > 0n && e.amount > 0n), 'each charge has its neuron beside its USD')
  t.equal(charges.reduce((sum, e) => sum + e.neuron!, 0n), owedChat + owedImage, 'the charges owe what the brokers count, exactly')
  await chat!.sim!.broker!.settleNow()
  await image!.sim!.broker!.settleNow()
  const after = await subAccount(chain, chat!.address)
  t.equal(after.balance, funded.balance - owedChat, 'the settlement took exactly what was owed')

  const res = await request(`${stack.url}/v1/providers?model=qwen`)
  t.equal(res.statusCode, 200)
})

t.test('a token that expired at the provider is renewed without a failed client request', async (t) => {
  // The provider's clock can be stopped ahead: a token the router still holds for valid is expired there.
  let stopped: number | null = null
  const provider: ChainProvider = { ...CHAT, broker: { settleIntervalMs: 60_000, now: () => stopped ?? Date.now() } }
  const chain = await startChainStack(t, [provider], { extra: settlementConfig(t, { interval_ms: 600_000 }), beforeRouter: (c) => fundLedger(c, '10') })
  const { stack, providers: [chat] } = chain
  t.ok(await eventually(() => routable(stack, 'qwen', chat!.address)))
  t.equal((await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })).status, 200)
  const old = await readSessionToken(String(chat!.sim!.stats.lastHeaders.authorization).slice('Bearer '.length))
  t.ok(old !== null)
  await new Promise((resolve) => setTimeout(resolve, 5))
  // The provider's now stays at the token's expiry: it is refused as expired. A token signed from here on expires
  // a full lifetime after it was signed, later than the old one: the provider takes it, however long the
  // requests take (a clock that kept running would let a slow retry outlive the gap between the two signings).
  stopped = old!.claims.expiresAt
  const r = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(r.status, 200, 'answered after a renewal')
  t.equal(chat!.sim!.stats.unpaid, 1, 'the provider refused the expired token once')
  t.same(JSON.parse(r.text).x_svc_trace.attempts.map((a: any) => a.status), [401, 200], 'refused, renewed, retried on the same provider')
  const renewed = await readSessionToken(String(chat!.sim!.stats.lastHeaders.authorization).slice('Bearer '.length))
  t.ok(renewed!.claims.expiresAt > old!.claims.expiresAt && renewed!.claims.nonce !== old!.claims.nonce, 'a new token')
  t.equal((await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })).status, 200)
  t.equal(chat!.sim!.stats.unpaid, 1, 'the renewed token is kept')
})

t.test('an empty ledger leaves providers unrouted with the reason, and no unpaid request is sent', async (t) => {
  const chain = await startChainStack(t, [CHAT], { extra: settlementConfig(t) })
  const { stack, providers: [chat] } = chain
  t.ok(
    await eventually(async () => (await providers(stack.url, 'qwen')).data.some((p) => p.address === chat!.address && /no ledger/.test(p.unrouted_reason ?? ''))),
    '/v1/providers says why the provider is not routed',
  )
  const r = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.not(r.status, 200, `refused (${r.status})`)
  t.equal(chat!.sim!.stats.requests + chat!.sim!.stats.unpaid, 0, 'the provider was never sent an unpaid request')

  await fundLedger(chain, '10')
  t.ok(await eventually(() => routable(stack, 'qwen', chat!.address)), 'routable once the operator funds the ledger')
  const ok = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(ok.status, 200)
})

t.test('a token the provider refuses is renewed without a failed client request', async (t) => {
  // Rounds far apart: the renewal seen here is the one the provider's 401 asked for, not a round's.
  const chain = await startChainStack(t, [CHAT], { extra: settlementConfig(t, { interval_ms: 600_000 }), beforeRouter: (c) => fundLedger(c, '10') })
  const { stack, contract, providers: [chat] } = chain
  t.ok(await eventually(() => routable(stack, 'qwen', chat!.address)))
  const first = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(first.status, 200)

  // Every token of the old generation dies; the router learns it from the provider's 401.
  await contract.call(chainAccount(PAYER_INDEX), 'revokeAllTokens', [chat!.account.address])
  const again = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(again.status, 200, 'answered after a renewal')
  t.equal(chat!.sim!.stats.unpaid, 1, 'the provider refused the old token once')
  const trace = JSON.parse(again.text).x_svc_trace
  t.same(trace.attempts.map((a: any) => a.status), [401, 200], 'the trace shows the refusal and the retry')

  // A revoked token id: the same.
  await contract.call(chainAccount(PAYER_INDEX), 'revokeToken', [chat!.account.address, 255])
  const third = await post(stack, '/v1/chat/completions', { model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(third.status, 200, 'answered after a revoked id')
  t.equal(chat!.sim!.stats.unpaid, 2)
})
