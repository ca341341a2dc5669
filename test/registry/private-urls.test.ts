/**
 * Services on the ledger are anyone's (DESIGN.md §8): a service URL that is, or resolves to, anything but a public
 * unicast address is left out of the catalog and never connected to, whichever spelling hides it, and a name is
 * judged on every connect by what it resolves to then (no DNS rebinding). registry.chain.allow_private_urls lifts
 * it (a local chain). No test here sends a packet beyond loopback: the non-loopback forms are only looked at.
 */
import t from 'tap'
import { lookup as dnsLookup } from 'node:dns'
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net'
import { request } from 'undici'
import type { ChainService } from '../../src/registry/chain-abi.js'
import { createChainSource, mapService } from '../../src/registry/chain-source.js'
import { publicOnlyGuard, type Lookup } from '../../src/upstream/connect-guard.js'
import { UpstreamPools } from '../../src/upstream/pools.js'
import { refusedAddress, refusedHost } from '../../src/vocabulary/public-address.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { startChain, startChainStack, type ChainProvider } from '../helpers/chain-stack.js'

const HALF_USD = 500_000_000_000_000_000n

/** Internal addresses and the spellings that hide them (URL hosts as written on the ledger). */
const INTERNAL_HOSTS = [
  '127.0.0.1',
  'localhost',
  'LOCALHOST.',
  'api.localhost',
  '0x7f000001',
  '2130706433',
  '0177.0.0.1',
  '127.1',
  '0.0.0.0',
  '0',
  '[::]',
  '[::1]',
  '[::ffff:127.0.0.1]',
  '[0:0:0:0:0:ffff:7f00:1]',
  '[::127.0.0.1]',
  '[64:ff9b::a9fe:a9fe]',
  '[2002:7f00:1::]',
  '10.0.0.1',
  '172.16.5.4',
  '192.168.1.1',
  '100.64.0.1',
  '169.254.169.254',
  '[fd00:ec2::254]',
  '[fe80::1]',
  '[::ffff:169.254.169.254]',
  '[::ffff:10.0.0.1]',
  'metadata.google.internal',
  'printer.local',
  'router.home.arpa',
  'intranet',
  '224.0.0.1',
  '[ff02::1]',
  '255.255.255.255',
  '240.0.0.1',
  '192.0.2.10',
  '198.51.100.7',
  '203.0.113.9',
  '198.18.0.1',
  '[2001:db8::1]',
  '[2001::1]',
]
const PUBLIC_HOSTS = ['8.8.8.8', '1.1.1.1', 'broker.example.com', '[2606:4700:4700::1111]', '[::ffff:8.8.8.8]', '[2002:808:808::]', '172.32.0.1', '100.128.0.1']

function service(url: string): ChainService {
  return {
    provider: '0x00000000000000000000000000000000000000AA',
    serviceType: 'chatbot',
    url,
    inputPrice: 1n,
    outputPrice: 1n,
    updatedAt: 1n,
    model: 'qwen',
    verifiability: '',
    additionalInfo: '',
    teeSignerAddress: '0x0000000000000000000000000000000000000000',
    teeSignerAcknowledged: false,
  }
}

t.test('every internal spelling is refused, public unicast is kept, and allow_private_urls keeps them all', async (t) => {
  for (const host of INTERNAL_HOSTS) {
    const mapped = mapService(service(`http://${host}:8000/`), HALF_USD, undefined)
    t.match(mapped, /not public unicast/, `${host} is left out`)
    t.equal(typeof mapService(service(`http://${host}:8000/`), HALF_USD, undefined, true), 'object', `${host} is kept when allowed`)
  }
  for (const host of PUBLIC_HOSTS) {
    const mapped = mapService(service(`https://${host}/v1`), HALF_USD, undefined)
    t.equal(typeof mapped, 'object', `${host} is kept: ${String(mapped)}`)
  }
  t.equal(refusedAddress('127.0.0.1'), 'loopback')
  t.equal(refusedAddress('::ffff:7f00:1'), 'IPv4-mapped loopback')
  t.equal(refusedAddress('fe80::1%eth0'), 'scoped (zone id)')
  t.equal(refusedAddress('2606:4700:4700::1111'), null)
  t.equal(refusedHost('broker.example.com'), null, 'a name is judged at connect time')
})

