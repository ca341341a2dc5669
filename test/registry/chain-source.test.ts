/**
 * The chain as the registry (issue 29): the mapping of a Service onto registry records, then a real anvil with
 * our InferenceServing contract deployed and providers registered from their own accounts with the stake, read
 * by the router through viem. The catalog, routing and billing follow the chain; a dead RPC changes nothing.
 */
import t from 'tap'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { request } from 'undici'
import { createPublicClient, http, type PublicClient } from 'viem'
import { neuronToAtto } from '../../src/billing/money.js'
import type { ChainService } from '../../src/registry/chain-abi.js'
import { additionalInfo, chainPrice, deriveTier, mapService, readAllServices } from '../../src/registry/chain-source.js'
import { NO_OVERRIDES, parseOverrides } from '../../src/registry/overrides.js'
import { chainAccount, NO_SIGNER, RegistryContract, startAnvil, type ServiceParams } from '../../src/demo/local-chain.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { closedPort, startStack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'
import { startChain, startChainStack, type ChainProvider } from '../helpers/chain-stack.js'

const SIGNER = '0x00000000000000000000000000000000000051a1' as const
const PLAIN_CONTRACT = '0x5FbDB2315678afecb367f032d93F642f64180aa3'
const PLAIN: ServiceParams = {
  serviceType: 'chatbot',
  url: '',
  model: 'qwen',
  verifiability: '',
  inputPrice: 1_000_000_000n,
  outputPrice: 1_000_000_000n,
  additionalInfo: '',
  teeSignerAddress: NO_SIGNER,
}
const HALF_USD = 500_000_000_000_000_000n // 0.5 USD per 0G in atto-USD

function service(patch: Partial<ChainService> = {}): ChainService {
  return {
    provider: '0x00000000000000000000000000000000000000AA',
    serviceType: 'chatbot',
    url: 'https://broker.example/',
    inputPrice: 2_000_000_000n,
    outputPrice: 6_000_000_000n,
    updatedAt: 1n,
    model: 'qwen-2.5-7b-instruct',
    verifiability: 'TeeML',
    additionalInfo: '{"TeeType":"TDX"}',
    teeSignerAddress: SIGNER,
    teeSignerAcknowledged: true,
    ...patch,
  }
}

t.test('the tier is derived from the chain, never taken from the provider', async (t) => {
  t.equal(deriveTier(service(), {}), 'private', 'TeeML with an acknowledged signer')
  t.equal(deriveTier(service({ teeSignerAcknowledged: false }), {}), 'standard', 'a signer not acknowledged')
  t.equal(deriveTier(service({ teeSignerAddress: NO_SIGNER }), {}), 'standard', 'acknowledged, but no signer')
  t.equal(deriveTier(service(), { ProviderType: 'centralized' }), 'verified', 'a TEE-TLS broker')
  t.equal(deriveTier(service({ verifiability: 'TeeTLS' }), {}), 'standard', 'a TeeTLS label alone proves nothing')
  t.equal(deriveTier(service({ verifiability: '' }), {}), 'standard')
})

t.test('additionalInfo is JSON from a stranger: junk reads as nothing', async (t) => {
  t.same(additionalInfo('{"ProviderType":"centralized"}'), { ProviderType: 'centralized' })
  for (const junk of ['', 'not json', '[1,2]', '"text"', 'null', '{"a":', '1e999']) t.same(additionalInfo(junk), {}, JSON.stringify(junk))
})

