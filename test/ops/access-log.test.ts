/**
 * Logs (issue #13 §5): the router as its own process writes JSON lines on stderr, one access line per request
 * with its identifiers, outcome, timings and cost, and never a key or a prompt.
 */
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { stringify } from 'yaml'
import { startSimulator } from '../../src/simulator/simulator.js'
import { addr } from '../helpers/stack.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const MODEL = 'm-chat'
const PROMPT = 'a-secret-prompt-that-must-never-be-logged'

t.test('access log: one JSON line per request, with no key and no prompt', async (t) => {
  const sim = await startSimulator({ name: 'acc' })
  t.teardown(() => sim.close())
  const dir = t.testdir()
  writeFileSync(
    join(dir, 'providers.yaml'),
    stringify({ providers: [{ address: addr('a'), url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.3 } }] }] }),
  )
  writeFileSync(
    join(dir, 'config.yaml'),
    stringify({
      server: { host: '127.0.0.1', port: 0 },
      registry: { path: 'providers.yaml', watch: false },
      store: { path: join(dir, 'svc.db') },
      log: { level: 'info', format: 'json' },
      dev: { bootstrap: true },
    }),
  )
  const child = spawn(process.execPath, [CLI, 'serve', '--config', join(dir, 'config.yaml')], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  let stderr = ''
  child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()))
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
  const ids: string[] = []
  for (const stream of [false, true]) {
    const res = await request(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 3, stream }),
    })
    await res.body.text()
    t.equal(res.statusCode, 200)
    ids.push(String(res.headers['x-request-id']))
  }
  const bad = await request(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: PROMPT }] }),
  })
  await bad.body.text()
  // Lines are written synchronously, but reach this pipe asynchronously.
  const deadline = Date.now() + 5000
  const accessLines = (): Record<string, unknown>[] =>
    stderr
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === 'request')
  while (accessLines().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))

  const lines = stderr.split('\n').filter((l) => l !== '')
  t.ok(lines.length >= 2)
  for (const l of lines) {
    t.doesNotThrow(() => JSON.parse(l), 'every line is JSON')
    t.notOk(l.includes(key), 'no key in any line')
    t.notOk(l.includes(PROMPT), 'no prompt in any line')
  }
  const access = accessLines()
  t.equal(access.length, 2, 'one access line per inference request that reached the engine')
  for (const [i, id] of ids.entries()) {
    const line = access.find((l) => l.request_id === id)
    t.ok(line, `access line of request ${i}`)
    t.match(line, {
      level: 'info',
      surface: 'chat',
      model: MODEL,
      provider: addr('a'),
      status: 200,
      attempts: 1,
      ttfb_ms: Number,
      duration_ms: Number,
      cost_usd: /^0\.\d+$/,
      error: null,
    })
    t.type(line!.time, 'string')
  }
})
