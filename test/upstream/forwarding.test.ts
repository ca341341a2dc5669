/**
 * Forwarding through the real router to real simulated providers: the openai client streaming and not, tool
 * calls, trace and headers, failover on every fault, what a broken stream looks like, usage estimation.
 */
import OpenAI from 'openai'
import t from 'tap'
import { request } from 'undici'
import { addr, closedPort, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const A = addr('a')
const B = addr('b')
const WEATHER_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}

interface Trace {
  request_id: string
  provider: string | null
  model: string
  billing: { input_cost: string; output_cost: string; total_cost: string; currency: string }
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; estimated?: boolean } | null
  attempts: { provider: string; status: number | null; error?: string }[]
  latency_ms: number
}

function client(stack: Stack): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
}

/** Two providers; A is cheaper, so `sort: price` tries A first and B on failover. */
function twoProviders(t: Parameters<typeof startStack>[0], simA = {}, config = {}): Promise<Stack> {
  return startStack(
    t,
    [
      { address: A, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }], sim: simA },
      { address: B, models: [{ id: MODEL, price: { prompt: 0.5, completion: 1.5 } }] },
    ],
    config,
  )
}

async function post(stack: Stack, body: object, headers: Record<string, string> = {}) {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, ...headers },
    body: JSON.stringify(body),
  })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, text }
}

const HELLO = { model: MODEL, messages: [{ role: 'user' as const, content: 'hello there' }] }
const PRICE = { 'x-svc-provider-sort': 'price' }

t.test('openai client: non-streaming completion carries the trace, SVC-Res-Key and rate-limit headers', async (t) => {
  const stack = await twoProviders(t)
  const { data, response } = await client(stack)
    .chat.completions.create({ ...HELLO, max_tokens: 5 }, { headers: PRICE })
    .withResponse()
  t.equal(data.choices[0]!.message.role, 'assistant')
  t.ok((data.choices[0]!.message.content ?? '').length > 0)
  t.equal(data.choices[0]!.finish_reason, 'length')
  const trace = (data as unknown as { x_svc_trace: Trace }).x_svc_trace
  t.equal(trace.provider, A)
  t.equal(trace.model, MODEL)
  t.match(trace.request_id, /^req_/)
  t.same(trace.usage, data.usage, 'trace usage is the provider usage')
  // 0.1 / 1M per prompt token, 0.2 / 1M per completion token
  const prompt = data.usage!.prompt_tokens
  const expectedInput = (BigInt(prompt) * 100_000_000_000n).toString()
  t.equal(trace.billing.input_cost, `0.${expectedInput.padStart(18, '0')}`.replace(/0+$/, ''))
  t.equal(trace.billing.output_cost, '0.000001', '5 tokens × 0.2 / 1M')
  t.equal(trace.billing.currency, 'USD')
  t.same(trace.attempts, [{ provider: A, status: 200 }])
  t.equal(response.headers.get('svc-res-key'), data.id, 'SVC-Res-Key is the provider chat id')
  t.equal(response.headers.get('x-request-id'), trace.request_id)
  t.ok(response.headers.get('x-ratelimit-limit-requests'))
  t.ok(response.headers.get('x-ratelimit-remaining-requests'))
  t.ok(!Number.isNaN(Date.parse(response.headers.get('x-ratelimit-reset-requests') ?? '')), 'reset is an ISO timestamp')
})