t.test('neuron prices convert to USD exactly, rounded up to the next atto-USD', async (t) => {
  // 2e9 neuron per token at 0.5 USD/0G = 1e9 atto-USD = 0.000000001 USD per token = 0.001 USD per 1M tokens.
  t.same(chainPrice('chatbot', 2_000_000_000n, 6_000_000_000n, HALF_USD), { prompt: '0.001', completion: '0.003' })
  // 1 neuron at 0.5 USD/0G is half an atto-USD: billed as 1 (never below the provider's price).
  t.equal(neuronToAtto(1n, HALF_USD), 1n)
  t.equal(neuronToAtto(3n, HALF_USD), 2n)
  t.equal(neuronToAtto(0n, HALF_USD), 0n)
  // An image at 4e15 neuron (0.004 0G) at 0.5 USD/0G: 0.002 USD.
  t.same(chainPrice('text-to-image', 0n, 4_000_000_000_000_000n, HALF_USD), { image: '0.002' })
  t.same(chainPrice('speech-to-text', 0n, 200_000_000_000_000n, HALF_USD), { audio_second: '0.0001' })
  // A rate with 18 decimals and a price near uint256's top stay exact (bigint all the way).
  const rate = 123_456_789_012_345_678n // 0.123456789012345678 USD/0G
  const big = 2n ** 200n
  t.equal(neuronToAtto(big, rate), (big * rate + 10n ** 18n - 1n) / 10n ** 18n)
})

t.test('a Service maps onto a registry record; what the router does not serve is left out', async (t) => {
  const p = mapService(service(), HALF_USD, undefined)
  if (typeof p === 'string') return t.fail(p)
  t.equal(p.address, '0x00000000000000000000000000000000000000aa')
  t.equal(p.url, 'https://broker.example', 'no trailing slash')
  t.equal(p.api_path, '/v1/proxy', 'the OpenAI-compatible base is {url}/v1/proxy')
  t.equal(p.trust_mode, 'private')
  t.equal(p.verifiability, 'TeeML')
  t.equal(p.tee_type, 'TDX')
  t.equal(p.tee_signer, SIGNER.toLowerCase())
  t.same(p.models[0]!.formats, ['openai'])
  t.same(p.models[0]!.price, { prompt: '0.001', completion: '0.003' })
  t.equal(mapService(service({ teeSignerAcknowledged: false }), HALF_USD, undefined).valueOf().constructor, Object)
  t.equal((mapService(service({ teeSignerAcknowledged: false }), HALF_USD, undefined) as { tee_signer: string }).tee_signer, '', 'no signer to check until acknowledged')
  t.match(mapService(service({ serviceType: 'fine-tuning' }), HALF_USD, undefined), /not served/)
  t.match(mapService(service({ url: 'ftp://x' }), HALF_USD, undefined), /url/)
  t.match(mapService(service({ url: 'http://u:p@x' }), HALF_USD, undefined), /url/)
  t.match(mapService(service({ model: 'has space' }), HALF_USD, undefined), /model/)
  t.match(mapService(service({ model: '' }), HALF_USD, undefined), /model/)
})

t.test('overrides lower a tier, disable, add model fields, and never raise a tier', async (t) => {
  const overrides = parseOverrides(
    `providers:
  - address: "0x00000000000000000000000000000000000000aa"
    trust_mode: verified
    models:
      - id: qwen-2.5-7b-instruct
        context_length: 32768
        max_completion_tokens: 4096
        supported_parameters: [temperature]
        formats: [openai, anthropic]
  - address: "0x00000000000000000000000000000000000000bb"
    trust_mode: private
  - address: "0x00000000000000000000000000000000000000cc"
    disabled: true
`,
    'test',
  )
  const a = mapService(service(), HALF_USD, overrides.get('0x00000000000000000000000000000000000000aa'))
  if (typeof a === 'string') return t.fail(a)
  t.equal(a.trust_mode, 'verified', 'lowered')
  t.same(
    { ...a.models[0]!, price: undefined, neuron_price: undefined },
    { id: 'qwen-2.5-7b-instruct', type: 'chatbot', formats: ['openai', 'anthropic'], context_length: 32768, max_completion_tokens: 4096, supported_parameters: ['temperature'], price: undefined, neuron_price: undefined },
  )
  const b = mapService(service({ provider: '0x00000000000000000000000000000000000000BB', verifiability: '' }), HALF_USD, overrides.get('0x00000000000000000000000000000000000000bb'))
  t.equal(typeof b !== 'string' && b.trust_mode, 'standard', 'a tier above the derived one is not granted')
  const c = mapService(service({ provider: '0x00000000000000000000000000000000000000CC' }), HALF_USD, overrides.get('0x00000000000000000000000000000000000000cc'))
  t.match(c, /disabled/)
  t.throws(() => parseOverrides('providers:\n  - address: "0x1"\n', 'bad'), /address/)
  t.throws(() => parseOverrides('providers:\n  - address: "0x00000000000000000000000000000000000000aa"\n    price: 1\n', 'bad'), /price/)
  t.equal(NO_OVERRIDES.size, 0)
})

