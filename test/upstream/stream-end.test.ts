/**
 * A stream is whole only when the provider ends it the way its format ends one: `data: [DONE]` or a choice's
 * finish_reason (OpenAI), message_stop or a stop_reason (Anthropic), or the provider's own error event. A body
 * that ends cleanly before that (a provider that crashed behind a proxy, a truncating middlebox) was cut short:
 * - bytes had reached the client: the stream ends with an error event (provider_error, incomplete_stream),
 *   never with the router's [DONE] or message_stop: no fake success;
 * - nothing had: it is a miss like a reset, so the next candidate answers, or 502 with nothing billed.
 * An event whose data is not a JSON object is the provider failing too: dropped, and the stream is broken.
 * Each case runs through all four streaming codecs: OpenAI relayed, Anthropic relayed, and both translations.
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const BAD = addr('d')
const GOOD = addr('e')
const CHEAP = { prompt: 0.1, completion: 0.2 }
const DEAR = { prompt: 0.5, completion: 1 }

const oa = (o: object): string => `data: ${JSON.stringify(o)}\n\n`
const chunk = (delta: object, finish: string | null = null): string =>
  oa({ id: 'chatcmpl-end', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })
const USAGE = oa({ id: 'chatcmpl-end', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })

const an = (name: string, o: object): string => `event: ${name}\ndata: ${JSON.stringify(o)}\n\n`
const START = an('message_start', {
  type: 'message_start',
  message: { id: 'msg_end', type: 'message', role: 'assistant', model: MODEL, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } },
})
const BLOCK = an('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } })
const DELTA = an('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } })
const BLOCK_STOP = an('content_block_stop', { type: 'content_block_stop', index: 0 })
const MESSAGE_DELTA = an('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } })
const MESSAGE_STOP = an('message_stop', { type: 'message_stop' })

/** What a provider of each format sends in each case. */
const BODIES = {
  openai: {
    whole: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hi' }) + chunk({}, 'stop') + USAGE + 'data: [DONE]\n\n',
    finishedNoDone: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hi' }) + chunk({}, 'stop') + USAGE,
    doneUnterminated: chunk({ content: 'Hi' }) + chunk({}, 'stop') + 'data: [DONE]',
    cut: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hi' }),
    garbled: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hi' }) + 'data: {not json\n\n' + chunk({}, 'stop') + USAGE + 'data: [DONE]\n\n',
    empty: '',
    commentsOnly: ': keep-alive\n\n: keep-alive\n\n',
  },
  anthropic: {
    whole: START + BLOCK + DELTA + BLOCK_STOP + MESSAGE_DELTA + MESSAGE_STOP,
    finishedNoDone: START + BLOCK + DELTA + BLOCK_STOP + MESSAGE_DELTA,
    doneUnterminated: START + BLOCK + DELTA + BLOCK_STOP + MESSAGE_DELTA + MESSAGE_STOP.slice(0, -2),
    cut: START + BLOCK + DELTA,
    garbled: START + BLOCK + DELTA + 'event: content_block_delta\ndata: <html>not json</html>\n\n' + BLOCK_STOP + MESSAGE_DELTA + MESSAGE_STOP,
    empty: '',
    commentsOnly: ': keep-alive\n\n',
  },
}
type Case = keyof typeof BODIES.openai

/** A provider of `format` whose stream body is the case's, and whose connection ends cleanly after it. */
function provider(t: Test, format: 'openai' | 'anthropic', which: () => Case): Promise<string> {
  return fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(BODIES[format][which()])
  }).then((p) => p.url)
}

/** The client's surface and the provider's format: the four streaming codecs. */
const ROUTES = [
  { name: 'chat over an OpenAI provider', surface: 'chat', format: 'openai' },
  { name: 'chat over an Anthropic provider', surface: 'chat', format: 'anthropic' },
  { name: 'messages over an Anthropic provider', surface: 'messages', format: 'anthropic' },
  { name: 'messages over an OpenAI provider', surface: 'messages', format: 'openai' },
] as const

async function stream(stack: Stack, surface: 'chat' | 'messages') {
  const path = surface === 'chat' ? '/v1/chat/completions' : '/v1/messages'
  const body =
    surface === 'chat'
      ? { model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true }
      : { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], stream: true }
  const res = await request(stack.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', 'anthropic-version': '2023-06-01', ...stack.auth },
    body: JSON.stringify(body),
  })
  return { status: res.statusCode, text: await res.body.text() }
}

/** The data of the stream's last event. */
function lastData(text: string): any {
  const events = text.split('\n\n').filter((e) => e.length > 0)
  const last = events.at(-1)!
  return JSON.parse(last.slice(last.indexOf('data: ') + 'data: '.length))
}