t.test('openai client: streaming completion assembles, ends with the trace chunk then [DONE]', async (t) => {
  const stack = await twoProviders(t)
  const { data: stream, response } = await client(stack)
    .chat.completions.create({ ...HELLO, stream: true, max_tokens: 6 }, { headers: PRICE })
    .withResponse()
  let text = ''
  let trace: Trace | undefined
  let id = ''
  for await (const chunk of stream) {
    id ||= chunk.id
    text += chunk.choices[0]?.delta?.content ?? ''
    const extra = (chunk as unknown as { x_svc_trace?: Trace }).x_svc_trace
    if (extra !== undefined) trace = extra
  }
  t.equal(text.trim().split(/\s+/).length, 6, 'six tokens arrived')
  t.ok(trace, 'a trace chunk arrived')
  t.equal(trace!.provider, A)
  t.same(trace!.usage, { prompt_tokens: trace!.usage!.prompt_tokens, completion_tokens: 6, total_tokens: trace!.usage!.prompt_tokens + 6 })
  t.equal(trace!.billing.output_cost, '0.0000012', '6 × 0.2 / 1M')
  t.equal(response.headers.get('svc-res-key'), id)
  t.match(response.headers.get('content-type') ?? '', /^text\/event-stream/)
  t.equal(stack.sims.get(A)!.stats.lastBody.stream_options?.include_usage, true, 'the router asked the provider for usage')
})

t.test('raw stream: usage chunk hidden unless asked for, [DONE] last, trace chunk right before it', async (t) => {
  const stack = await twoProviders(t)
  const plain = await post(stack, { ...HELLO, stream: true, max_tokens: 2 }, PRICE)
  const events = plain.text.split('\n\n').filter((e) => e.length > 0)
  t.equal(events.at(-1), 'data: [DONE]')
  const traceEvent = JSON.parse(events.at(-2)!.slice('data: '.length))
  t.ok(traceEvent.x_svc_trace, 'trace chunk precedes [DONE]')
  t.same(traceEvent.choices, [])
  const usageOnly = events.filter((e) => e.includes('"usage":{') && !e.includes('x_svc_trace'))
  t.equal(usageOnly.length, 0, 'no provider usage chunk reached a client that did not ask')

  const asked = await post(stack, { ...HELLO, stream: true, max_tokens: 2, stream_options: { include_usage: true } }, PRICE)
  const askedEvents = asked.text.split('\n\n').filter((e) => e.includes('"usage":{') && !e.includes('x_svc_trace'))
  t.equal(askedEvents.length, 1, 'the client that asked gets the usage chunk')
})

t.test('openai client: tool calls, streamed and not', async (t) => {
  const stack = await twoProviders(t)
  const openai = client(stack)
  const whole = await openai.chat.completions.create({ ...HELLO, tools: [WEATHER_TOOL] })
  const call = whole.choices[0]!.message.tool_calls![0]! as { function: { name: string; arguments: string } }
  t.equal(whole.choices[0]!.finish_reason, 'tool_calls')
  t.equal(call.function.name, 'get_weather')
  t.same(JSON.parse(call.function.arguments), { city: 'sample', days: 1 })

  const stream = openai.chat.completions.stream({ ...HELLO, tools: [WEATHER_TOOL], stream: true })
  const final = await stream.finalChatCompletion()
  const streamed = final.choices[0]!.message.tool_calls![0]! as { function: { name: string; arguments: string } }
  t.equal(streamed.function.name, 'get_weather')
  t.same(JSON.parse(streamed.function.arguments), { city: 'sample', days: 1 })
})

const FAILOVER_FAULTS = [
  { fault: 'reset-before-headers', status: null, error: 'connection_reset' },
  { fault: 'status-500', status: 500, error: 'http_500' },
  { fault: 'status-429', status: 429, error: 'http_429' },
  { fault: 'slow-headers', status: null, error: 'headers_timeout' },
] as const

