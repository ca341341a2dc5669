/**
 * Tracing (issue #13 §6): the client's W3C traceparent / tracestate reach the provider on every attempt (a
 * malformed one is ignored, never an error); with an OTLP endpoint, the router exports a span per request,
 * child of the client's, with a span per attempt under it whose id is the one the provider got.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { parseTraceparent, parseTracestate } from '../../src/telemetry/trace-context.js'
import { completionJson } from '../helpers/fake-provider.js'
import { addr, startStack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const A = addr('a')
const B = addr('b')
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const CLIENT_SPAN = '00f067aa0ba902b7'
const TRACEPARENT = `00-${TRACE_ID}-${CLIENT_SPAN}-01`
const TRACESTATE = 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7'

interface Teardown {
  teardown(fn: () => unknown): void
}

async function listenOn(t: Teardown, handler: (req: IncomingMessage, body: Buffer, res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (b: Buffer) => parts.push(b))
    req.on('end', () => handler(req, Buffer.concat(parts), res))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const ANSWER = completionJson('chatcmpl-traced', MODEL)

/** A provider that records the headers of every completion request and answers `status`. */
async function provider(t: Teardown, status: number): Promise<{ url: string; seen: IncomingHttpHeaders[] }> {
  const seen: IncomingHttpHeaders[] = []
  const url = await listenOn(t, (req, _body, res) => {
    seen.push(req.headers)
    if (status === 200) res.writeHead(200, { 'content-type': 'application/json' }).end(ANSWER)
    else res.writeHead(status, { 'content-type': 'application/json' }).end('{"error":{"message":"down"}}')
  })
  return { url, seen }
}

interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes: { key: string; value: Record<string, unknown> }[]
}

function attrs(span: OtlpSpan): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const a of span.attributes) {
    const v = a.value
    out[a.key] = v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue))
  }
  return out
}

const chatBody = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })

t.test('traceparent validation: a malformed header is ignored', async (t) => {
  t.equal(parseTraceparent(TRACEPARENT), TRACEPARENT)
  t.equal(parseTraceparent(''), '')
  t.equal(parseTraceparent(TRACEPARENT.toUpperCase()), '', 'upper-case hex')
  t.equal(parseTraceparent(`00-${'0'.repeat(32)}-${CLIENT_SPAN}-01`), '', 'all-zero trace id')
  t.equal(parseTraceparent(`00-${TRACE_ID}-${'0'.repeat(16)}-01`), '', 'all-zero parent id')
  t.equal(parseTraceparent(`ff-${TRACE_ID}-${CLIENT_SPAN}-01`), '', 'version ff')
  t.equal(parseTraceparent(TRACEPARENT + '-x'), '', 'version 00 with extra fields')
  t.equal(parseTraceparent(`01-${TRACE_ID}-${CLIENT_SPAN}-01-later`), TRACEPARENT, 'a later version is read as 00')
  t.equal(parseTraceparent(`00_${TRACE_ID}-${CLIENT_SPAN}-01`), '', 'wrong separator')
  t.equal(parseTracestate(TRACESTATE), TRACESTATE)
  t.equal(parseTracestate('a=\u0001'), '', 'control character')
  t.equal(parseTracestate('a=b,'.repeat(200)), '', 'longer than 512')
})

t.test('without tracing: the client trace context reaches the provider on every attempt; a malformed one is dropped', async (t) => {
  const a = await provider(t, 500)
  const b = await provider(t, 200)
  const stack = await startStack(
    t,
    [
      { address: A, url: a.url, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }] },
      { address: B, url: b.url, models: [{ id: MODEL, price: { prompt: 0.5, completion: 1 } }] },
    ],
    { routing: { failure_threshold: 100 }, health: { probes: false } },
  )
  const post = (headers: Record<string, string>) =>
    request(stack.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', ...stack.auth, ...headers },
      body: chatBody,
    })
  const res = await post({ traceparent: TRACEPARENT, tracestate: TRACESTATE })
  t.equal(res.statusCode, 200)
  await res.body.text()
  t.equal(a.seen[0]!.traceparent, TRACEPARENT, 'the first attempt carries it')
  t.equal(a.seen[0]!.tracestate, TRACESTATE)
  t.equal(b.seen[0]!.traceparent, TRACEPARENT, 'and the failover attempt too')
  t.equal(b.seen[0]!.tracestate, TRACESTATE)

  const bad = await post({ traceparent: `00-${TRACE_ID.toUpperCase()}-${CLIENT_SPAN}-01`, tracestate: TRACESTATE })
  t.equal(bad.statusCode, 200, 'a malformed traceparent is not an error')
  await bad.body.text()
  t.equal(b.seen[1]!.traceparent, undefined, 'and is not passed on')
  t.equal(b.seen[1]!.tracestate, undefined, 'nor is the tracestate that came with it')

  const none = await post({})
  await none.body.text()
  t.equal(b.seen[2]!.traceparent, undefined, 'no trace context: none is invented')

  // tracestate split over two fields is one list (W3C Trace Context §3.3.1: combined as HTTP lists are).
  const split = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: ['content-type', 'application/json', 'x-svc-provider-sort', 'price', ...Object.entries(stack.auth).flat(), 'traceparent', TRACEPARENT, 'tracestate', 'congo=t61rcWkgMzE', 'tracestate', 'rojo=00f067aa0ba902b7'],
    body: chatBody,
  })
  await split.body.text()
  t.equal(b.seen[3]!.tracestate, 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7', 'both fields are passed on, in order')
})