function isWhole(surface: 'chat' | 'messages', text: string): boolean {
  return surface === 'chat' ? text.endsWith('data: [DONE]\n\n') : /event: message_stop\ndata: \{"type":"message_stop","x_svc_trace":/.test(text)
}

/** The trace of a streamed answer: in its last event, which on chat comes before [DONE]. */
function traceOf(surface: 'chat' | 'messages', text: string): any {
  return (surface === 'chat' ? lastData(text.slice(0, -'data: [DONE]\n\n'.length)) : lastData(text)).x_svc_trace
}

/**
 * BAD, a provider of `format` whose stream is `body()` in one write (so that its events arrive in one read),
 * priced under GOOD, a simulated provider: sorted by price, BAD is tried first and GOOD is the next candidate.
 */
async function withFallback(t: Test, format: 'openai' | 'anthropic', body: () => string): Promise<Stack> {
  const { url } = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(body())
  })
  return startStack(
    t,
    [
      { address: BAD, url, models: [{ id: MODEL, formats: [format], price: CHEAP }] },
      { address: GOOD, models: [{ id: MODEL, price: DEAR }] },
    ],
    { routing: { failure_threshold: 100 }, health: { probes: false } },
  )
}

async function charges(stack: Stack): Promise<number> {
  return (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge').length
}

for (const route of ROUTES) {
  t.test(`${route.name}: whole streams are answers, streams cut short are breaks or misses`, async (t) => {
    let which: Case = 'whole'
    const url = await provider(t, route.format, () => which)
    const formats = [route.format]
    const stack = await startStack(t, [{ address: BAD, url, models: [{ id: MODEL, formats, price: CHEAP }] }], {
      routing: { failure_threshold: 100 },
      health: { probes: false },
    })

    for (const c of ['whole', 'finishedNoDone', 'doneUnterminated'] as const) {
      which = c
      const out = await stream(stack, route.surface)
      t.equal(out.status, 200, c)
      t.ok(isWhole(route.surface, out.text), `${c}: ended as a whole answer`)
      t.match(out.text, /Hi/, `${c}: the content arrived`)
    }
    t.equal(await charges(stack), 3, 'each whole answer billed once')

    // Broken after the first events: cut short, or an event that is not JSON (dropped) before a proper end.
    const broken = [
      ['cut', 'incomplete_stream'],
      ['garbled', 'stream_error'],
    ] as const
    for (const [c, failure] of broken) {
      which = c
      const out = await stream(stack, route.surface)
      t.equal(out.status, 200, `${c}: the head had gone out with the first event`)
      t.match(out.text, /Hi/, `${c}: what arrived was relayed`)
      t.notMatch(out.text, /not json/, `${c}: an event that is not JSON is never relayed`)
      t.notOk(isWhole(route.surface, out.text), `${c}: no [DONE] or message_stop, whatever the provider sent`)
      t.notOk(out.text.includes('[DONE]'), `${c}: no [DONE] at all`)
      const error = lastData(out.text)
      t.equal(error.error.code, 'provider_error')
      t.match(error.x_svc_trace.attempts, [{ provider: BAD, status: 200, error: failure }])
    }
    t.equal(await charges(stack), 5, 'what the provider produced is billed, as for any broken stream')

    // A relayed Anthropic stream passes comments on as they come: one of them already started the answer.
    const misses = route.surface === 'messages' && route.format === 'anthropic' ? (['empty'] as const) : (['empty', 'commentsOnly'] as const)
    for (const c of misses) {
      which = c
      const out = await stream(stack, route.surface)
      t.equal(out.status, 502, `${c}: nothing reached the client, and there is no other candidate`)
      const body = JSON.parse(out.text)
      t.same(body.x_svc_trace.attempts, [{ provider: BAD, status: 200, error: 'incomplete_stream' }])
      t.equal(body.x_svc_trace.billing.total_cost, '0')
    }
    if (misses.length === 1) {
      which = 'commentsOnly'
      const out = await stream(stack, route.surface)
      t.equal(out.status, 200, 'the comment had started the answer')
      t.notOk(isWhole(route.surface, out.text), 'comments alone are no answer')
      const error = lastData(out.text)
      t.equal(error.error.code, 'provider_error')
      t.equal(error.x_svc_trace.billing.total_cost, '0', 'no content produced: nothing billed')
    }
    t.equal(await charges(stack), 5, 'nothing billed for a stream with no answer')
    t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
  })
}

t.test('a stream that ends before any event is a miss: the next candidate answers', async (t) => {
  const stack = await withFallback(t, 'openai', () => BODIES.openai.empty)
  const out = await stream(stack, 'chat')
  t.equal(out.status, 200)
  t.ok(out.text.endsWith('data: [DONE]\n\n'))
  const trace = traceOf('chat', out.text)
  t.same(trace.attempts, [
    { provider: BAD, status: 200, error: 'incomplete_stream' },
    { provider: GOOD, status: 200 },
  ])
  t.equal(trace.provider, GOOD)
})

t.test("an OpenAI provider's error chunk mid-stream ends the stream as broken, even when its [DONE] follows", async (t) => {
  const error = `data: ${JSON.stringify({ error: { message: 'the engine died', type: 'server_error', code: 500 } })}\n\n`
  const url = (
    await fakeProvider(t, (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hi' }) + error + 'data: [DONE]\n\n')
    })
  ).url
  const stack = await startStack(t, [{ address: BAD, url, models: [{ id: MODEL, price: CHEAP }] }], {
    routing: { failure_threshold: 100 },
    health: { probes: false },
  })
  const out = await stream(stack, 'chat')
  t.equal(out.status, 200)
  t.match(out.text, /"content":"Hi"/, 'what arrived was relayed')
  t.match(out.text, /the engine died/, "the provider's own error chunk was relayed as it came")
  t.notOk(out.text.includes('[DONE]'), 'no [DONE]: the stream is not whole')
  const last = lastData(out.text)
  t.equal(last.error.code, 'provider_error')
  t.match(last.x_svc_trace.attempts, [{ provider: BAD, status: 200, error: 'stream_error' }])
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})

t.test("an OpenAI stream failing or ending at its first event is a miss, relayed nowhere; nothing after [DONE] is read", async (t) => {
  const error = `data: ${JSON.stringify({ error: { message: 'the engine died', type: 'server_error', code: 500 } })}\n\n`
  const FIRST = {
    errorFirst: ': ping\n\n' + error + 'data: [DONE]\n\n',
    garbledFirst: 'data: {"choices":[{"delta":{"content":"x"}]]\n\n' + chunk({ content: 'Hi' }) + chunk({}, 'stop') + USAGE + 'data: [DONE]\n\n',
    doneFirst: ': ping\n\ndata: [DONE]\n\n',
  }
  let which: keyof typeof FIRST | 'afterDone' = 'errorFirst'
  const HUGE = oa({ id: 'chatcmpl-end', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 999999, completion_tokens: 999999 } })
  // [DONE] and what follows it arrive in one read.
  const stack = await withFallback(t, 'openai', () => (which === 'afterDone' ? BODIES.openai.whole + chunk({ content: 'EXTRA-AFTER-DONE' }) + HUGE : FIRST[which]))
  for (const surface of ['chat', 'messages'] as const) {
    for (const c of ['errorFirst', 'garbledFirst', 'doneFirst'] as const) {
      which = c
      const out = await stream(stack, surface)
      t.equal(out.status, 200, `${surface}, ${c}`)
      t.ok(isWhole(surface, out.text), `${surface}, ${c}: the next candidate's whole answer`)
      t.notMatch(out.text, /engine died|"content":"x"|: ping/, `${surface}, ${c}: nothing of the failed stream reached the client`)
      const trace = traceOf(surface, out.text)
      const failure = c === 'doneFirst' ? 'incomplete_stream' : 'stream_error'
      t.same(trace.attempts, [{ provider: BAD, status: 200, error: failure }, { provider: GOOD, status: 200 }], `${surface}, ${c}: a miss`)
      t.equal(trace.provider, GOOD)
    }
  }
  const journal = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(journal.length, 6, 'each request billed once, by the provider that answered')

  which = 'afterDone'
  for (const surface of ['chat', 'messages'] as const) {
    const out = await stream(stack, surface)
    t.equal(out.status, 200)
    t.ok(isWhole(surface, out.text), `${surface}: ended at the provider's [DONE]`)
    t.notMatch(out.text, /EXTRA-AFTER-DONE/, `${surface}: an event after [DONE] is not relayed`)
    const trace = traceOf(surface, out.text)
    t.equal(trace.provider, BAD)
    t.match(trace.usage, { prompt_tokens: 3, completion_tokens: 2 }, `${surface}: the usage before [DONE] is billed, not the one after it`)
    t.notOk(trace.billing.capped, `${surface}: nothing capped`)
  }
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})

t.test("an Anthropic provider's error event as the stream's first event is a miss, on either surface", async (t) => {
  const overloaded = an('error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })
  let body = overloaded
  const stack = await withFallback(t, 'anthropic', () => body)
  for (const surface of ['messages', 'chat'] as const) {
    const out = await stream(stack, surface)
    t.equal(out.status, 200, surface)
    t.ok(isWhole(surface, out.text), `${surface}: the next candidate's whole answer`)
    t.notMatch(out.text, /Overloaded/, `${surface}: nothing of the failed stream reached the client`)
    const trace = traceOf(surface, out.text)
    t.same(trace.attempts, [{ provider: BAD, status: 200, error: 'stream_error' }, { provider: GOOD, status: 200 }], `${surface}: a miss`)
  }
  // After the answer began, the provider's error still ends the stream as it does today, billed for what came.
  body = START + BLOCK + DELTA + overloaded + MESSAGE_STOP
  const out = await stream(stack, 'messages')
  t.match(out.text, /Hi/)
  t.match(out.text, /overloaded_error/, 'the error event ends the answer')
  t.notMatch(out.text, /message_stop/, 'nothing after it is relayed')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})
