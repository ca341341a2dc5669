/**
 * The fault matrix (issue #13): one provider, one fault per row, the exact answer the client sees, and
 * nothing hangs (the client gives up after 10 s, far past every router timeout set here). With one provider
 * there is no failover to hide the outcome; failover itself is test/upstream/forwarding.test.ts.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import type { SimulatorOptions } from '../../src/simulator/simulator.js'
import { addr, closedPort, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const P = addr('a')
/**
 * Router limits for the rows that do not test a timeout: far past anything a healthy answer needs on a slow
 * machine, and far below the client's own limit. A row that tests one timeout sets that one short (300 ms) and
 * leaves the others here, so a loaded machine cannot turn its fault into another one.
 */
const LIMITS = { upstream: { headers_timeout_ms: 3000, body_timeout_ms: 3000 } }
const CLIENT_LIMIT_MS = 10_000

type Respond = (req: IncomingMessage, res: ServerResponse) => void

async function fakeProvider(t: Test, respond: Respond): Promise<string> {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => respond(req, res))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

function alone(t: Test, where: { sim?: SimulatorOptions; url?: string }, config: Record<string, Record<string, unknown>> = LIMITS): Promise<Stack> {
  return startStack(t, [{ address: P, models: [{ id: MODEL }], ...where }], config)
}

interface Outcome {
  status: number
  type: string
  text: string
  ms: number
}

async function post(stack: Stack, stream: boolean, maxTokens = 5): Promise<Outcome> {
  const started = performance.now()
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens, stream }),
    headersTimeout: CLIENT_LIMIT_MS,
    bodyTimeout: CLIENT_LIMIT_MS,
  })
  const text = await res.body.text()
  return { status: res.statusCode, type: String(res.headers['content-type']), text, ms: performance.now() - started }
}

/** An error answer before any byte: the envelope, its code and the attempts; nothing billed or held. */
async function expectError(t: Test, stack: Stack, out: Outcome, status: number, code: string, error: string | RegExp): Promise<void> {
  t.equal(out.status, status)
  const body = JSON.parse(out.text)
  t.equal(body.error.code, code)
  t.match(body.x_svc_trace.attempts, [{ provider: P, error }])
  t.equal(body.x_svc_trace.attempts.length, 1)
  t.equal(body.x_svc_trace.billing.total_cost, '0')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
}

/** A stream that broke after its first byte: 200, then events, the last one an error event, no [DONE]. */
function expectBrokenStream(t: Test, out: Outcome, code: string, error: string | RegExp): void {
  t.equal(out.status, 200)
  t.match(out.type, /^text\/event-stream/)
  const events = out.text.split('\n\n').filter((e) => e.length > 0)
  t.notOk(events.includes('data: [DONE]'), 'no [DONE] after a broken stream')
  const last = JSON.parse(events.at(-1)!.slice('data: '.length))
  t.equal(last.error.code, code)
  t.match(last.x_svc_trace.attempts, [{ provider: P, status: 200, error }])
}

t.test('refused: 502 provider_error, connection_refused', async (t) => {
  const stack = await alone(t, { url: `http://127.0.0.1:${await closedPort()}` })
  await expectError(t, stack, await post(stack, true), 502, 'provider_error', 'connection_refused')
})

t.test('reset before headers: 502 provider_error', async (t) => {
  const stack = await alone(t, { sim: { fault: 'reset-before-headers' } })
  await expectError(t, stack, await post(stack, true), 502, 'provider_error', /^connection_(reset|closed)$/)
})

t.test('500: 502 provider_error, http_500', async (t) => {
  const stack = await alone(t, { sim: { fault: 'status-500' } })
  await expectError(t, stack, await post(stack, false), 502, 'provider_error', 'http_500')
})

t.test('429: 429 provider_rate_limited with Retry-After', async (t) => {
  const stack = await alone(t, { sim: { fault: 'status-429' } })
  const out = await post(stack, false)
  await expectError(t, stack, out, 429, 'provider_rate_limited', 'http_429')
})

