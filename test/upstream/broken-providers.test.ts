/**
 * Providers that answer nonsense, through the real router: a stream request answered with HTML or with
 * truncated JSON is a provider failure before the first byte (failover, or 502 with nothing billed), never a
 * relayed "stream"; a last candidate's 429 reaches the client as 429 provider_rate_limited with its Retry-After;
 * streams written the way real providers write them (Python's json.dumps spacing, `data:[DONE]`, CRLF split
 * across TCP chunks) keep their SVC-Res-Key, their trace and a single [DONE].
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack } from '../helpers/stack.js'
import { retryAfterSeconds } from '../../src/upstream/failover.js'

const MODEL = 'm-chat'
const BAD = addr('b')
const GOOD = addr('c')
const CHEAP = { prompt: 0.1, completion: 0.2 }
const DEAR = { prompt: 0.5, completion: 1.5 }
const PRICE_SORT = { 'x-svc-provider-sort': 'price' }

type Respond = (req: IncomingMessage, res: ServerResponse, body: string) => void

/** A provider played by a small http server; returns its base URL. */
async function fakeProvider(t: Test, respond: Respond): Promise<string> {
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => respond(req, res, body))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** The fake (cheapest, tried first under sort=price) and, unless `alone`, a real simulator behind it. */
async function stackWith(t: Test, respond: Respond, alone = false): Promise<Stack> {
  const url = await fakeProvider(t, respond)
  const providers = [{ address: BAD, url, models: [{ id: MODEL, price: CHEAP }] }]
  if (!alone) providers.push({ address: GOOD, models: [{ id: MODEL, price: DEAR }] } as never)
  return startStack(t, providers)
}

async function post(stack: Stack, body: object) {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, ...PRICE_SORT },
    body: JSON.stringify(body),
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  })
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() }
}

async function charges(stack: Stack): Promise<number> {
  const journal = await stack.router.store.ledger.journal(stack.account)
  return journal.filter((e) => e.kind === 'charge').length
}

const STREAM = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 3 }

const NOT_A_STREAM: [string, Respond][] = [
  [
    'an HTML page',
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' })
      res.end('<html><body>Bad gateway, but 200</body></html>')
    },
  ],
  [
    'truncated JSON',
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"id":"chatcmpl-FAKE","choices":[{"mess')
    },
  ],
]

for (const [what, respond] of NOT_A_STREAM) {
  t.test(`a stream request answered 200 with ${what} fails over to the next provider`, async (t) => {
    const stack = await stackWith(t, respond)
    const res = await post(stack, STREAM)
    t.equal(res.status, 200)
    t.match(String(res.headers['content-type']), /^text\/event-stream/)
    const events = res.text.split('\n\n').filter((e) => e.length > 0)
    t.equal(events.at(-1), 'data: [DONE]')
    const trace = JSON.parse(events.at(-2)!.slice('data: '.length)).x_svc_trace
    t.equal(trace.provider, GOOD, 'served by the provider that answered with a stream')
    t.same(trace.attempts, [
      { provider: BAD, status: 200, error: 'unexpected_content_type' },
      { provider: GOOD, status: 200 },
    ])
    t.notMatch(res.text, /<html>|chatcmpl-FAKE/, 'nothing of the bad answer reached the client')
    t.equal(await charges(stack), 1, 'billed once, for the real stream')
  })

  t.test(`a stream request answered 200 with ${what} and no other provider is a 502, nothing billed`, async (t) => {
    const stack = await stackWith(t, respond, true)
    const res = await post(stack, STREAM)
    t.equal(res.status, 502)
    const body = JSON.parse(res.text)
    t.equal(body.error.code, 'provider_error')
    t.ok(body.request_id)
    t.same(body.x_svc_trace.attempts, [{ provider: BAD, status: 200, error: 'unexpected_content_type' }])
    t.equal(body.x_svc_trace.billing.total_cost, '0')
    t.equal(await charges(stack), 0, 'nothing billed')
    t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
  })
}

