/**
 * A provider that lies about usage cannot jam billing (issue 43, point 1), on SQLite and on PostgreSQL: a
 * provider of the test's own answers huge (2^53 - 1, past 10^9, Infinity), negative, fractional and string
 * counts, on JSON and on streams, then 2^53 - 1 1,100 times as the issue's attacker did, while an honest account calls an
 * honest provider. Every answer is billed by the estimate (`estimated: true`) and the counts stored are the
 * ones billed; the honest account is answered and billed exactly; `accounts deposit`, `/v1/account/funds` and
 * a restart of the router on the same store work.
 */
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { stringify } from 'yaml'
import { parseUsd } from '../../src/billing/money.js'
import { loadConfig } from '../../src/config/index.js'
import { serve, type RunningRouter } from '../../src/serve.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { startPostgres } from '../helpers/postgres.js'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, DEFAULT_PRICE } from '../helpers/stack.js'
import { runCli } from '../helpers/child.js'

const VICTIM = '0x00000000000000000000000000000000000000c1'
const HONEST = '0x00000000000000000000000000000000000000c2'
const FLOOD = 1_100

/** The usage objects the lying provider sends, as raw JSON (1e400 parses as Infinity). */
const JUNK = [
  '{"prompt_tokens":9007199254740991,"completion_tokens":9007199254740991,"total_tokens":9007199254740991}',
  '{"prompt_tokens":1000000001,"completion_tokens":5,"total_tokens":1000000006}',
  '{"prompt_tokens":1e400,"completion_tokens":1e400}',
  '{"prompt_tokens":-5,"completion_tokens":-7,"total_tokens":-12}',
  '{"prompt_tokens":1.5,"completion_tokens":2.5,"total_tokens":4}',
  '{"prompt_tokens":"12","completion_tokens":"7","total_tokens":"19"}',
]

const pg = await startPostgres(t, { fsync: false })

interface Answer {
  status: number
  trace: Record<string, any> | null
}

async function chat(url: string, key: string, model: string, stream: boolean): Promise<Answer> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'hello there' }] }),
  })
  const text = await res.body.text()
  if (res.statusCode !== 200) return { status: res.statusCode, trace: null }
  if (!stream) return { status: 200, trace: JSON.parse(text).x_svc_trace ?? null }
  let trace = null
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue
    const chunk = JSON.parse(line.slice(6))
    if (chunk.x_svc_trace !== undefined) trace = chunk.x_svc_trace
  }
  return { status: 200, trace }
}

/** Runs `n` calls of `call` with at most `width` at once. */
async function pool<T>(n: number, width: number, call: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n)
  let next = 0
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) {
        const i = next++
        out[i] = await call(i)
      }
    }),
  )
  return out
}