t.test('getAllServices is read whole in pages of 50, at one block', async (t) => {
  const many: ChainProvider[] = []
  for (let i = 1; i <= 19; i++) many.push({ account: i, model: `m${i}`, inputPrice: BigInt(i), outputPrice: BigInt(i), url: `http://127.0.0.1:${20_000 + i}` })
  const chain = await startChain(t, many)
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) }) as PublicClient
  const all = await readAllServices(client, chain.contract.address)
  t.equal(all.length, 19)
  t.same(new Set(all.map((s) => s.model)), new Set(many.map((p) => p.model)))
  // A removal moves the last service into the freed slot: the next sweep still sees each one once.
  await chain.contract.removeService(chainAccount(3))
  const after = await readAllServices(client, chain.contract.address)
  t.equal(after.length, 18)
  t.notOk(after.some((s) => s.model === 'm3'))
  t.equal(new Set(after.map((s) => s.provider)).size, 18)
})

interface ProviderRow {
  address: string
  trust_mode: string
  verifiability: string
  context_length: number | null
  pricing: { prompt: string | null; completion: string | null; image: string | null }
}

async function providersOf(url: string, model: string): Promise<ProviderRow[] | null> {
  const res = await request(`${url}/v1/providers?model=${model}`)
  const body = (await res.body.json()) as { data?: ProviderRow[] }
  return res.statusCode === 200 ? body.data! : null
}

async function modelIds(url: string): Promise<string[]> {
  const res = await request(`${url}/v1/models`)
  return ((await res.body.json()) as { data: { id: string }[] }).data.map((m) => m.id).sort()
}

async function chat(url: string, headers: Record<string, string>, body: Record<string, unknown> = {}) {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hello there' }], ...body }),
  })
  return { status: res.statusCode, headers: res.headers, body: (await res.body.json()) as any }
}

/** P1 TeeML acknowledged (private), P2 a centralized broker (verified), P3 plain (standard), P4 TeeML unacknowledged. */
const FLEET: ChainProvider[] = [
  { account: 1, model: 'qwen', inputPrice: 2_000_000_000n, outputPrice: 6_000_000_000n, tee: true },
  { account: 2, model: 'qwen', inputPrice: 4_000_000_000n, outputPrice: 4_000_000_000n, tee: true, verifiability: 'TeeTLS', additionalInfo: '{"ProviderType":"centralized"}' },
  { account: 3, model: 'qwen', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n },
  { account: 4, model: 'qwen', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n, tee: true, acknowledged: false },
  { account: 5, model: 'tuner', serviceType: 'fine-tuning', inputPrice: 1n, outputPrice: 1n, url: 'http://127.0.0.1:9' },
]