t.test("a last candidate's 429 becomes 429 provider_rate_limited with its Retry-After", async (t) => {
  const stack = await stackWith(
    t,
    (_req, res) => {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '7' })
      res.end('{"error":{"message":"slow down"}}')
    },
    true,
  )
  const res = await post(stack, { ...STREAM, stream: false })
  t.equal(res.status, 429)
  t.equal(res.headers['retry-after'], '7')
  const body = JSON.parse(res.text)
  t.equal(body.error.code, 'provider_rate_limited')
  t.equal(body.error.type, 'rate_limit_error')
  t.same(body.x_svc_trace.attempts, [{ provider: BAD, status: 429, error: 'http_429' }])
  t.equal(await charges(stack), 0)
})

t.test('a 429 with an HTTP-date Retry-After is passed on in seconds; none at all gives 1', async (t) => {
  let retryAfter: string | null = new Date(Date.now() + 30_000).toUTCString()
  const stack = await stackWith(
    t,
    (_req, res) => {
      res.writeHead(429, retryAfter === null ? {} : { 'retry-after': retryAfter })
      res.end()
    },
    true,
  )
  const dated = await post(stack, { ...STREAM, stream: false })
  t.equal(dated.status, 429)
  const seconds = Number(dated.headers['retry-after'])
  t.ok(seconds >= 28 && seconds <= 31, `about 30 s, got ${seconds}`)
  retryAfter = null
  const bare = await post(stack, { ...STREAM, stream: false })
  t.equal(bare.status, 429)
  t.equal(bare.headers['retry-after'], '1')
  // Not delta-seconds and not an HTTP-date: no advice (Date.parse would read each as a date long past: 0).
  for (const junk of ['-5', '1.5', '120, 5', 'abc', 'soon x-injected: 1', 'Sunday, whenever']) {
    retryAfter = junk
    const out = await post(stack, { ...STREAM, stream: false })
    t.equal(out.headers['retry-after'], '1', `${JSON.stringify(junk)} gives 1`)
  }
  retryAfter = new Date(Date.UTC(2099, 0, 1)).toUTCString()
  t.equal((await post(stack, { ...STREAM, stream: false })).headers['retry-after'], '86400', 'a date decades ahead: a day at most')
  retryAfter = '99999999'
  t.equal((await post(stack, { ...STREAM, stream: false })).headers['retry-after'], '86400', 'delta-seconds: a day at most')
  retryAfter = '99999999999'
  t.equal((await post(stack, { ...STREAM, stream: false })).headers['retry-after'], '86400', 'delta-seconds of 11 digits: a day too')
})

t.test('Retry-After values: delta-seconds, the three HTTP-date forms, and what is neither', async (t) => {
  const now = Date.UTC(2026, 10, 27, 8, 0, 0)
  t.equal(retryAfterSeconds(' 42 ', now), '42')
  t.equal(retryAfterSeconds('0', now), '0')
  t.equal(retryAfterSeconds('000000000000120', now), '86400', 'any number of digits is delta-seconds')
  t.equal(retryAfterSeconds('Fri, 27 Nov 2026 08:00:30 GMT', now), '30', 'IMF-fixdate')
  t.equal(retryAfterSeconds('Friday, 27-Nov-26 08:01:00 GMT', now), '60', 'RFC 850')
  t.equal(retryAfterSeconds('Fri Nov 27 08:02:00 2026', now), '120', 'asctime')
  t.equal(retryAfterSeconds('Fri, 27 Nov 2026 07:00:00 GMT', now), '0', 'a date past: retry now')
  for (const junk of ['', 'soon', 'soon x-injected: 1', 'Sun', 'Sunday', 'sun, 27 Nov 2026 08:00:30 GMT', 'Mon 12:00', '1e3', '+5', '0x10']) {
    t.equal(retryAfterSeconds(junk, now), '1', `${JSON.stringify(junk)}: no advice`)
  }
})

t.test('a 429 followed by a 5xx on the last candidate is a 502, not a 429', async (t) => {
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(429, { 'retry-after': '3' })
    res.end()
  })
  const down = await fakeProvider(t, (_req, res) => {
    res.writeHead(503)
    res.end()
  })
  const stack = await startStack(t, [
    { address: BAD, url, models: [{ id: MODEL, price: CHEAP }] },
    { address: GOOD, url: down, models: [{ id: MODEL, price: DEAR }] },
  ])
  const res = await post(stack, { ...STREAM, stream: false })
  t.equal(res.status, 502)
  t.equal(JSON.parse(res.text).error.code, 'provider_error')
})

