/**
 * The engine publishes its telemetry on diagnostics_channel (DESIGN.md §5): a subscriber sees request start,
 * each attempt, the settlement and the request's end, for successes, failovers and failures alike.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import t from 'tap'
import { request } from 'undici'
import type { AttemptEvent, RequestEndEvent, RequestStartEvent, SettleEvent } from '../../src/telemetry/events.js'
import { addr, closedPort, startStack } from '../helpers/stack.js'

const MODEL = 'm-chat'

function listen<T>(t: { teardown(fn: () => void): void }, name: string): T[] {
  const seen: T[] = []
  const fn = (message: unknown): void => {
    seen.push(message as T)
  }
  subscribe(name, fn)
  t.teardown(() => unsubscribe(name, fn))
  return seen
}

t.test('a request that fails over publishes start, both attempts, the settlement and its end', async (t) => {
  const port = await closedPort()
  const stack = await startStack(t, [
    { address: addr('a'), url: `http://127.0.0.1:${port}`, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }] },
    { address: addr('b'), models: [{ id: MODEL, price: { prompt: 0.5, completion: 1 } }] },
  ])
  const starts = listen<RequestStartEvent>(t, 'svc-router:request:start')
  const attempts = listen<AttemptEvent>(t, 'svc-router:attempt:end')
  const settles = listen<SettleEvent>(t, 'svc-router:settle')
  const ends = listen<RequestEndEvent>(t, 'svc-router:request:end')
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true }),
  })
  await res.body.text()
  const requestId = String(res.headers['x-request-id'])
  t.equal(starts.length, 1)
  t.match(starts[0], { requestId, surface: 'chat', model: MODEL, stream: true, startedAt: Number, traceparent: '', tracestate: '' })
  t.equal(attempts.length, 2)
  t.match(attempts[0], { requestId, provider: addr('a'), status: null, error: 'connection_refused', ttfbMs: null })
  t.match(attempts[1], { requestId, provider: addr('b'), status: 200, error: null })
  t.ok(attempts[1]!.ttfbMs! > 0, 'time to first byte of the answering attempt')
  t.equal(settles.length, 1)
  t.match(settles[0], { requestId, provider: addr('b'), durable: true })
  t.ok(settles[0]!.cost > 0n)
  t.equal(ends.length, 1)
  t.match(ends[0], { requestId, admitted: true, surface: 'chat', model: MODEL, provider: addr('b'), status: 200, attempts: 2, error: null })
})

t.test('a request every provider fails publishes its error end and no settlement', async (t) => {
  const port = await closedPort()
  const stack = await startStack(t, [{ address: addr('a'), url: `http://127.0.0.1:${port}`, models: [{ id: MODEL }] }])
  const settles = listen<SettleEvent>(t, 'svc-router:settle')
  const ends = listen<RequestEndEvent>(t, 'svc-router:request:end')
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
  })
  await res.body.text()
  t.equal(res.statusCode, 502)
  t.equal(settles.length, 0)
  t.match(ends, [{ status: 502, provider: null, error: 'provider_error', attempts: 1 }])
})

t.test('a client that leaves mid-stream ends with 499 client_closed and its attempt counted', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }], sim: { tokensPerS: 20, completionTokens: 40 } }])
  const attempts = listen<AttemptEvent>(t, 'svc-router:attempt:end')
  const ends = listen<RequestEndEvent>(t, 'svc-router:request:end')
  const controller = new AbortController()
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true }),
    signal: controller.signal,
  })
  // Two chunks in, the client goes.
  let chunks = 0
  await new Promise<void>((resolve) => {
    res.body.on('data', () => {
      if (++chunks === 2) {
        controller.abort()
        resolve()
      }
    })
    res.body.on('error', () => resolve())
  })
  for (let i = 0; i < 100 && ends.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
  t.match(ends, [{ status: 499, error: 'client_closed', provider: addr('a'), attempts: 1 }])
  t.match(attempts, [{ provider: addr('a'), status: 200, error: 'client_closed' }])
})