t.test('slow headers past headers_timeout: 504 provider_timeout, headers_timeout', async (t) => {
  // Cut at 300 ms; the provider would answer at 8 s: any time under 6 s is the router's limit, not its pace.
  const stack = await alone(t, { sim: { fault: 'slow-headers', slowHeadersMs: 8000 } }, { upstream: { ...LIMITS.upstream, headers_timeout_ms: 300 } })
  const out = await post(stack, true)
  await expectError(t, stack, out, 504, 'provider_timeout', 'headers_timeout')
  t.ok(out.ms < 6000, `answered at the router's limit, not the provider's pace (${Math.round(out.ms)} ms)`)
})

t.test('stall mid-stream past body_timeout: SSE error event provider_timeout, body_timeout', async (t) => {
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-chat","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}\n\n')
    // …and nothing more, the connection held open.
  })
  const stack = await alone(t, { url }, { upstream: { ...LIMITS.upstream, body_timeout_ms: 300 } })
  expectBrokenStream(t, await post(stack, true), 'provider_timeout', 'body_timeout')
})

t.test('reset mid-stream: SSE error event provider_error', async (t) => {
  const stack = await alone(t, { sim: { fault: 'reset-mid-stream', faultAfterChunks: 2 } })
  expectBrokenStream(t, await post(stack, true), 'provider_error', /^connection_(reset|closed)$/)
})

t.test('malformed SSE: a payload that is not a JSON object is never relayed, and breaks the stream: an error event, no [DONE]', async (t) => {
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end('data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: not json at all\n\ndata: [DONE]\n\n')
  })
  const stack = await alone(t, { url })
  const out = await post(stack, true)
  expectBrokenStream(t, out, 'provider_error', 'stream_error')
  t.match(out.text, /"content":"Hi"/, 'the chunk before it was relayed')
  t.notMatch(out.text, /not json at all/, 'the payload that is not JSON was not')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})

t.test('a stream whose body ends cleanly before [DONE] or any finish_reason is cut short: an error event, no [DONE]', async (t) => {
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end('data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n')
  })
  const stack = await alone(t, { url })
  const out = await post(stack, true)
  expectBrokenStream(t, out, 'provider_error', 'incomplete_stream')
  t.match(out.text, /"content":"Hi"/, 'what arrived was relayed')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})

t.test('invalid JSON: 502 provider_error, invalid_json', async (t) => {
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"id":"chatcmpl-1","choices":[{"mess')
  })
  const stack = await alone(t, { url })
  await expectError(t, stack, await post(stack, false), 502, 'provider_error', 'invalid_json')
})

t.test('HTML: 502 provider_error, unexpected_content_type', async (t) => {
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' })
    res.end('<html><body>gateway</body></html>')
  })
  const stack = await alone(t, { url })
  await expectError(t, stack, await post(stack, true), 502, 'provider_error', 'unexpected_content_type')
})

t.test('total_timeout before the first byte: 504 provider_timeout, total_timeout', async (t) => {
  // Cut at 300 ms; the provider would answer at 8 s.
  const stack = await alone(t, { sim: { fault: 'slow-headers', slowHeadersMs: 8000 } }, { upstream: { total_timeout_ms: 300 } })
  const out = await post(stack, false)
  await expectError(t, stack, out, 504, 'provider_timeout', 'total_timeout')
  t.ok(out.ms < 6000, `cut at the total limit (${Math.round(out.ms)} ms)`)
})

t.test('total_timeout mid-stream: SSE error event provider_timeout, total_timeout', async (t) => {
  // A steady stream (no idle gap past body_timeout) of 8 s, cut at 1 s: the first bytes are well inside the
  // limit even on a slow machine, and any time under 6 s is the limit, not the stream's end.
  const stack = await alone(t, { sim: { tokensPerS: 10, completionTokens: 80 } }, { upstream: { total_timeout_ms: 1000 } })
  const out = await post(stack, true, 80)
  expectBrokenStream(t, out, 'provider_timeout', 'total_timeout')
  t.ok(out.ms < 6000, `cut at the total limit (${Math.round(out.ms)} ms)`)
})