/** Writes `parts` as separate TCP writes, a little apart, so the router sees them as separate chunks. */
function streamParts(parts: string[], gapMs = 15): Respond {
  return (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    let i = 0
    const next = (): void => {
      if (i === parts.length) return void res.end()
      res.write(parts[i++]!)
      setTimeout(next, gapMs)
    }
    next()
  }
}

const ID = 'chatcmpl-py123'
function pyChunk(content: string, finish: string | null = null): string {
  // Python's json.dumps spacing: ", " and ": "
  const delta = finish === null ? `{"content": ${JSON.stringify(content)}}` : '{}'
  return `{"id": "${ID}", "object": "chat.completion.chunk", "created": 1, "model": "${MODEL}", "choices": [{"index": 0, "delta": ${delta}, "finish_reason": ${finish === null ? 'null' : `"${finish}"`}}]}`
}
const PY_USAGE = `{"id": "${ID}", "object": "chat.completion.chunk", "created": 1, "model": "${MODEL}", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}`

/** Reads the raw stream and checks what every real client relies on. */
async function checkStream(t: Test, stack: Stack, expectText: string): Promise<void> {
  const res = await post(stack, STREAM)
  t.equal(res.status, 200)
  t.equal(res.headers['svc-res-key'], ID, 'SVC-Res-Key is the top-level id')
  const done = res.text.match(/data: ?\[DONE\]/g) ?? []
  t.equal(done.length, 1, 'exactly one [DONE]')
  t.match(res.text, /data: \[DONE\]\s*$/, '[DONE] is last')
  const traceLine = res.text.split(/\r?\n/).find((l) => l.includes('x_svc_trace'))!
  const trace = JSON.parse(traceLine.replace(/^data: ?/, ''))
  t.equal(trace.id, ID, 'the trace chunk carries the chat id')
  t.same(trace.x_svc_trace.usage, { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }, 'usage read from the provider')

  // And the way SDK users see it: the openai client gets the content and the trace before the stream ends.
  const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
  const stream = await client.chat.completions.create({ ...STREAM, stream: true } as never, { headers: PRICE_SORT })
  let text = ''
  let sawTrace = false
  for await (const chunk of stream as unknown as AsyncIterable<{ choices: { delta?: { content?: string } }[]; x_svc_trace?: unknown }>) {
    text += chunk.choices[0]?.delta?.content ?? ''
    if (chunk.x_svc_trace !== undefined) sawTrace = true
  }
  t.equal(text, expectText)
  t.ok(sawTrace, 'the openai client saw the trace chunk')
}

t.test('a provider writing "id": with a space (json.dumps) keeps SVC-Res-Key and the trace id', async (t) => {
  const events = [pyChunk('Hel'), pyChunk('lo'), pyChunk('', 'stop'), PY_USAGE].map((e) => `data: ${e}\n\n`)
  const stack = await stackWith(t, streamParts([...events, 'data: [DONE]\n\n']), true)
  await checkStream(t, stack, 'Hello')
})

t.test('a provider ending with data:[DONE] (no space) gets one [DONE], after the trace', async (t) => {
  const events = [pyChunk('Hel'), pyChunk('lo'), pyChunk('', 'stop'), PY_USAGE].map((e) => `data:${e}\n\n`)
  const stack = await stackWith(t, streamParts([...events, 'data:[DONE]\n\n']), true)
  await checkStream(t, stack, 'Hello')
})

t.test('a CRLF provider whose first TCP chunk is a fragment is relayed as it goes, with one [DONE]', async (t) => {
  const whole = [pyChunk('Hel'), pyChunk('lo'), pyChunk('', 'stop'), PY_USAGE].map((e) => `data: ${e}\r\n\r\n`).join('') + 'data: [DONE]\r\n\r\n'
  // First write: a fragment with no separator at all; then the rest in uneven pieces.
  const parts = [whole.slice(0, 17), whole.slice(17, 200), whole.slice(200, 420), whole.slice(420)]
  const stack = await stackWith(t, streamParts(parts), true)
  await checkStream(t, stack, 'Hello')
})