for (const { fault, status, error } of FAILOVER_FAULTS) {
  for (const stream of [false, true]) {
    t.test(`failover on ${fault} (${stream ? 'stream' : 'json'}): served by the next provider, both tries in attempts`, async (t) => {
      // The headers timeout applies to B too, which must answer within it: 1 s leaves a slow machine room,
      // and A's slow headers (5 s) stay far past it. Only the slow-headers row needs one at all.
      const config = fault === 'slow-headers' ? { upstream: { headers_timeout_ms: 1000 } } : {}
      const stack = await twoProviders(t, { fault, slowHeadersMs: 5000 }, config)
      const res = await post(stack, { ...HELLO, stream, max_tokens: 3 }, PRICE)
      t.equal(res.status, 200)
      const trace: Trace = stream
        ? JSON.parse(res.text.split('\n\n').filter((e) => e.includes('x_svc_trace'))[0]!.slice(6)).x_svc_trace
        : JSON.parse(res.text).x_svc_trace
      t.equal(trace.provider, B)
      t.same(trace.attempts, [{ provider: A, status, error }, { provider: B, status: 200 }])
      t.equal(stack.sims.get(A)!.stats.requests, 1)
      t.equal(stack.sims.get(B)!.stats.requests, 1)
    })
  }
}

t.test('failover when the provider refuses connections', async (t) => {
  const port = await closedPort()
  const stack = await startStack(t, [
    { address: A, url: `http://127.0.0.1:${port}`, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }] },
    { address: B, models: [{ id: MODEL, price: { prompt: 0.5, completion: 1.5 } }] },
  ])
  const res = await post(stack, HELLO, PRICE)
  t.equal(res.status, 200)
  t.same(JSON.parse(res.text).x_svc_trace.attempts, [
    { provider: A, status: null, error: 'connection_refused' },
    { provider: B, status: 200 },
  ])
})

t.test('a provider 4xx other than 429 goes back to the client as it is, without failover', async (t) => {
  const stack = await twoProviders(t, { fault: 'status-400' })
  const res = await post(stack, HELLO, PRICE)
  t.equal(res.status, 400)
  const body = JSON.parse(res.text)
  t.ok(body.error, 'the provider error body')
  t.equal(stack.sims.get(B)!.stats.requests, 0, 'no failover')
  t.ok(res.headers['x-request-id'])
})

t.test('every provider failing gives 502 provider_error with every attempt; timeouts give 504', async (t) => {
  // A 1 s headers timeout: A's 500 and then B's 500 come well within it on a slow machine, B's slow headers
  // (5 s) far past it.
  const stack = await startStack(
    t,
    [
      { address: A, models: [{ id: MODEL }], sim: { fault: 'status-500' } },
      { address: B, models: [{ id: MODEL }], sim: { fault: 'slow-headers', slowHeadersMs: 5000 } },
    ],
    { upstream: { headers_timeout_ms: 1000 } },
  )
  const both = await post(stack, HELLO, PRICE)
  const body = JSON.parse(both.text)
  t.equal(both.status, 504, 'the last failure was a timeout')
  t.equal(body.error.code, 'provider_timeout')
  t.equal(body.x_svc_trace.attempts.length, 2)
  t.equal(body.request_id, body.x_svc_trace.request_id)

  stack.sims.get(B)!.setOptions({ fault: 'status-500' })
  const again = await post(stack, HELLO, PRICE)
  t.equal(again.status, 502)
  t.equal(JSON.parse(again.text).error.code, 'provider_error')
})

t.test('no failover when fallbacks are off', async (t) => {
  const stack = await twoProviders(t, { fault: 'status-500' })
  const res = await post(stack, HELLO, { ...PRICE, 'x-svc-provider-allow-fallbacks': 'false' })
  t.equal(res.status, 502)
  t.equal(JSON.parse(res.text).x_svc_trace.attempts.length, 1)
  t.equal(stack.sims.get(B)!.stats.requests, 0)
})

t.test('max_attempts bounds failover', async (t) => {
  const providers = ['1', '2', '3', '4'].map((d, i) => ({
    address: addr(d),
    models: [{ id: MODEL, price: { prompt: `0.${i + 1}`, completion: 0.1 } }],
    sim: { fault: 'status-500' as const },
  }))
  const stack = await startStack(t, providers, { routing: { max_attempts: 2, failure_threshold: 100 } })
  const res = await post(stack, HELLO, PRICE)
  t.equal(res.status, 502)
  t.equal(JSON.parse(res.text).x_svc_trace.attempts.length, 2)
})

