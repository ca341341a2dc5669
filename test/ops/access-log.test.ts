/**
 * Logs (issue #13 §5): the router as its own process writes JSON lines on stderr, one access line per request
 * (refused ones included) with its identifiers, outcome, timings and cost, never a key, an x-api-key or a
 * cookie, and a prompt only when the operator sets both log.level debug and log.prompts.
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSimulator } from '../../src/simulator/simulator.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { addr } from '../helpers/stack.js'

const MODEL = 'm-chat'
const PROMPT = 'a-secret-prompt-that-must-never-be-logged'
const COOKIE = 'svc_session=a-session-cookie-value-that-must-never-be-logged'

interface Logged {
  readonly url: string
  readonly key: string
  /** stderr's lines so far, each parsed (the test fails if one is not JSON). */
  lines(): Record<string, unknown>[]
  readonly raw: () => string
}

/** The router as its own process with `log` settings, its stderr captured. */
async function spawnLogged(t: Test, log: Record<string, unknown>): Promise<Logged> {
  const sim = await startSimulator({ name: 'acc' })
  t.teardown(() => sim.close())
  const provider = { address: addr('a'), url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.3 } }] }
  const router = await spawnRouter(t, [provider], { health: { probes: false }, log: { format: 'json', ...log } }, { captureStderr: true })
  return {
    url: router.url,
    key: router.key,
    raw: router.stderr,
    lines: () =>
      router
        .stderr()
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  }
}

/** Waits until `n` access lines arrived (lines are written synchronously, but reach the pipe asynchronously). */
async function accessLines(logged: Logged, n: number): Promise<Record<string, unknown>[]> {
  const deadline = Date.now() + 5000
  const access = () => logged.lines().filter((l) => l.msg === 'request')
  while (access().length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  return access()
}

/** Sends the same prompt with the key as Authorization, as x-api-key, and with a cookie; returns the request ids. */
async function traffic(logged: Logged): Promise<{ ok: string[]; notFound: string; unauthorized: string }> {
  const ok: string[] = []
  for (const [stream, auth] of [
    [false, { authorization: `Bearer ${logged.key}` }],
    [true, { 'x-api-key': logged.key }],
  ] as const) {
    const res = await request(logged.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: COOKIE, ...auth },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 3, stream }),
    })
    await res.body.text()
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`)
    ok.push(String(res.headers['x-request-id']))
  }
  const bad = await request(logged.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${logged.key}`, cookie: COOKIE },
    body: JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: PROMPT }] }),
  })
  await bad.body.text()
  const denied = await request(logged.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': logged.key.slice(0, -2) + 'xx' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: PROMPT }] }),
  })
  await denied.body.text()
  return { ok, notFound: String(bad.headers['x-request-id']), unauthorized: String(denied.headers['x-request-id']) }
}

/** No line holds the key (whole, or the wrong one sent), the cookie, or a bearer header. */
function noSecrets(t: Test, logged: Logged): void {
  const raw = logged.raw()
  t.ok(raw.length > 0)
  t.notOk(raw.includes(logged.key), 'no key in any line')
  t.notOk(raw.includes(logged.key.slice(0, -2)), 'not even the refused one')
  t.notOk(raw.includes('a-session-cookie-value'), 'no cookie in any line')
  t.notOk(raw.toLowerCase().includes('bearer'), 'no Authorization header in any line')
}

t.test('access log: one JSON line per request, refused ones included, with no key and no prompt (debug alone logs none)', async (t) => {
  const logged = await spawnLogged(t, { level: 'debug', prompts: false })
  const ids = await traffic(logged)
  const access = await accessLines(logged, 4)
  t.doesNotThrow(() => logged.lines(), 'every line is JSON')
  noSecrets(t, logged)
  t.notOk(logged.raw().includes(PROMPT), 'no prompt in any line, even at level debug')
  t.equal(access.length, 4, 'one access line per inference request')
  for (const [i, id] of ids.ok.entries()) {
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
  t.match(
    access.find((l) => l.request_id === ids.notFound),
    { surface: 'chat', model: 'no-such-model', provider: null, status: 404, attempts: 0, ttfb_ms: null, cost_usd: '0', error: 'model_not_found' },
    'a request refused by admission has its line',
  )
  t.match(access.find((l) => l.request_id === ids.unauthorized), { model: '', status: 401, attempts: 0, error: 'invalid_api_key' })
})

t.test('log.prompts with level debug: the prompt as a debug line, still never a key or a cookie', async (t) => {
  const logged = await spawnLogged(t, { level: 'debug', prompts: true })
  const ids = await traffic(logged)
  await accessLines(logged, 4)
  noSecrets(t, logged)
  const bodies = logged.lines().filter((l) => l.msg === 'request body')
  t.ok(bodies.length >= 3, 'the body of each request that got past authentication')
  const first = bodies.find((l) => l.request_id === ids.ok[0])
  t.match(first, { level: 'debug', surface: 'chat' })
  t.ok(String(first?.body).includes(PROMPT), 'holds the prompt')
})

t.test('log.prompts at level info: no prompt', async (t) => {
  const logged = await spawnLogged(t, { level: 'info', prompts: true })
  await traffic(logged)
  await accessLines(logged, 4)
  noSecrets(t, logged)
  t.notOk(logged.raw().includes(PROMPT), 'no prompt in any line')
})