t.test('a CRLF stream is relayed event by event, not held until the end', async (t) => {
  const head = `data: ${pyChunk('Hel')}\r\n\r\n`
  const url = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(head.slice(0, 10))
    setTimeout(() => res.write(head.slice(10)), 20)
    // The rest comes much later: the first event must reach the client before it.
    setTimeout(() => res.end(`data: ${pyChunk('', 'stop')}\r\n\r\ndata: ${PY_USAGE}\r\n\r\ndata: [DONE]\r\n\r\n`), 2000)
  })
  const stack = await startStack(t, [{ address: BAD, url, models: [{ id: MODEL, price: CHEAP }] }])
  const started = performance.now()
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify(STREAM),
  })
  let firstAt = 0
  let text = ''
  for await (const chunk of res.body) {
    if (firstAt === 0) firstAt = performance.now() - started
    text += chunk.toString()
  }
  // The provider ends at 2 s: a first event well before that was relayed as it came, not held to the end.
  t.ok(firstAt < 1500, `the first event arrived before the provider's end (after ${firstAt.toFixed(0)} ms)`)
  t.equal((text.match(/\[DONE\]/g) ?? []).length, 1)
})

t.test('usage counts that are not whole non-negative numbers are estimated, never billed as zero', async (t) => {
  const stack = await stackWith(
    t,
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        JSON.stringify({
          id: 'chatcmpl-neg',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: 'four words of text' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: -5, completion_tokens: 1.5, total_tokens: 0 },
        }),
      )
    },
    true,
  )
  const res = await post(stack, { ...STREAM, stream: false })
  t.equal(res.status, 200)
  const trace = JSON.parse(res.text).x_svc_trace
  t.equal(trace.usage.estimated, true)
  t.ok(trace.usage.prompt_tokens > 0 && trace.usage.completion_tokens > 0)
  t.not(trace.billing.total_cost, '0')
})

t.test('a stream event that never ends is cut at the bound as a provider failure, not held without limit', async (t) => {
  let sent = 0
  const stack = await stackWith(
    t,
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      const filler = Buffer.alloc(1024 * 1024, 0x61)
      res.write('data: {"id":"chatcmpl-x","choices":[{"delta":{"content":"')
      const more = (): void => {
        while (sent < 40) {
          sent++
          if (!res.write(filler)) return void res.once('drain', more)
        }
        res.end()
      }
      more()
    },
  )
  const res = await post(stack, STREAM)
  // Cut a few socket buffers past MAX_STREAM_EVENT (8 MiB), far before the 40 MiB the provider had to send.
  t.ok(sent > 8 && sent < 24, `cut after ${sent} MiB`)
  // Nothing of it reached the client (no event ever completed), so the next provider served the request.
  t.equal(res.status, 200)
  const traceLine = res.text.split('\n').find((l) => l.includes('x_svc_trace'))!
  const trace = JSON.parse(traceLine.slice('data: '.length)).x_svc_trace
  t.same(trace.attempts, [
    { provider: BAD, status: 200, error: 'response_too_large' },
    { provider: GOOD, status: 200 },
  ])
})

t.test('a provider id that could break the response head is never sent as SVC-Res-Key', async (t) => {
  const stack = await stackWith(
    t,
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        JSON.stringify({
          id: 'chatcmpl-1\r\nX-Injected: yes',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
        }),
      )
    },
    true,
  )
  const res = await post(stack, { ...STREAM, stream: false })
  t.equal(res.status, 200)
  t.equal(res.headers['x-injected'], undefined, 'no header of the provider made it into the response head')
  t.equal(res.headers['svc-res-key'], undefined)
  t.equal(JSON.parse(res.text).id, 'chatcmpl-1\r\nX-Injected: yes', 'the body is relayed as the provider sent it')
})