t.test('a stream that breaks after bytes reached the client ends with an SSE error event and no [DONE]', async (t) => {
  const stack = await twoProviders(t, { fault: 'reset-mid-stream', faultAfterChunks: 2 })
  const res = await post(stack, { ...HELLO, stream: true, max_tokens: 10 }, PRICE)
  t.equal(res.status, 200, 'the status was already sent')
  const events = res.text.split('\n\n').filter((e) => e.length > 0)
  t.notOk(events.includes('data: [DONE]'), 'never a fake success')
  const last = JSON.parse(events.at(-1)!.slice(6))
  t.equal(last.error.code, 'provider_error')
  t.equal(last.x_svc_trace.provider, A)
  t.equal(stack.sims.get(B)!.stats.requests, 0, 'no failover once bytes were sent')

  // The openai client surfaces it as an error, not as a truncated success.
  const stream = await client(stack).chat.completions.create({ ...HELLO, stream: true, max_tokens: 10 }, { headers: PRICE })
  await t.rejects(async () => {
    for await (const _ of stream) void _
  })
})

t.test('a JSON answer cut halfway fails over (nothing had reached the client)', async (t) => {
  const stack = await twoProviders(t, { fault: 'reset-mid-stream' })
  const res = await post(stack, HELLO, PRICE)
  t.equal(res.status, 200)
  const trace = JSON.parse(res.text).x_svc_trace
  t.equal(trace.provider, B)
  t.equal(trace.attempts[0].error, 'connection_reset')
})

t.test('usage is estimated and marked when the provider reports none', async (t) => {
  const stack = await twoProviders(t, { fault: 'no-usage' })
  const json = JSON.parse((await post(stack, { ...HELLO, max_tokens: 4 }, PRICE)).text)
  t.equal(json.x_svc_trace.usage.estimated, true)
  t.ok(json.x_svc_trace.usage.completion_tokens > 0)
  t.not(json.x_svc_trace.billing.total_cost, '0')

  const streamed = await post(stack, { ...HELLO, stream: true, max_tokens: 4 }, PRICE)
  const trace = JSON.parse(streamed.text.split('\n\n').find((e) => e.includes('x_svc_trace'))!.slice(6)).x_svc_trace
  t.equal(trace.usage.estimated, true)
  t.equal(trace.usage.completion_tokens, 4, 'one token per content event')
})

t.test('the provider fails repeatedly: it is marked unhealthy and skipped until the cooldown', async (t) => {
  const stack = await twoProviders(t, { fault: 'status-500' }, { routing: { failure_threshold: 2, unhealthy_cooldown_ms: 60000 } })
  await post(stack, HELLO, PRICE)
  await post(stack, HELLO, PRICE)
  const before = stack.sims.get(A)!.stats.requests
  const res = await post(stack, HELLO, PRICE)
  t.equal(res.status, 200)
  t.equal(stack.sims.get(A)!.stats.requests, before, 'the unhealthy provider was not tried')
  t.same(JSON.parse(res.text).x_svc_trace.attempts, [{ provider: B, status: 200 }])
})

t.test('a stream that goes idle past body_timeout ends with a provider_timeout SSE error event', async (t) => {
  // Role chunk and first token at once, then 5 s between tokens: far past a 1 s idle limit, which the first
  // bytes are well within even on a slow machine.
  const stack = await twoProviders(t, { tokensPerS: 0.2, completionTokens: 5 }, { upstream: { body_timeout_ms: 1000 } })
  const res = await post(stack, { ...HELLO, stream: true }, PRICE)
  const events = res.text.split('\n\n').filter((e) => e.length > 0)
  t.notOk(events.includes('data: [DONE]'))
  const last = JSON.parse(events.at(-1)!.slice(6))
  t.equal(last.error.code, 'provider_timeout')
  t.same(last.x_svc_trace.attempts, [{ provider: A, status: 200, error: 'body_timeout' }])
})