/** A TCP listener on loopback counting connections, relaying each to `target` (a simulator) when it has one. */
async function countingListener(t: { teardown(fn: () => unknown): void }, host: string, target: number | null): Promise<{ port: number; connections: () => number }> {
  let count = 0
  const sockets = new Set<Socket>()
  const server: Server = createServer((socket) => {
    count++
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    if (target === null) return void socket.destroy()
    const upstream = connect(target, '127.0.0.1')
    sockets.add(upstream)
    upstream.on('close', () => sockets.delete(upstream))
    socket.pipe(upstream).pipe(socket)
    socket.on('error', () => upstream.destroy())
    upstream.on('error', () => socket.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, host, resolve))
  t.teardown(() => {
    for (const s of sockets) s.destroy()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return { port: (server.address() as AddressInfo).port, connections: () => count }
}

/** Loopback spellings, each as its own service, to a v4 and a v6 listener. */
function loopbackServices(v4: number, v6: number): ChainProvider[] {
  const urls = [
    `http://127.0.0.1:${v4}`,
    `http://localhost:${v4}`,
    `http://0x7f000001:${v4}`,
    `http://2130706433:${v4}`,
    `http://0177.0.0.1:${v4}`,
    `http://127.1:${v4}`,
    `http://[::ffff:127.0.0.1]:${v4}`,
    `http://0.0.0.0:${v4}`,
    `http://[::1]:${v6}`,
  ]
  return urls.map((url, i) => ({ account: i + 1, model: `m${i + 1}`, inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n, url }))
}

async function modelIds(url: string): Promise<string[]> {
  const res = await request(`${url}/v1/models`)
  return ((await res.body.json()) as { data: { id: string }[] }).data.map((m) => m.id).sort()
}

async function chat(url: string, auth: Record<string, string>, model: string): Promise<{ status: number; body: any }> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  })
  return { status: res.statusCode, body: await res.body.json() }
}

const FAST_PROBES = { health: { probe_interval_ms: 100, probe_timeout_ms: 500 } }

t.test('loopback in every spelling, on the ledger: left out of the catalog, never probed, never served', async (t) => {
  const sim = await startSimulator({ models: loopbackServices(0, 0).map((p) => p.model) })
  t.teardown(() => sim.close())
  const v4 = await countingListener(t, '127.0.0.1', Number(new URL(sim.url).port))
  const v6 = await countingListener(t, '::1', Number(new URL(sim.url).port))
  const services = loopbackServices(v4.port, v6.port)
  const { stack } = await startChainStack(t, services, { allowPrivateUrls: false, extra: FAST_PROBES })
  t.same(await modelIds(stack.url), [], 'no loopback service is listed')
  for (const s of services) {
    const r = await chat(stack.url, stack.auth, s.model)
    t.equal(r.status, 404, `${s.url}: ${JSON.stringify(r.body.error)}`)
  }
  // Several probe rounds and registry sweeps go by.
  await new Promise((resolve) => setTimeout(resolve, 1000))
  t.equal(v4.connections(), 0, 'the IPv4 loopback listener saw no connection')
  t.equal(v6.connections(), 0, 'the IPv6 loopback listener saw no connection')
})

t.test('with registry.chain.allow_private_urls the same services are listed and served', async (t) => {
  const sim = await startSimulator({ models: loopbackServices(0, 0).map((p) => p.model) })
  t.teardown(() => sim.close())
  const v4 = await countingListener(t, '127.0.0.1', Number(new URL(sim.url).port))
  const v6 = await countingListener(t, '::1', Number(new URL(sim.url).port))
  const services = loopbackServices(v4.port, v6.port)
  const { stack } = await startChainStack(t, services, { allowPrivateUrls: true, extra: FAST_PROBES })
  t.same(await modelIds(stack.url), services.map((s) => s.model).sort())
  for (const s of services) {
    const r = await chat(stack.url, stack.auth, s.model)
    t.equal(r.status, 200, `${s.url} is served`)
  }
  t.ok(v4.connections() > 0 && v6.connections() > 0)
})