t.test('the catalog and /v1/providers follow the chain: add, reprice and remove show within refresh_ms', async (t) => {
  const { stack, providers, register, contract } = await startChainStack(t, FLEET, { refreshMs: 500 })
  const [p1, p2, p3, p4] = providers
  t.same(await modelIds(stack.url), ['qwen'], 'a fine-tuning service is not served')
  const rows = (await providersOf(stack.url, 'qwen'))!
  const tier = Object.fromEntries(rows.map((r) => [r.address, r.trust_mode]))
  t.same(tier, { [p1!.address]: 'private', [p2!.address]: 'verified', [p3!.address]: 'standard', [p4!.address]: 'standard' })
  const p1Row = rows.find((r) => r.address === p1!.address)!
  t.same(p1Row.pricing, { prompt: '0.001', completion: '0.003', image: null, audio_second: null, currency: 'USD' })
  t.equal(rows.find((r) => r.address === p2!.address)!.verifiability, 'TeeTLS')

  // Added: a new model from a new account.
  await register({ account: 6, model: 'llama', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n })
  t.ok(await eventually(async () => (await modelIds(stack.url)).includes('llama'), 4000), 'a service added on chain is listed')
  // Repriced: P3 doubles its prompt price.
  await contract.addOrUpdateService(p3!.account, { ...p3!.params, inputPrice: 2_000_000_000n })
  t.ok(
    await eventually(async () => (await providersOf(stack.url, 'qwen'))!.find((r) => r.address === p3!.address)?.pricing.prompt === '0.001', 4000),
    'a new price is shown',
  )
  // Removed: P4 leaves (its stake returns).
  await contract.removeService(p4!.account)
  t.ok(await eventually(async () => !(await providersOf(stack.url, 'qwen'))!.some((r) => r.address === p4!.address), 4000), 'a removed service is gone')
  // Acknowledgement revoked: P1 drops to standard.
  await contract.revokeSigner(chainAccount(0), p1!.account.address)
  t.ok(
    await eventually(async () => (await providersOf(stack.url, 'qwen'))!.find((r) => r.address === p1!.address)?.trust_mode === 'standard', 4000),
    'a revoked signer takes the tier with it',
  )
})

t.test('pinning, tiers, price ceilings and billing use the chain data', async (t) => {
  const { stack, providers } = await startChainStack(t, FLEET.slice(0, 3), { refreshMs: 1000 })
  const [p1, p2, p3] = providers
  // Pinned to P1: billed at P1's chain prices (0.5 USD/0G): prompt 2e9 neuron = 1e-9 USD a token, completion
  // 6e9 neuron = 3e-9 USD a token; the simulator writes 16 completion tokens.
  const pinned = await chat(stack.url, { ...stack.auth, 'x-svc-provider-address': p1!.address })
  t.equal(pinned.status, 200)
  const trace = pinned.body.x_svc_trace
  t.equal(trace.provider, p1!.address)
  t.equal(trace.usage.completion_tokens, 16)
  t.equal(trace.billing.output_cost, '0.000000048', '16 × 0.000000003')
  const promptTokens: number = trace.usage.prompt_tokens
  t.ok(promptTokens > 0)
  t.equal(trace.billing.input_cost, `0.${String(promptTokens).padStart(9, '0')}`.replace(/0+$/, ''), `${promptTokens} × 0.000000001`)

  // Tiers: a private floor is P1 alone; a verified floor P1 or P2.
  for (let i = 0; i < 4; i++) {
    const r = await chat(stack.url, { ...stack.auth, 'x-svc-provider-trust-mode': 'private' })
    t.equal(r.body.x_svc_trace.provider, p1!.address)
    const v = await chat(stack.url, { ...stack.auth, 'x-svc-provider-trust-mode': 'verified' })
    t.ok([p1!.address, p2!.address].includes(v.body.x_svc_trace.provider))
  }
  // Ceilings in USD per 1M tokens against the converted prices: P1 0.001/0.003, P2 0.002/0.002, P3 0.0005/0.0005.
  const cheap = await chat(stack.url, { ...stack.auth, 'x-svc-provider-max-price-usd-prompt': '0.0005' })
  t.equal(cheap.body.x_svc_trace?.provider, p3!.address, JSON.stringify(cheap.body))
  const none = await chat(stack.url, { ...stack.auth, 'x-svc-provider-max-price-usd-prompt': '0.0004999' })
  t.equal(none.status, 400)
  t.equal(none.body.error.code, 'no_provider_within_max_price')
  const over = await chat(stack.url, { ...stack.auth, 'x-svc-provider-address': p1!.address, 'x-svc-provider-max-price-usd-completion': '0.0029' })
  t.equal(over.body.error.code, 'pinned_provider_exceeds_max_price')
  // The sort by price picks the cheapest on chain.
  const sorted = await chat(stack.url, { ...stack.auth, 'x-svc-provider-sort': 'price' })
  t.equal(sorted.body.x_svc_trace.provider, p3!.address)
  // The answer came from the broker's /v1/proxy route.
  t.equal(providers[2]!.sim!.stats.lastPath, '/v1/proxy/chat/completions')
})

