/**
 * Bad input, however hostile, gets an enveloped 4xx with a request_id, and the process and every other request
 * carry on. The router runs as its own process for the crash test: a request that killed it would show as a
 * refused connection on the next one.
 */
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'
import { spawnRouter } from '../helpers/spawn-router.js'

const MODEL = 'm-chat'
const HELLO = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }

async function postRaw(url: string, key: string, body: string | Buffer, headers: Record<string, string> = {}) {
  const res = await request(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body,
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, text }
}

/** `[[[…]]]` nested `depth` deep. */
function nested(depth: number): string {
  return '['.repeat(depth) + ']'.repeat(depth)
}

t.test('no request can end the process: deeply nested bodies get a 400 and the next request succeeds', async (t) => {
  const router = await spawnRouter(t, [
    {
      address: addr('a'),
      url: 'http://127.0.0.1:19931',
      models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.3 } }],
      simulate: { ttft_ms: 1, tokens_per_s: 1000 },
    },
  ])
  const deep = nested(5000)
  const hostile = [
    `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"x":${deep},"provider":{}}`,
    `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"x":${deep},"stream":true,"stream_options":{}}`,
    `{"model":"${MODEL}","messages":[{"role":"user","content":${deep}}]}`,
  ]
  for (const body of hostile) {
    t.ok(Buffer.byteLength(body) < 12_000, 'about 10 KB of body')
    const res = await postRaw(router.url, router.key, body)
    t.equal(res.status, 400)
    const parsed = JSON.parse(res.text)
    t.equal(parsed.error.code, 'invalid_request')
    t.match(parsed.error.message, /deeper than 128/)
    t.match(parsed.request_id, /^req_/)
  }
  const ok = await postRaw(router.url, router.key, JSON.stringify(HELLO))
  t.equal(ok.status, 200, 'the process is alive and serves the next request')
  t.equal(router.child.exitCode, null)
})

t.test('bad bodies each get an enveloped 4xx with a request_id, and a good request still succeeds', async (t) => {
  const stack: Stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }])
  const cases: [string, string | Buffer, number, RegExp][] = [
    ['nesting just past the limit', `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"x":${nested(128)}}`, 400, /deeper than 128/],
    ['not UTF-8', Buffer.concat([Buffer.from(`{"model":"${MODEL}","messages":[{"role":"user","content":"`), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]), 400, /UTF-8/],
    ['a duplicate top-level key', `{"model":"other","model":"${MODEL}","messages":[{"role":"user","content":"hi"}]}`, 400, /"model" twice/],
    ['a duplicate key spelled with an escape', `{"model":"${MODEL}","\\u006dodel":"x","messages":[{"role":"user","content":"hi"}]}`, 400, /"model" twice/],
    ['a duplicate nested key', `{"model":"${MODEL}","messages":[{"role":"user","content":"a","content":"b"}]}`, 400, /"content" twice/],
    ['a __proto__ key', `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"__proto__":{"stream":true}}`, 400, /__proto__/],
    ['a nested __proto__ key', `{"model":"${MODEL}","messages":[{"role":"user","content":"hi","__proto__":{}}]}`, 400, /__proto__/],
    ['a wrong type for model', `{"model":42,"messages":[{"role":"user","content":"hi"}]}`, 400, /model/],
    ['a wrong type for stream', `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, 400, /stream/],
    ['a wrong type for max_tokens', `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"max_tokens":"9"}`, 400, /max_tokens/],
    ['a wrong type for provider', `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"provider":[1]}`, 400, /provider/],
    ['a huge array of messages', `{"model":"${MODEL}","messages":[${'0,'.repeat(500_000)}0]}`, 400, /messages\[0\]/],
    ['an array body', '[1,2,3]', 400, /JSON object/],
    ['not JSON', '{"model":', 400, /not valid JSON/],
    ['a body over the size limit', `{"model":"${MODEL}","messages":[{"role":"user","content":"${'x'.repeat(10 * 1024 * 1024)}"}]}`, 413, /exceeds/],
  ]
  for (const [what, body, status, message] of cases) {
    const res = await postRaw(stack.url, stack.key, body)
    t.equal(res.status, status, what)
    const parsed = JSON.parse(res.text)
    t.match(parsed.error.message, message, what)
    t.match(parsed.request_id, /^req_/, `${what}: request_id`)
    t.equal(res.headers['x-request-id'], parsed.request_id, `${what}: x-request-id`)
  }
  const ok = await postRaw(stack.url, stack.key, JSON.stringify(HELLO))
  t.equal(ok.status, 200)
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation was left behind')
})

t.test('a body with many keys in one object is checked for duplicates in linear time', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }])
  const keys = Array.from({ length: 200_000 }, (_, i) => `"k${i}":0`).join(',')
  const started = performance.now()
  const res = await postRaw(stack.url, stack.key, `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"metadata":{${keys},"k7":1}}`)
  t.equal(res.status, 400)
  t.match(JSON.parse(res.text).error.message, /"k7" twice/)
  // Not a timing assertion on speed: a quadratic scan of 200,000 keys would take minutes, past the test's timeout.
  t.ok(performance.now() - started < 60_000)
})

t.test('a deprecated provider object is removed from the body sent upstream, the rest kept byte for byte', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }])
  const body = `{"model":"${MODEL}",  "provider": {"sort":"price"}, "messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`
  const res = await postRaw(stack.url, stack.key, body)
  t.equal(res.status, 200)
  const seen = stack.sims.get(addr('a'))!.stats.lastBody as Record<string, unknown>
  t.equal(seen.provider, undefined, 'provider removed')
  t.same(seen.stream_options, { include_usage: true }, 'usage asked for')
  t.same(seen.messages, [{ role: 'user', content: 'hi' }])
  t.equal(seen.max_tokens, 2)
})

t.test('a stream without stream_options gets the usage member in front of the client bytes, kept byte for byte', async (t) => {
  let seen = ''
  const provider = await fakeProvider(t, (_req, res, body) => {
    seen = body
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end('data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
  })
  const stack = await startStack(t, [{ address: addr('a'), url: provider.url, models: [{ id: MODEL }] }])
  const tail = `  "model" : "${MODEL}",\n "messages":[{"role":"user","content":"h\\u00e9 \\"q\\""}] , "stream":true }`
  const res = await postRaw(stack.url, stack.key, ' {' + tail)
  t.equal(res.status, 200)
  t.equal(seen, '{"stream_options":{"include_usage":true},' + tail, 'one member in front, every client byte after it')
  t.same(JSON.parse(seen).stream_options, { include_usage: true })
})

t.test('a client stream_options object keeps its members when usage is added', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }])
  const body = JSON.stringify({ ...HELLO, stream: true, stream_options: { include_obfuscation: false } })
  const res = await postRaw(stack.url, stack.key, body)
  t.equal(res.status, 200)
  const seen = stack.sims.get(addr('a'))!.stats.lastBody as Record<string, unknown>
  t.same(seen.stream_options, { include_obfuscation: false, include_usage: true })
})
