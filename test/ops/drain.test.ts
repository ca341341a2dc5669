/**
 * The drain (issue #13 §7): SIGTERM during open streams lets them finish, records every charge once, and exits
 * 0; at the deadline what is left ends with an error event and is still billed for what it produced; a second
 * signal during the drain exits at once.
 */
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { Agent, request } from 'undici'
import { stringify } from 'yaml'
import { startSimulator } from '../../src/simulator/simulator.js'
import { openStore } from '../../src/store/open.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { addr, startStack } from '../helpers/stack.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const MODEL = 'm-chat'
const DEV_WALLET = '0x00000000000000000000000000000000000de0de'

t.test('SIGTERM during 50 open streams: every stream finishes with [DONE], every charge is recorded once, exit 0', async (t) => {
  // 20 tokens at 20/s: each stream lasts about a second, so all 50 are open when the signal lands.
  const sim = await startSimulator({ name: 'drain', tokensPerS: 20, completionTokens: 20 })
  t.teardown(() => sim.close())
  const dir = t.testdir()
  const dbPath = join(dir, 'svc.db')
  writeFileSync(
    join(dir, 'providers.yaml'),
    stringify({ providers: [{ address: addr('a'), url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.3 } }] }] }),
  )
  writeFileSync(
    join(dir, 'config.yaml'),
    stringify({
      server: { host: '127.0.0.1', port: 0, drain_timeout_ms: 20_000 },
      registry: { path: 'providers.yaml', watch: false },
      store: { path: dbPath },
      limits: { requests_per_minute: 100_000 },
      log: { level: 'error' },
      dev: { bootstrap: true, deposit_usd: 1000 },
    }),
  )
  const child = spawn(process.execPath, [CLI, 'serve', '--config', join(dir, 'config.yaml')], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const [url, key] = await new Promise<[string, string]>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString()
      const listening = /listening on (http:\/\/\S+)/.exec(out)
      const devKey = /(sk-[A-Za-z0-9_-]{43})/.exec(out)
      if (listening && devKey) resolve([listening[1]!, devKey[1]!])
    })
    child.once('exit', (code) => reject(new Error(`router exited with ${code}: ${out}`)))
  })
  const agent = new Agent({ connections: 64 })
  t.teardown(() => agent.close())
  const opened = await Promise.all(
    Array.from({ length: 50 }, () =>
      request(url + '/v1/chat/completions', {
        dispatcher: agent,
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 20, stream: true }),
        headersTimeout: 15_000,
        bodyTimeout: 15_000,
      }),
    ),
  )
  t.same(opened.map((r) => r.statusCode), Array(50).fill(200), 'all 50 streams open')
  child.kill('SIGTERM')
  const bodies = await Promise.all(opened.map((r) => r.body.text()))
  for (const body of bodies) {
    const events = body.split('\n\n').filter((e) => e.length > 0)
    if (events.at(-1) !== 'data: [DONE]') t.fail(`a stream did not finish: ${JSON.stringify(events.at(-1))}`)
  }
  t.pass('every stream ended with [DONE]')
  t.equal(await exited, 0, 'exit 0 after the drain')

  const store = await openStore({ kind: 'sqlite', path: dbPath, synchronous: 'full' })
  t.teardown(() => store.close())
  const charges = (await store.ledger.journal(DEV_WALLET)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 50, 'one charge per stream, none lost, none doubled')
})

t.test('drain deadline: streams still open end with an error event and are billed for what they produced', async (t) => {
  // 50 tokens at 5/s: ten seconds, far past a 300 ms drain deadline.
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }], sim: { tokensPerS: 5, completionTokens: 50 } }], {
    ops: { separate_port: true, port: 0 },
  })
  const opened = await Promise.all(
    Array.from({ length: 3 }, () =>
      request(stack.url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...stack.auth },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 50, stream: true }),
      }),
    ),
  )
  t.same(opened.map((r) => r.statusCode), [200, 200, 200])
  const draining = stack.router.drain(300)
  const ready = await request(stack.router.opsUrl + '/readyz')
  t.equal(ready.statusCode, 503)
  t.match(JSON.parse(await ready.body.text()), { reason: 'draining' })
  t.equal(await draining, 3, 'three requests cut at the deadline')
  for (const r of opened) {
    const events = (await r.body.text()).split('\n\n').filter((e) => e.length > 0)
    t.notOk(events.includes('data: [DONE]'))
    const last = JSON.parse(events.at(-1)!.slice('data: '.length))
    t.equal(last.error.code, 'no_available_provider')
    t.match(last.x_svc_trace.attempts, [{ provider: addr('a'), status: 200, error: 'shutting_down' }])
    t.not(last.x_svc_trace.billing.total_cost, '0', 'billed for what was produced')
  }
  const charges = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 3)
  t.equal(stack.router.inFlight.count, 0)
})

t.test('a second SIGTERM or SIGINT during a drain exits at once, without waiting for the streams', async (t) => {
  for (const second of ['SIGTERM', 'SIGINT'] as const) {
    // 100 tokens at 2/s: fifty seconds per stream, past the default 30 s drain deadline.
    const sim = await startSimulator({ name: 'drain2', tokensPerS: 2, completionTokens: 100 })
    t.teardown(() => sim.close())
    const router = await spawnRouter(t, [
      { address: addr('a'), url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.3 } }] },
    ])
    const exited = new Promise<number | null>((resolve) => router.child.once('exit', (code) => resolve(code)))
    const streams = await Promise.all(
      Array.from({ length: 3 }, () =>
        request(router.url + '/v1/chat/completions', {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${router.key}` },
          body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100, stream: true }),
        }),
      ),
    )
    t.same(streams.map((r) => r.statusCode), [200, 200, 200], 'three long streams open')
    const bodies = streams.map((r) => r.body.text().catch(() => 'cut'))
    router.child.kill('SIGTERM')
    // The first signal was handled once the listener is closed: a new connection is refused.
    for (;;) {
      const refused = await request(router.url + '/healthz', { reset: true }).then(
        (res) => res.body.dump().then(() => false),
        (err: { code?: string }) => err.code === 'ECONNREFUSED',
      )
      if (refused) break
    }
    router.child.kill(second)
    t.equal(await exited, 1, `${second} during the drain: exit 1 at once`)
    for (const body of await Promise.all(bodies)) t.notOk(body.includes('data: [DONE]'), 'the streams were not waited for')
  }
})