t.test('an overrides file lowers, disables and describes, and never raises', async (t) => {
  // Not in t.testdir(): the stack's own testdir() call starts that directory afresh.
  const dir = mkdtempSync(join(tmpdir(), 'svc-overrides-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const overrides = join(dir, 'overrides.yaml')
  const p1 = chainAccount(1).address.toLowerCase()
  const p2 = chainAccount(2).address.toLowerCase()
  const p3 = chainAccount(3).address.toLowerCase()
  writeFileSync(
    overrides,
    `providers:
  - address: "${p1}"
    trust_mode: verified
    models: [{ id: qwen, context_length: 32768 }]
  - address: "${p2}"
    disabled: true
  - address: "${p3}"
    trust_mode: private
`,
  )
  const { stack } = await startChainStack(t, FLEET.slice(0, 3), { overrides })
  const rows = (await providersOf(stack.url, 'qwen'))!
  t.same(
    rows.map((r) => [r.address, r.trust_mode, r.context_length]).sort(),
    [
      [p1, 'verified', 32768],
      [p3, 'standard', null],
    ].sort(),
  )
  const floor = await chat(stack.url, { ...stack.auth, 'x-svc-provider-trust-mode': 'private' })
  t.equal(floor.status, 503)
  t.equal(floor.body.error.code, 'no_provider_for_trust_mode')
})

t.test('the RPC killed mid-run changes nothing for clients; failures are counted', async (t) => {
  const { stack, chain, providers } = await startChainStack(t, FLEET.slice(0, 3), { refreshMs: 200 })
  const before = await providersOf(stack.url, 'qwen')
  await chain.stop(true)
  // Several sweeps fail meanwhile.
  const metrics = async () => (await (await request(`${stack.router.opsUrl}/metrics`)).body.text()) as string
  t.ok(await eventually(async () => /svc_registry_refreshes_total\{source="chain",outcome="error"\} [1-9]/.test(await metrics()), 5000), 'failed sweeps are counted')
  t.same(await providersOf(stack.url, 'qwen'), before, 'the last snapshot stays')
  const r = await chat(stack.url, { ...stack.auth, 'x-svc-provider-address': providers[0]!.address })
  t.equal(r.status, 200)
  const ready = await request(`${stack.router.opsUrl}/readyz`)
  t.equal(ready.statusCode, 200, '/readyz stays ready while a snapshot exists')
  await ready.body.dump()
})

t.test('a router started while the RPC is down serves nothing, is not ready, and catches up', async (t) => {
  const port = await closedPort()
  // The registry is the second contract anvil's account 0 deploys (its nonce 1; the ledger is nonce 0): always here.
  const address = '0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512'
  const stack = await startStack(t, [], {
    registry: { source: 'chain', path: '', chain: { rpc_url: `http://127.0.0.1:${port}`, contract: address, refresh_ms: 200, usd_per_0g: '1', allow_private_urls: true } },
  })
  const ready = await request(`${stack.router.opsUrl}/readyz`)
  t.equal(ready.statusCode, 503)
  t.match(await ready.body.json(), { reason: /chain registry/ })
  t.same(await modelIds(stack.url), [])
  const none = await chat(stack.url, stack.auth)
  t.equal(none.status, 404, 'no model yet')

  const chain = await startAnvil({ port })
  t.teardown(() => chain.stop())
  const contract = await RegistryContract.deploy(chain.rpcUrl)
  t.equal(contract.address.toLowerCase(), address.toLowerCase())
  const sim = await startSimulator({ models: ['qwen'] })
  t.teardown(() => sim.close())
  await contract.addOrUpdateService(chainAccount(7), { ...PLAIN, url: sim.url })
  t.ok(await eventually(async () => (await modelIds(stack.url)).includes('qwen'), 5000), 'the registry arrives once the RPC answers')
  const served = await chat(stack.url, stack.auth)
  t.equal(served.status, 200)
  const readyNow = await request(`${stack.router.opsUrl}/readyz`)
  t.equal(readyNow.statusCode, 200)
  await readyNow.body.dump()
})

t.test('an RPC that answers garbage, or never answers, keeps the last snapshot', async (t) => {
  const { chain, contract } = await startChain(t, FLEET.slice(2, 3))
  // A JSON-RPC proxy in front of anvil that can be told to answer junk or to hold requests forever.
  let mode: 'pass' | 'garbage' | 'hang' = 'pass'
  const held = new Set<import('node:http').ServerResponse>()
  const proxy = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => {
      if (mode === 'hang') return void held.add(res)
      if (mode === 'garbage') {
        const body = '{"jsonrpc":"2.0","id":1,"result":"0xdeadbeef"}'
        return void res.writeHead(200, { 'content-type': 'application/json' }).end(body)
      }
      request(chain.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.concat(parts) }).then(
        async (up) => res.writeHead(up.statusCode, { 'content-type': 'application/json' }).end(Buffer.from(await up.body.arrayBuffer())),
        () => res.destroy(),
      )
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const res of held) res.destroy()
    return new Promise<void>((resolve) => proxy.close(() => resolve()))
  })
  const port = (proxy.address() as AddressInfo).port
  const stack = await startStack(t, [], {
    registry: { source: 'chain', path: '', chain: { rpc_url: `http://127.0.0.1:${port}`, contract: contract.address, refresh_ms: 200, usd_per_0g: '1', allow_private_urls: true } },
  })
  const registry = async () => (await providersOf(stack.url, 'qwen'))?.map((r) => [r.address, r.trust_mode, r.pricing])
  const before = await registry()
  t.equal(before?.length, 1)
  const errors = async () => {
    const text = await (await request(`${stack.router.opsUrl}/metrics`)).body.text()
    return Number(/svc_registry_refreshes_total\{source="chain",outcome="error"\} (\d+)/.exec(text)?.[1] ?? 0)
  }
  for (const m of ['garbage', 'hang'] as const) {
    mode = m
    const start = await errors()
    t.ok(await eventually(async () => (await errors()) > start, 8000), `${m}: failed sweeps are counted`)
    t.same(await registry(), before, `${m}: the last snapshot stays`)
    const r = await chat(stack.url, stack.auth)
    t.equal(r.status, 200, `${m}: clients are served`)
  }
  mode = 'pass'
})