const today = () => new Date().toISOString().slice(0, 10)

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: a provider lying about usage is billed by estimates; the honest, deposits, funds and a restart are unaffected`, async (t) => {
    let served = 0
    const liar = await fakeProvider(t, (req, res, body) => {
      if (req.url?.endsWith('/models')) return res.end('{"data":[]}')
      // Each junk kind in turn while probed, then the issue's 2^53 - 1, whose sums pass 64 bits in 1,025 charges.
      const usage = served < 2 * JUNK.length ? JUNK[served % JUNK.length]! : JUNK[0]!
      served++
      const id = `chatcmpl-${served}`
      if (JSON.parse(body).stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(`data: {"id":"${id}","object":"chat.completion.chunk","created":0,"model":"liar-m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n`)
        res.write(`data: {"id":"${id}","object":"chat.completion.chunk","created":0,"model":"liar-m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`)
        res.end(`data: {"id":"${id}","object":"chat.completion.chunk","created":0,"model":"liar-m","choices":[],"usage":${usage}}\n\ndata: [DONE]\n\n`)
        return
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        `{"id":"${id}","object":"chat.completion","created":0,"model":"liar-m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":${usage}}`,
      )
    })
    const sim = await startSimulator({ name: 'honest' })
    t.teardown(() => sim.close())
    const dir = t.testdir()
    const providers = [
      { address: addr('d'), url: liar.url, trust_mode: 'standard', models: [{ id: 'liar-m', type: 'chatbot', context_length: 8192, price: DEFAULT_PRICE }] },
      { address: addr('e'), url: sim.url, trust_mode: 'standard', models: [{ id: 'honest-m', type: 'chatbot', context_length: 8192, price: DEFAULT_PRICE }] },
    ]
    writeFileSync(join(dir, 'providers.yaml'), stringify({ providers }))
    const store = kind === 'sqlite' ? { path: join(dir, 'svc.db') } : { kind: 'postgres', url: await pg.newDatabase() }
    const config = join(dir, 'config.yaml')
    writeFileSync(
      config,
      stringify({
        server: { host: '127.0.0.1', port: 0 },
        registry: { path: 'providers.yaml', watch: false },
        store,
        health: { probes: false },
        limits: { requests_per_minute: 100_000 },
        log: { level: 'error', access_log: false },
      }),
    )
    let router: RunningRouter | null = null
    t.teardown(() => router?.close())
    router = await serve(loadConfig({ file: config, env: {} }))
    const { credentials } = router
    for (const wallet of [VICTIM, HONEST]) await router.store.ledger.addFunds(wallet, 'deposit', parseUsd('1000')!, 'test', Date.now())
    const victim = (await credentials.issueApiKey(VICTIM, { name: 'victim' })).secret
    const honest = (await credentials.issueApiKey(HONEST, { name: 'honest' })).secret
    const honestMk = (await credentials.issueMgmtKey(HONEST, 'ops', ['account:read'])).secret

    // Each junk usage on JSON and on a stream: an estimate, never the figure.
    const probes: Answer[] = []
    for (const stream of [false, true]) {
      for (let i = 0; i < JUNK.length; i++) {
        const a = await chat(router.url, victim, 'liar-m', stream)
        probes.push(a)
        t.equal(a.status, 200, `${stream ? 'stream' : 'JSON'} ${JUNK[(served - 1) % JUNK.length]} answered`)
        t.equal(a.trace?.usage?.estimated, true, `${stream ? 'stream' : 'JSON'} ${JUNK[(served - 1) % JUNK.length]}: billed by the estimate`)
        t.ok(a.trace!.usage.prompt_tokens < 1000, 'the estimate is the prompt size, not the claim')
      }
    }
    // The attacker's volume, with the honest account calling meanwhile.
    const [flood, calm] = await Promise.all([
      pool(FLOOD, 32, (i) => chat(router!.url, victim, 'liar-m', i % 4 === 0)),
      pool(60, 4, (i) => chat(router!.url, honest, 'honest-m', i % 2 === 0)),
    ])
    t.strictSame(flood.filter((a) => a.status !== 200 || a.trace?.usage?.estimated !== true).length, 0, 'every lying answer is answered and billed by its estimate')
    t.strictSame(calm.map((a) => a.status).filter((s) => s !== 200), [], 'every honest request answered')
    t.equal(calm.filter((a) => a.trace?.usage?.estimated === true).length, 0, 'honest usage as reported')

    // The counts stored are the ones billed: the sum of the traces.
    const victimAnswers = [...probes, ...flood]
    const rows = await router.store.ledger.usage(VICTIM, { fromDay: today(), toDay: today() })
    t.strictSame(
      rows.reduce((n, r) => [n[0]! + r.requests, n[1]! + r.promptTokens, n[2]! + r.completionTokens], [0, 0, 0]),
      victimAnswers.reduce((n, a) => [n[0]! + 1, n[1]! + a.trace!.usage.prompt_tokens, n[2]! + a.trace!.usage.completion_tokens], [0, 0, 0]),
      'requests, prompt and completion tokens stored = billed',
    )
    const honestCost = calm.reduce((n, a) => n + parseUsd(a.trace!.billing.total_cost)!, 0n)
    t.equal((await router.store.ledger.totals(HONEST)).spent, honestCost, 'the honest account billed exactly its answers')

    const funds = await request(`${router.url}/v1/account/funds`, { headers: { authorization: `Bearer ${honestMk}` } })
    t.equal(funds.statusCode, 200, '/v1/account/funds answers')
    await funds.body.dump()
    const deposit = await runCli(['accounts', 'deposit', HONEST, '5'], config)
    t.equal(deposit.status, 0, `accounts deposit works: ${deposit.stderr}`)

    // A restart on the same store serves.
    await router.close()
    router = await serve(loadConfig({ file: config, env: {} }))
    const after = await chat(router.url, honest, 'honest-m', false)
    t.equal(after.status, 200, 'served after a restart')
    const again = await chat(router.url, victim, 'liar-m', true)
    t.equal(again.status, 200, 'the victim account too')
    const ready = await request(`${router.url}/readyz`)
    t.equal(ready.statusCode, 200, await ready.body.text())
  })
}
