/**
 * The front end's own answers: body limits, malformed requests, unknown routes and methods, the rate limit,
 * and the request id and envelope on every response.
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const HELLO = { model: MODEL, messages: [{ role: 'user', content: 'hi' }] }

async function call(stack: Stack, path: string, init: { method?: string; body?: string; headers?: Record<string, string> } = {}) {
  const res = await request(stack.url + path, {
    method: (init.method ?? 'POST') as 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, ...init.headers },
    body: init.body,
  })
  const text = await res.body.text()
  let json: any = null
  try {
    json = JSON.parse(text)
  } catch {}
  return { status: res.statusCode, headers: res.headers, text, json }
}

function assertEnvelope(t: Test, res: { json: any; headers: Record<string, unknown> }, code: string, type: string): void {
  t.equal(res.json?.error?.code, code)
  t.equal(res.json?.error?.type, type)
  t.type(res.json?.error?.message, 'string')
  t.match(res.json?.request_id, /^req_/)
  t.equal(res.headers['x-request-id'], res.json?.request_id)
}

t.test('front end', async (t) => {
  const stack = await startStack(t, [{ address: addr('d'), models: [{ id: MODEL }] }], {
    server: { max_json_body_bytes: 2048 },
  })

  t.test('a body over the JSON limit is 413 request_too_large', async (t) => {
    const big = JSON.stringify({ ...HELLO, messages: [{ role: 'user', content: 'x'.repeat(4096) }] })
    const res = await call(stack, '/v1/chat/completions', { body: big })
    t.equal(res.status, 413)
    assertEnvelope(t, res, 'request_too_large', 'invalid_request_error')
  })

  t.test('malformed JSON is 400 invalid_request with the parser message', async (t) => {
    const res = await call(stack, '/v1/chat/completions', { body: '{"model": "m-chat", "messages": [' })
    t.equal(res.status, 400)
    assertEnvelope(t, res, 'invalid_request', 'invalid_request_error')
    t.match(res.json.error.message, /not valid JSON/)
  })

  const INVALID: [string, unknown, RegExp][] = [
    ['a JSON array', [], /must be a JSON object/],
    ['no model', { messages: HELLO.messages }, /model is required/],
    ['an empty model', { ...HELLO, model: '' }, /model is required/],
    ['no messages', { model: MODEL }, /messages is required/],
    ['empty messages', { model: MODEL, messages: [] }, /messages is required/],
    ['a message without role', { model: MODEL, messages: [{ content: 'x' }] }, /messages\[0\]\.role/],
    ['a message whose content is a number', { model: MODEL, messages: [{ role: 'user', content: 5 }] }, /messages\[0\]\.content/],
    ['stream that is not a boolean', { ...HELLO, stream: 'yes' }, /stream must be a boolean/],
    ['max_tokens that is not a positive integer', { ...HELLO, max_tokens: 0 }, /max_tokens must be a positive integer/],
    ['max_completion_tokens that is fractional', { ...HELLO, max_completion_tokens: 1.5 }, /max_completion_tokens must be a positive integer/],
  ]
  for (const [what, body, message] of INVALID) {
    t.test(`${what} is 400 invalid_request naming the field`, async (t) => {
      const res = await call(stack, '/v1/chat/completions', { body: JSON.stringify(body) })
      t.equal(res.status, 400)
      assertEnvelope(t, res, 'invalid_request', 'invalid_request_error')
      t.match(res.json.error.message, message)
    })
  }

  t.test('an unknown model is 404 model_not_found', async (t) => {
    const res = await call(stack, '/v1/chat/completions', { body: JSON.stringify({ ...HELLO, model: 'nope' }) })
    t.equal(res.status, 404)
    assertEnvelope(t, res, 'model_not_found', 'not_found_error')
  })

  t.test('an unknown route is 404 not_found in the envelope', async (t) => {
    const res = await call(stack, '/v1/nothing-here', { method: 'GET' })
    t.equal(res.status, 404)
    assertEnvelope(t, res, 'not_found', 'not_found_error')
  })

  t.test('a route with a parameter and that parameter empty is 404, not 405', async (t) => {
    const empty = await call(stack, '/v1/async/jobs/', { method: 'GET' })
    t.equal(empty.status, 404)
    assertEnvelope(t, empty, 'not_found', 'not_found_error')
    // The same route with a parameter and the wrong method is still a 405.
    const wrong = await call(stack, '/v1/async/jobs/job_x', { method: 'POST', body: '{}' })
    t.equal(wrong.status, 405)
    t.equal(wrong.headers.allow, 'GET, HEAD', 'HEAD is answered wherever GET is')
  })

  t.test('a wrong method under a wildcard route is 405 for an id with slashes too; the bare prefix is 404', async (t) => {
    for (const path of ['/v1/models/some-model', '/v1/models/org/name', '/v1/models/org/name/v2']) {
      const res = await call(stack, path, { method: 'POST', body: '{}' })
      t.equal(res.status, 405, path)
      t.equal(res.headers.allow, 'GET, HEAD', path)
    }
    const bare = await call(stack, '/v1/models/', { method: 'POST', body: '{}' })
    t.equal(bare.status, 404, 'no model id: no route')
  })

  t.test('a known route with the wrong method is 405 with Allow', async (t) => {
    const res = await call(stack, '/v1/chat/completions', { method: 'GET' })
    t.equal(res.status, 405)
    assertEnvelope(t, res, 'method_not_allowed', 'invalid_request_error')
    t.equal(res.headers.allow, 'POST')
  })

  t.test('every request gets its own request id', async (t) => {
    const a = await call(stack, '/v1/models', { method: 'GET' })
    const b = await call(stack, '/v1/models', { method: 'GET' })
    t.ok(a.headers['x-request-id'])
    t.not(a.headers['x-request-id'], b.headers['x-request-id'])
  })
})

t.test('rate limit: per account, exact at the boundary under concurrency, 429 with Retry-After', async (t) => {
  const stack = await startStack(t, [{ address: addr('e'), models: [{ id: MODEL }] }], { limits: { requests_per_minute: 5 } })
  const results = await Promise.all(
    Array.from({ length: 12 }, () => call(stack, '/v1/chat/completions', { body: JSON.stringify(HELLO) })),
  )
  const ok = results.filter((r) => r.status === 200)
  const limited = results.filter((r) => r.status === 429)
  t.equal(ok.length, 5, 'exactly the limit is admitted')
  t.equal(limited.length, 7)
  for (const r of limited) {
    assertEnvelope(t, r, 'rate_limit_exceeded', 'rate_limit_error')
    const retry = Number(r.headers['retry-after'])
    t.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, `Retry-After is whole seconds (${retry})`)
    t.equal(r.headers['x-ratelimit-remaining-requests'], '0')
  }
  const remaining = ok.map((r) => Number(r.headers['x-ratelimit-remaining-requests'])).sort()
  t.same(remaining, [0, 1, 2, 3, 4], 'each admitted request saw its own remaining count')
  for (const r of results) {
    t.equal(r.headers['x-ratelimit-limit-requests'], '5')
    t.ok(!Number.isNaN(Date.parse(String(r.headers['x-ratelimit-reset-requests']))))
  }
  // Header errors are counted and carry the headers too.
  const bad = await call(stack, '/v1/chat/completions', { body: JSON.stringify(HELLO), headers: { 'x-svc-provider-sort': 'bogus' } })
  t.equal(bad.status, 429, 'the limit is checked before anything else about the request')
})