t.test('registry.source chain needs a contract and a USD rate; the committed contract artifact is built from its source', async (t) => {
  const { loadConfig } = await import('../../src/config/index.js')
  t.throws(() => loadConfig({ env: { SVC_REGISTRY_SOURCE: 'chain' } }), /registry\.chain\.contract[\s\S]*required[\s\S]*usd_per_0g/)
  t.throws(() => loadConfig({ env: { SVC_REGISTRY_SOURCE: 'chain', SVC_REGISTRY_CHAIN_CONTRACT: '0x12', SVC_REGISTRY_CHAIN_USD_PER_0G: '1' } }), /contract/)
  t.throws(() => loadConfig({ env: { SVC_REGISTRY_SOURCE: 'chain', SVC_REGISTRY_CHAIN_CONTRACT: PLAIN_CONTRACT, SVC_REGISTRY_CHAIN_USD_PER_0G: '-1' } }), /usd_per_0g/)
  const ok = loadConfig({ env: { SVC_REGISTRY_SOURCE: 'chain', SVC_REGISTRY_CHAIN_CONTRACT: PLAIN_CONTRACT, SVC_REGISTRY_CHAIN_USD_PER_0G: '0.5' } })
  t.equal(ok.registry.path, '', 'no overrides file unless one is named')
  const script = fileURLToPath(new URL('../../../scripts/compile-contract.mjs', import.meta.url))
  const out = execFileSync(process.execPath, [script, '--check'], { encoding: 'utf8' })
  t.match(out, /matches its source/)
})