t.test('a name is judged at connect time by every address it resolves to: rebinding to loopback gets no connection', async (t) => {
  const listener = await countingListener(t, '127.0.0.1', null)
  // What a rebinding name answers at connect time: loopback alone, or loopback beside a public address.
  const answers: Record<string, { address: string; family: number }[]> = {
    'rebind.example.com': [{ address: '127.0.0.1', family: 4 }],
    'mixed.example.com': [
      { address: '203.0.114.1', family: 4 },
      { address: '127.0.0.1', family: 4 },
    ],
    'mapped.example.com': [{ address: '::ffff:127.0.0.1', family: 6 }],
  }
  // Other names (localhost) as the system resolves them.
  const lookup: Lookup = (hostname, options, callback) => {
    const found = answers[hostname]
    if (found === undefined) return (dnsLookup as unknown as Lookup)(hostname, options, callback)
    callback(null, found)
  }
  const pools = new UpstreamPools({
    connections: 2,
    connectTimeoutMs: 2000,
    keepAliveTimeoutMs: 1000,
    headersTimeoutMs: 2000,
    bodyTimeoutMs: 2000,
    totalTimeoutMs: 5000,
    maxConcurrent: 8,
    queue: 8,
    queueTimeoutMs: 1000,
    guard: publicOnlyGuard(lookup),
  })
  t.teardown(() => pools.close())
  const hosts = [...Object.keys(answers), 'localhost', '127.0.0.1', '[::ffff:127.0.0.1]', '0.0.0.0']
  for (const host of hosts) {
    const err = await pools
      .get(`http://${host}:${listener.port}`)
      .request({ path: '/v1/models', method: 'GET' })
      .then(
        (res) => res.body.dump().then(() => null),
        (e: unknown) => e as { code?: string },
      )
    t.equal(err?.code, 'SVC_ADDRESS_REFUSED', `${host} is refused at connect time`)
  }
  t.equal(listener.connections(), 0, 'the listener saw no connection')
  // Without the guard (the file registry: the operator's own word) the same pool connects.
  const open = new UpstreamPools({ ...pools.settings, guard: null })
  t.teardown(() => open.close())
  const res = await open.get(`http://localhost:${listener.port}`).request({ path: '/', method: 'GET' }).catch(() => null)
  await res?.body.dump()
  t.ok(listener.connections() > 0, 'an unguarded pool reaches loopback')
})

t.test('a name that resolves to an internal address is left out of the catalog too; one that does not resolve yet is kept', async (t) => {
  const plain = { inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n }
  const { chain, contract } = await startChain(t, [
    { account: 1, model: 'inward', url: 'http://rebind.example.com:2375', ...plain },
    { account: 2, model: 'mixed', url: 'http://mixed.example.com', ...plain },
    { account: 3, model: 'outward', url: 'https://broker.example.com/v1', ...plain },
    { account: 4, model: 'unresolved', url: 'https://later.example.com', ...plain },
  ])
  // What the names resolve to (no resolver is asked: nothing leaves this machine).
  const names: Record<string, string[]> = {
    'rebind.example.com': ['10.0.0.5'],
    'mixed.example.com': ['8.8.4.4', 'fd00:ec2::254'],
    'broker.example.com': ['8.8.8.8', '2606:4700:4700::1111'],
  }
  const source = createChainSource({
    rpcUrl: chain.rpcUrl,
    contract: contract.address,
    refreshMs: 60_000,
    usdPer0g: '0.5',
    overridesPath: null,
    resolveHost: async (host) => names[host] ?? [],
  })
  t.teardown(() => source.close())
  const snapshot = await source.start({ onChange() {}, onError() {} })
  t.same(snapshot.providers.map((p) => p.models[0]!.id).sort(), ['outward', 'unresolved'])
})
