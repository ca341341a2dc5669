/**
 * `npm run demo:chain` (issue 44) as a user runs it: its own process on anvil, a paid request answered with the
 * dev key it prints, and `svc-router chain status` with the variables it prints showing what was served. The
 * router's port and store are moved out of the way through the environment (config/chain.yaml names fixed ones).
 */
import t from 'tap'
import { join } from 'node:path'
import { request } from 'undici'
import { exited, runCli, watched } from '../helpers/child.js'
import { ownDir } from '../helpers/own-dir.js'
import { eventually } from '../helpers/wait.js'

const DEMO = new URL('../../src/demo/chain-demo.js', import.meta.url).pathname
const CONFIG = new URL('../../../config/chain.yaml', import.meta.url).pathname

t.test('demo:chain answers a paid request and chain status shows it served', async (t) => {
  const dir = ownDir(t, 'svc-demo-chain-')
  const store = join(dir, 'demo.db')
  const demo = watched(t, [DEMO], { PATH: process.env.PATH, SVC_SERVER_PORT: '0', SVC_STORE_PATH: store, SVC_LOG_LEVEL: 'error' })
  const child = demo.child
  t.ok(await eventually(() => /DEMO_PAYER_KEY=\S+ SVC_REGISTRY_CHAIN_RPC_URL=\S+/.test(demo.out()), 60_000), `the demo is up: ${demo.err()}`)
  const url = /svc-router listening on (\S+)/.exec(demo.out())![1]!
  const sk = /(sk-[A-Za-z0-9_-]{43})/.exec(demo.out())![1]!
  const [, payerKey, rpcUrl] = /DEMO_PAYER_KEY=(\S+) SVC_REGISTRY_CHAIN_RPC_URL=(\S+)/.exec(demo.out())!

  let status = 0
  let body = ''
  // Answered once the router has funded a chat provider (its first rounds, in the background).
  const answered = await eventually(async () => {
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${sk}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen-2.5-7b-instruct', messages: [{ role: 'user', content: 'hi' }] }),
    })
    status = res.statusCode
    body = await res.body.text()
    return status === 200
  }, 60_000, 200)
  t.ok(answered, `a paid request is answered (${status} ${body.slice(0, 200)})`)
  const provider = (JSON.parse(body).x_svc_trace?.attempts ?? []).at(-1)?.provider as string
  t.match(provider, /^0x[0-9a-f]{40}$/, 'by a chain provider')

  const env = { DEMO_PAYER_KEY: payerKey!, SVC_REGISTRY_CHAIN_RPC_URL: rpcUrl!, SVC_STORE_PATH: store }
  let report = ''
  // The charge's served is written with it; status reads the books and the chain.
  const shown = await eventually(async () => {
    const run = await runCli(['chain', 'status'], CONFIG, env)
    report = run.stdout + run.stderr
    // provider, balance, pending_refund, acknowledged, served, settled, flag
    const row = report.split('\n').find((l) => l.startsWith(provider))?.trim().split(/\s+/)
    return run.status === 0 && row !== undefined && row[4] !== '0' && row[6] === '-'
  }, 60_000, 500)
  t.ok(shown, `chain status lists the provider with what it served:\n${report}`)
  t.match(report, /available \S+ 0G, total \S+ 0G/, 'and the ledger')

  child.kill('SIGTERM')
  await exited(child)
  t.equal(child.exitCode, 0, 'Ctrl-C stops all of it')
})