t.test('with an OTLP endpoint: a request span under the client span, an attempt span per try, exported to the collector', async (t) => {
  const batches: { resourceSpans: { resource: OtlpSpan; scopeSpans: { spans: OtlpSpan[] }[] }[] }[] = []
  let contentType = ''
  const collector = await listenOn(t, (req, body, res) => {
    contentType = String(req.headers['content-type'])
    if (req.url === '/v1/traces') batches.push(JSON.parse(body.toString('utf8')))
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  })
  const a = await provider(t, 500)
  const b = await provider(t, 200)
  const stack = await startStack(
    t,
    [
      { address: A, url: a.url, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }] },
      { address: B, url: b.url, models: [{ id: MODEL, price: { prompt: 0.5, completion: 1 } }] },
    ],
    {
      routing: { failure_threshold: 100 },
      health: { probes: false },
      tracing: { otlp_endpoint: collector + '/v1/traces', service_name: 'router-under-test' },
    },
  )
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', traceparent: TRACEPARENT, tracestate: TRACESTATE, ...stack.auth },
    body: chatBody,
  })
  t.equal(res.statusCode, 200)
  await res.body.text()
  const requestId = String(res.headers['x-request-id'])
  const refused = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', traceparent: TRACEPARENT, authorization: 'Bearer sk-not-a-key' },
    body: chatBody,
  })
  t.equal(refused.statusCode, 401)
  await refused.body.text()
  const refusedId = String(refused.headers['x-request-id'])

  // Closing the router flushes the batch exporter.
  await stack.router.close()
  t.match(contentType, /^application\/json/)
  const resource = batches[0]!.resourceSpans[0]!.resource as unknown as OtlpSpan
  t.equal(attrs(resource)['service.name'], 'router-under-test')
  const spans = batches.flatMap((batch) => batch.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)))
  const root = spans.find((s) => attrs(s)['svc.request_id'] === requestId)!
  t.ok(root, 'a span for the request')
  t.equal(root.traceId, TRACE_ID, "in the client's trace")
  t.equal(root.parentSpanId, CLIENT_SPAN, "under the client's span")
  t.equal(root.kind, 2, 'SERVER')
  t.match(attrs(root), {
    'svc.surface': 'chat',
    'svc.model': MODEL,
    'svc.provider': B,
    'http.response.status_code': 200,
    'svc.attempts': 2,
    'svc.cost_usd': /^0\.\d+$/,
  })
  const tries = spans.filter((s) => s.parentSpanId === root.spanId)
  t.equal(tries.length, 2, 'one child span per attempt')
  const [first, second] = [tries.find((s) => attrs(s)['svc.provider'] === A)!, tries.find((s) => attrs(s)['svc.provider'] === B)!]
  t.ok(first && second)
  t.equal(first.traceId, TRACE_ID)
  t.equal(first.kind, 3, 'CLIENT')
  t.match(attrs(first), { 'http.response.status_code': 500, 'svc.error': 'http_500' })
  t.match(attrs(second), { 'http.response.status_code': 200, 'svc.ttfb_ms': Number })
  t.equal(a.seen[0]!.traceparent, `00-${TRACE_ID}-${first.spanId}-01`, "the provider got the attempt span's id")
  t.equal(b.seen[0]!.traceparent, `00-${TRACE_ID}-${second.spanId}-01`)
  t.equal(b.seen[0]!.tracestate, TRACESTATE, "the client's tracestate is kept")

  const refusedSpan = spans.find((s) => attrs(s)['svc.request_id'] === refusedId)!
  t.ok(refusedSpan, 'a request refused before routing has its span too')
  t.equal(refusedSpan.parentSpanId, CLIENT_SPAN)
  t.match(attrs(refusedSpan), { 'http.response.status_code': 401, 'svc.attempts': 0 })
})
