/**
 * Operations endpoints (issue #13 §4): /healthz, /readyz with its reasons, /metrics as Prometheus text whose
 * counters match the requests sent, and the ops port kept apart from the API when configured.
 */
import t from 'tap'
import { request } from 'undici'
import { addr, closedPort, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'

async function chat(stack: Stack, stream: boolean): Promise<number> {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    // Price sort: the cheaper provider is tried first whatever latency the other one shows.
    headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream }),
  })
  await res.body.text()
  return res.statusCode
}

async function get(url: string): Promise<{ status: number; type: string; body: string }> {
  const res = await request(url)
  return { status: res.statusCode, type: String(res.headers['content-type']), body: await res.body.text() }
}

/** Prometheus text format 0.0.4, parsed strictly: every line is a comment or `name{labels} value`. */
function parseProm(text: string): Map<string, number> {
  const samples = new Map<string, number>()
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (-?[0-9.eE+-]+|NaN|\+Inf|-Inf)$/
  for (const l of text.split('\n')) {
    if (l === '' || l.startsWith('# HELP ') || l.startsWith('# TYPE ')) continue
    const m = line.exec(l)
    if (m === null) throw new Error(`not a Prometheus sample line: ${JSON.stringify(l)}`)
    samples.set(m[1]! + (m[2] ?? ''), Number(m[3]))
  }
  return samples
}

t.test('/healthz and /readyz answer 200 on a router with a healthy provider', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }])
  const health = await get(stack.url + '/healthz')
  t.equal(health.status, 200)
  t.same(JSON.parse(health.body), { status: 'ok' })
  const ready = await get(stack.url + '/readyz')
  t.equal(ready.status, 200)
  t.same(JSON.parse(ready.body), { status: 'ready' })
})

t.test('/readyz is 503 with the reason once every provider is unhealthy; /healthz stays 200', async (t) => {
  const port = await closedPort()
  const stack = await startStack(t, [{ address: addr('a'), url: `http://127.0.0.1:${port}`, models: [{ id: MODEL }] }], {
    routing: { failure_threshold: 1, unhealthy_cooldown_ms: 60_000 },
  })
  t.equal((await get(stack.url + '/readyz')).status, 200, 'healthy until it fails')
  t.equal(await chat(stack, false), 502)
  const ready = await get(stack.url + '/readyz')
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { status: 'not_ready', reason: /no healthy provider/ })
  t.equal((await get(stack.url + '/healthz')).status, 200)
})

t.test('/metrics parses as Prometheus text and its counters match the requests sent', async (t) => {
  const port = await closedPort()
  const stack = await startStack(t, [
    { address: addr('a'), url: `http://127.0.0.1:${port}`, models: [{ id: MODEL, price: { prompt: 0.01, completion: 0.02 } }] },
    { address: addr('b'), models: [{ id: MODEL }] },
  ], { routing: { failure_threshold: 100 } })
  const statuses = []
  // Price sort puts the cheaper, dead provider first: every request fails over once.
  for (let i = 0; i < 3; i++) statuses.push(await chat(stack, false))
  for (let i = 0; i < 2; i++) statuses.push(await chat(stack, true))
  t.same(statuses, [200, 200, 200, 200, 200])
  const res = await get(stack.url + '/metrics')
  t.equal(res.status, 200)
  t.match(res.type, /^text\/plain; version=0\.0\.4/)
  const m = parseProm(res.body)
  const b = addr('b')
  t.equal(m.get(`svc_requests_total{surface="chat",status="200",provider="${b}",model="${MODEL}"}`), 5)
  t.equal(m.get('svc_failovers_total'), 5)
  t.equal(m.get(`svc_upstream_attempts_total{provider="${addr('a')}",outcome="connection_refused"}`), 5)
  t.equal(m.get(`svc_upstream_attempts_total{provider="${b}",outcome="ok"}`), 5)
  t.equal(m.get('svc_requests_in_flight'), 0)
  t.equal(m.get(`svc_request_duration_seconds_count{surface="chat",model="${MODEL}"}`), 5)
  t.equal(m.get(`svc_time_to_first_token_seconds_count{provider="${b}"}`), 5)
  t.equal(m.get('svc_charges_total{durable="true"}'), 5)
  t.ok(m.get('svc_billed_usd_total')! > 0)
  t.equal(m.get(`svc_provider_healthy{provider="${b}"}`), 1)
  t.ok(m.get(`svc_provider_latency_seconds{provider="${b}",model="${MODEL}"}`)! > 0)
  t.equal(m.get('svc_ledger_charges_queued'), 0, 'every charge committed')
  t.equal(m.get('svc_ledger_committed_charges_total{ok="true"}'), 5, 'the charge writer committed the five charges')
  const commits = m.get('svc_ledger_commit_seconds_count{ok="true"}')!
  t.ok(commits >= 1 && commits <= 5, 'in one to five group commits')
  t.equal(m.get('svc_ledger_commit_seconds_bucket{le="+Inf",ok="true"}'), commits, 'the commit latency histogram counts each')
  t.ok(m.has('svc_nodejs_eventloop_lag_seconds'), 'event-loop lag')
  t.ok(m.get('svc_process_resident_memory_bytes')! > 0, 'RSS')
  t.notOk(m.has('svc_ledger_commit_seconds_count{ok="false"}'), 'no series for an outcome never seen')
  const series = `surface="chat",model="${MODEL}"`
  const buckets = [...m].filter(([k]) => k.startsWith('svc_request_duration_seconds_bucket{') && k.endsWith(`,${series}}`)).map(([, v]) => v)
  t.equal(buckets.length, 16, 'fifteen bounds and +Inf')
  t.ok(buckets.every((v, i) => i === 0 || v >= buckets[i - 1]!), 'cumulative buckets')
  t.equal(buckets.at(-1), 5)
  t.ok(m.get(`svc_request_duration_seconds_sum{${series}}`)! > 0)

  // Counts keep adding up across scrapes (the per-request series are folded into the exposition on scrape).
  t.equal(await chat(stack, false), 200)
  const again = parseProm((await get(stack.url + '/metrics')).body)
  t.equal(again.get(`svc_requests_total{surface="chat",status="200",provider="${b}",model="${MODEL}"}`), 6)
  t.equal(again.get('svc_failovers_total'), 6)
  t.equal(again.get(`svc_upstream_attempts_total{provider="${b}",outcome="ok"}`), 6)
  t.equal(again.get(`svc_request_duration_seconds_count{${series}}`), 6)
  t.equal(again.get(`svc_request_duration_seconds_bucket{le="+Inf",${series}}`), 6)
  t.equal(again.get('svc_charges_total{durable="true"}'), 6)
  t.ok(again.get('svc_billed_usd_total')! > m.get('svc_billed_usd_total')!, 'billed USD grows')
})