t.test("a provider's 401, 402, 403 or 407 judges the router's standing there: failover, then 502, never the client's auth error", async (t) => {
  for (const status of [401, 402, 403, 407]) {
    const reject: Respond = (_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: 'provider key bad', type: 'invalid_request_error' } }))
    }
    const stack = await stackWith(t, reject)
    const served = await post(stack, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })
    t.equal(served.status, 200, `${status}: the next provider served it`)
    t.same(JSON.parse(served.text).x_svc_trace.attempts, [
      { provider: BAD, status, error: `http_${status}` },
      { provider: GOOD, status: 200 },
    ])
    const alone = await stackWith(t, reject, true)
    const sdk = new OpenAI({ baseURL: alone.url + '/v1', apiKey: alone.key, maxRetries: 0 })
    const err = await sdk.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }).then(
      () => null,
      (e: unknown) => e,
    )
    t.ok(err instanceof OpenAI.APIError && !(err instanceof OpenAI.AuthenticationError) && !(err instanceof OpenAI.PermissionDeniedError), `${status}: not an auth error for the client`)
    t.equal((err as InstanceType<typeof OpenAI.APIError>).status, 502)
    t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'provider_error')
    t.equal(await charges(alone), 0, 'nothing billed')
  }
})

t.test('a stream of events that are not JSON (then [DONE]) is a provider failure, none of it relayed or billed', async (t) => {
  const garbage: Respond = (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end('data: {not json\n\ndata: \u0000\u0001garbage\n\ndata: [1,2]\n\ndata: [DONE]\n\n')
  }
  const served = await post(await stackWith(t, garbage), STREAM)
  t.equal(served.status, 200)
  t.notMatch(served.text, /not json|garbage|\[1,2\]/, 'nothing of it reached the client')
  const events = served.text.split('\n\n').filter((e) => e.length > 0)
  t.same(JSON.parse(events.at(-2)!.slice('data: '.length)).x_svc_trace.attempts, [
    { provider: BAD, status: 200, error: 'stream_error' },
    { provider: GOOD, status: 200 },
  ])
  const alone = await stackWith(t, garbage, true)
  const res = await post(alone, STREAM)
  t.equal(res.status, 502)
  t.equal(JSON.parse(res.text).error.code, 'provider_error')
  t.equal(await charges(alone), 0, 'nothing billed')
  t.equal(alone.router.ledger.reserved(alone.account), 0n)
})

t.test('a JSON answer that is not UTF-8 is a provider failure, never relayed', async (t) => {
  const latin1: Respond = (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    const text = '{"id":"chatcmpl-l","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"caf\u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
    res.end(Buffer.from(text, 'latin1'))
  }
  const alone = await stackWith(t, latin1, true)
  const res = await post(alone, { ...STREAM, stream: false })
  t.equal(res.status, 502)
  t.same(JSON.parse(res.text).x_svc_trace.attempts, [{ provider: BAD, status: 200, error: 'invalid_json' }])
  t.equal(await charges(alone), 0, 'nothing billed')
})

t.test('a provider error body nested deeper than JSON.stringify goes, with its own request_id: our envelope, the router unharmed', async (t) => {
  const depth = 5_000
  const deep = '{"error":{"message":"bad input","type":"invalid_request_error"},"request_id":"theirs","z":' + '['.repeat(depth) + ']'.repeat(depth) + '}'
  const stack = await stackWith(
    t,
    (_req, res) => {
      res.writeHead(400, { 'content-type': 'application/json' })
      res.end(deep)
    },
    true,
  )
  const res = await post(stack, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })
  t.equal(res.status, 400, "the provider's status")
  const body = JSON.parse(res.text)
  t.equal(body.request_id, res.headers['x-request-id'], "the router's request id, never the provider's")
  t.type(body.error.message, 'string')
  t.equal(await charges(stack), 0, 'nothing billed')
  const again = await post(stack, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })
  t.equal(again.status, 400, 'the next request is answered the same way')
})

t.test("a provider's 201 or 203 with a whole answer is the router's 200: a success has one status", async (t) => {
  for (const status of [201, 203]) {
    const stack = await stackWith(
      t,
      (_req, res) => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion', created: 1, model: MODEL, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }))
      },
      true,
    )
    const res = await post(stack, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })
    t.equal(res.status, 200, `${status}: answered 200`)
    t.equal(JSON.parse(res.text).choices[0].message.content, 'ok')
    t.equal(await charges(stack), 1, `${status}: billed once`)
  }
})
