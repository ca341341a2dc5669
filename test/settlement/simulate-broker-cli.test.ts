/**
 * `svc-router simulate-provider` as a 0G provider's broker from its flags (issue 44): the CLI process, on anvil,
 * refuses an unpaid request, serves the router that pays it, and settles its fees on chain, which the router's
 * books count as settled against what it served.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { chmodSync } from 'node:fs'
import { request } from 'undici'
import { createPublicClient, http } from 'viem'
import { chainAccount } from '../../src/demo/local-chain.js'
import { SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { simulateProviderCommand } from '../../src/simulator/cli.js'
import { fundLedger, payerKeyFile, PAYER_INDEX, startChainStack } from '../helpers/chain-stack.js'
import { exited, watched, type Watched } from '../helpers/child.js'
import { eventually } from '../helpers/wait.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const G = 10n ** 18n
const PRICE = G / 1000n

function simulate(t: { teardown(fn: () => unknown): void }, args: string[]): Watched {
  return watched(t, [CLI, 'simulate-provider', ...args])
}

t.test('the broker flags are checked: each needs --chain-rpc, which needs the rest and an owner-only key file', async (t) => {
  const key = payerKeyFile(t, 1)
  const tee = `0x${randomBytes(32).toString('hex')}`
  const good = ['--port', '0', '--tee-key', tee, '--chain-rpc', 'http://127.0.0.1:1', '--serving', '0x' + '1'.repeat(40), '--provider-key-file', key, '--input-price', '1', '--output-price', '2']
  const cases: [string[], RegExp][] = [
    [['--port', '0', '--serving', '0x' + '1'.repeat(40)], /--serving is a broker option: it needs --chain-rpc/],
    [good.filter((a) => a !== '--tee-key' && a !== tee), /--chain-rpc needs --tee-key/],
    [[...good.slice(0, -4)], /--input-price is required/],
    [[...good, '--settle-interval-ms', '5'], /--settle-interval-ms must be at least 100/],
    [good.map((a) => (a === 'http://127.0.0.1:1' ? 'ftp://x' : a)), /--chain-rpc must be an http\(s\) URL/],
    [good.map((a) => (a === '0x' + '1'.repeat(40) ? '0x12' : a)), /--serving must be/],
  ]
  // In this process (a spawn per case costs seconds): a refused command writes its error and sets exit code 2.
  const refused = async (args: string[]): Promise<string> => {
    let err = ''
    const write = process.stderr.write
    process.stderr.write = ((s: string) => ((err += s), true)) as typeof process.stderr.write
    try {
      await simulateProviderCommand(args)
    } finally {
      process.stderr.write = write
    }
    const code = process.exitCode
    process.exitCode = 0
    return code === 2 ? err : `exit code ${code}: ${err}`
  }
  for (const [args, message] of cases) t.match(await refused(args), new RegExp(`^simulate-provider: ${message.source}`), args.join(' '))
  chmodSync(key, 0o644)
  const open = await refused(good)
  t.match(open, /^simulate-provider: --provider-key-file .* has mode 0644/, 'a key file others may read is refused')
  t.notMatch(open, /[0-9a-f]{64}/i, 'the key is never printed')
})

t.test('simulate-provider --chain-rpc … serves only a paying router and settles its fees on chain', async (t) => {
  const teeKey = `0x${randomBytes(32).toString('hex')}` as const
  let sim: ReturnType<typeof simulate> | null = null
  let url = ''
  const chain = await startChainStack(t, [], {
    extra: { settlement: { key_file: payerKeyFile(t), interval_ms: 100, sub_account: { min_0g: '1', target_0g: '2' } }, tee: { sample_rate: 0 } },
    beforeRouter: async (c) => {
      sim = simulate(t, [
        '--port', '0', '--name', 'cli-broker', '--models', 'qwen', '--tee-key', teeKey,
        '--chain-rpc', c.chain.rpcUrl, '--serving', c.contract.address, '--provider-key-file', payerKeyFile(t, 1),
        '--input-price', PRICE.toString(), '--output-price', PRICE.toString(), '--settle-interval-ms', '300',
      ])
      // Its two lines may come in two reads: the second is awaited too.
      t.ok(await eventually(() => /listening on (\S+)\n.*\n/.test(sim!.out()), 30_000), `the CLI listens: ${sim!.err()}`)
      url = /listening on (\S+)\n/.exec(sim!.out())![1]!
      t.match(sim!.out(), new RegExp(`as the 0G broker of provider ${chainAccount(1).address}: settling every 300 ms`))
      await c.register({ account: 1, model: 'qwen', url, tee: true, teeKey, inputPrice: PRICE, outputPrice: PRICE })
      await fundLedger(c, '20')
    },
  })
  const { stack } = chain
  const provider = chain.providers[0]!

  const unpaid = await request(`${url}/v1/proxy/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] }),
  })
  await unpaid.body.dump()
  t.equal(unpaid.statusCode, 401, 'a request without a session token is refused')

  const routable = async () => {
    const res = await request(`${stack.url}/v1/providers?model=qwen`)
    const body = (await res.body.json()) as { data?: { address: string; routable?: boolean }[] }
    return (body.data ?? []).some((p) => p.address === provider.address && p.routable !== false)
  }
  t.ok(await eventually(routable, 30_000), 'the router has paid for it')
  const res = await request(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] }),
  })
  const body = (await res.body.json()) as { system_fingerprint?: string }
  t.equal(res.statusCode, 200, 'the paid request is served')
  t.match(body.system_fingerprint ?? '', /cli-broker/, 'by the CLI process')

  const books = async () => (await stack.router.store.settlement.rows()).find((r) => r.provider === provider.address)
  const served = (await books())?.served ?? 0n
  t.ok(served > 0n, 'the router counts what it was served')
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  const balance = async () =>
    (await client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [chainAccount(PAYER_INDEX).address, provider.account.address] })).balance
  t.ok(await eventually(async () => (await balance()) === 2n * G - served, 30_000), 'the broker settled exactly what it served, on chain')
  t.ok(await eventually(async () => (await books())?.settled === served, 30_000), 'and the router counts it as settled')
  t.equal((await books())?.flagged, false, 'not flagged')
  sim!.child.kill('SIGTERM')
  await exited(sim!.child)
  t.equal(sim!.child.exitCode, 0, 'the CLI stops on SIGTERM')
})