t.test('ops.separate_port: the ops endpoints answer on their own port and not beside the API', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }], { ops: { separate_port: true, port: 0 } })
  t.not(stack.router.opsUrl, stack.url)
  t.equal((await get(stack.router.opsUrl + '/healthz')).status, 200)
  t.equal((await get(stack.router.opsUrl + '/metrics')).status, 200)
  t.equal((await get(stack.url + '/healthz')).status, 404)
  t.equal((await get(stack.url + '/metrics')).status, 404)
  t.equal((await get(stack.router.opsUrl + '/v1/models')).status, 404, 'the API is not on the ops port')
})

t.test('ops.metrics false: no /metrics route', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }], { ops: { metrics: false } })
  t.equal((await get(stack.url + '/metrics')).status, 404)
  t.equal((await get(stack.url + '/healthz')).status, 200)
})

t.test('requests refused before the failover loop are counted too (401, 400, 404, 429, and 402)', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }], { limits: { requests_per_minute: 4 } })
  const post = async (headers: Record<string, string>, body: string): Promise<number> => {
    const res = await request(stack.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body })
    await res.body.text()
    return res.statusCode
  }
  const ok = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })
  const broke = await stack.newApiKey({ account: await stack.newAccount('0') })
  const statuses = [
    await post({ authorization: 'Bearer sk-not-a-key' }, ok),
    await post(stack.auth, '{"model":'),
    await post(stack.auth, JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] })),
    await post(stack.auth, ok),
    await post(stack.auth, ok),
    await post(stack.auth, ok),
    await post(broke.auth, ok),
  ]
  t.same(statuses, [401, 400, 404, 200, 200, 429, 402])
  const m = parseProm((await get(stack.url + '/metrics')).body)
  const count = (status: number, model = '') => m.get(`svc_requests_total{surface="chat",status="${status}",provider="",model="${model}"}`)
  t.equal(count(401), 1, '401 bad key')
  t.equal(count(400), 1, '400 bad body')
  t.equal(count(404), 1, '404 unknown model, counted without the name a client made up (no unbounded labels)')
  t.notOk([...m.keys()].some((k) => k.includes('no-such-model')), 'no series names a model outside the catalog')
  t.equal(count(429), 1, '429 rate limit')
  t.equal(count(402, MODEL), 1, '402 no funds')
  t.equal(m.get(`svc_requests_total{surface="chat",status="200",provider="${addr('a')}",model="${MODEL}"}`), 2)
  t.equal(m.get(`svc_request_duration_seconds_count{surface="chat",model=""}`), 4, 'their durations too')
  t.equal(m.get('svc_requests_in_flight'), 0, 'a refused request never counted as in flight')
})

t.test('a scrape before the event-loop monitor has a sample writes its NaN as the text format spells it', async (t) => {
  const { startMetrics } = await import('../../src/telemetry/metrics.js')
  // No providers, no models: only the process collectors, scraped in the same turn as they start.
  const table = { providers: () => [], models: () => [] } as unknown as Parameters<typeof startMetrics>[0]
  const metrics = startMetrics(table, { chargesQueued: () => 0 })
  t.teardown(() => metrics.close())
  const text = await metrics.render()
  const lag = text.split('\n').filter((l) => l.startsWith('svc_nodejs_eventloop_lag_mean_seconds '))
  t.same(lag, ['svc_nodejs_eventloop_lag_mean_seconds NaN'], 'NaN, not prom-client\'s "Nan"')
  t.notMatch(text, / Nan$/m)
})
