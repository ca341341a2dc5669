/**
 * Fuzzed providers through the real router: a provider whose answers are valid ones mutated at random (bytes
 * inserted, dropped or cut, a wrong status or content type, written in odd pieces) on every wire format the
 * router reads (OpenAI chat JSON and SSE, Anthropic messages JSON and SSE, Responses SSE), behind every surface
 * that reads it (chat, messages native and translated, responses native and translated). A real simulator,
 * dearer, stands behind it, except for the requests pinned to the fake. Whatever the provider sends: no 500, every error in the envelope, a charge only for
 * an answer the client got with 200 and one for every whole non-streamed 200, nothing left in flight or reserved.
 * The router runs in this process: a throw that escaped a guard would end the test run.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { mutate, seeded } from '../helpers/seeded.js'
import { addr, startStack } from '../helpers/stack.js'

const OPENAI = 'm-openai'
const ANTHROPIC = 'm-anthropic'
const RESPONSES = 'm-responses'
const FAKE = addr('f')
const SIM = addr('e')
const CHEAP = { prompt: 0.1, completion: 0.2 }
const DEAR = { prompt: 0.5, completion: 1.5 }

const sse = (events: object[]): string => events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')
const named = (events: [string, object][]): string => events.map(([name, e]) => `event: ${name}\ndata: ${JSON.stringify(e)}\n\n`).join('')

const CHAT_JSON = JSON.stringify({
  id: 'chatcmpl-f',
  object: 'chat.completion',
  created: 1,
  model: OPENAI,
  choices: [{ index: 0, message: { role: 'assistant', content: 'hello there' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
})
const CHUNK = { id: 'chatcmpl-f', object: 'chat.completion.chunk', created: 1, model: OPENAI }
const CHAT_SSE =
  sse([
    { ...CHUNK, choices: [{ index: 0, delta: { role: 'assistant', content: 'hel' }, finish_reason: null }] },
    { ...CHUNK, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a"' } }] }, finish_reason: null }] },
    { ...CHUNK, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, finish_reason: 'tool_calls' }] },
    { ...CHUNK, choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } },
  ]) + 'data: [DONE]\n\n'
const MESSAGE = { id: 'msg_f', type: 'message', role: 'assistant', model: ANTHROPIC, content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 0 } }
const ANTHROPIC_JSON = JSON.stringify({ ...MESSAGE, content: [{ type: 'text', text: 'hello there' }], stop_reason: 'end_turn', usage: { input_tokens: 5, output_tokens: 2 } })
const ANTHROPIC_SSE = named([
  ['message_start', { type: 'message_start', message: MESSAGE }],
  ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
  ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'hello' } }],
  ['content_block_stop', { type: 'content_block_stop', index: 0 }],
  ['content_block_start', { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} } }],
  ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"a":1}' } }],
  ['content_block_stop', { type: 'content_block_stop', index: 1 }],
  ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 2 } }],
  ['message_stop', { type: 'message_stop' }],
])
const RESPONSE = { id: 'resp_f', object: 'response', created_at: 1, model: RESPONSES, status: 'in_progress', output: [] }
const ITEM = { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'hello', annotations: [] }] }
const RESPONSES_SSE = named([
  ['response.created', { type: 'response.created', sequence_number: 0, response: RESPONSE }],
  ['response.output_item.added', { type: 'response.output_item.added', sequence_number: 1, output_index: 0, item: { ...ITEM, status: 'in_progress', content: [] } }],
  ['response.output_text.delta', { type: 'response.output_text.delta', sequence_number: 2, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'hello' }],
  ['response.output_item.done', { type: 'response.output_item.done', sequence_number: 3, output_index: 0, item: ITEM }],
  [
    'response.completed',
    { type: 'response.completed', sequence_number: 4, response: { ...RESPONSE, status: 'completed', output: [ITEM], usage: { input_tokens: 5, output_tokens: 2, total_tokens: 7 } } },
  ],
])
const RESPONSES_JSON = JSON.stringify({ ...RESPONSE, status: 'completed', output: [ITEM], usage: { input_tokens: 5, output_tokens: 2, total_tokens: 7 } })

const INSERTS = ['{', '}', '[', ']', '"', ',', ':', '\\', '\n', '\n\n', 'data: ', 'data: [DONE]\n\n', 'event: error\n', '\r', '\u0000', 'null', '-1', '1e400', '99999999999999999999', '"usage":{"prompt_tokens":-5},', '"x_svc_trace":{"provider":"0xevil"},']

interface Sent {
  readonly requestId: string
  readonly status: number
  readonly stream: boolean
  /** A streamed answer that ended as its format ends a whole answer, not with an error event. */
  readonly whole: boolean
}

t.test('fuzzed provider answers on every wire format: no 500, enveloped errors, a charge exactly for what the client got', async (t) => {
  const random = seeded(45)
  const answer = (req: IncomingMessage, res: ServerResponse, body: string): void => {
    let stream = false
    try {
      stream = JSON.parse(body).stream === true
    } catch {}
    const path = req.url ?? ''
    const [type, text] = path.endsWith('/v1/messages')
      ? stream ? ['text/event-stream', ANTHROPIC_SSE] : ['application/json', ANTHROPIC_JSON]
      : path.endsWith('/v1/responses')
        ? stream ? ['text/event-stream', RESPONSES_SSE] : ['application/json', RESPONSES_JSON]
        : stream ? ['text/event-stream', CHAT_SSE] : ['application/json', CHAT_JSON]
    const roll = random()
    const status = roll < 0.05 ? 500 : roll < 0.08 ? 429 : roll < 0.1 ? 201 : 200
    const contentType = random() < 0.05 ? 'text/html' : type
    const bytes = Buffer.from(random() < 0.8 ? mutate(random, text, INSERTS) : text)
    res.writeHead(status, { 'content-type': contentType })
    // In pieces of odd sizes: a frame, a UTF-8 sequence or a JSON token split across reads.
    let at = 0
    const write = (): void => {
      if (at >= bytes.length || res.destroyed) return void res.end()
      const n = 1 + Math.floor(random() * 64)
      res.write(bytes.subarray(at, at + n))
      at += n
      if (random() < 0.1) setTimeout(write, 1)
      else write()
    }
    write()
  }
  const fake = await fakeProvider(t, answer)
  const stack = await startStack(t, [
    {
      address: FAKE,
      url: fake.url,
      models: [
        { id: OPENAI, formats: ['openai'], price: CHEAP },
        { id: ANTHROPIC, formats: ['anthropic'], price: CHEAP },
        { id: RESPONSES, formats: ['openai', 'responses'], price: CHEAP },
      ],
    },
    {
      address: SIM,
      models: [
        { id: OPENAI, formats: ['openai'], price: DEAR },
        { id: ANTHROPIC, formats: ['openai'], price: DEAR },
        { id: RESPONSES, formats: ['openai'], price: DEAR },
      ],
    },
  ], { routing: { failure_threshold: 1_000_000 } })

  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }]
  const CASES: [string, (model: string, stream: boolean) => object, (text: string) => boolean][] = [
    ['/v1/chat/completions', (model, stream) => ({ model, stream, max_tokens: 5, tools, messages: [{ role: 'user', content: 'hi' }] }), (s) => s.trimEnd().endsWith('data: [DONE]')],
    [
      '/v1/messages',
      (model, stream) => ({ model, stream, max_tokens: 5, tools: [{ name: 'f', input_schema: { type: 'object' } }], messages: [{ role: 'user', content: 'hi' }] }),
      (s) => s.includes('event: message_stop'),
    ],
    ['/v1/responses', (model, stream) => ({ model, stream, input: 'hi', store: false }), (s) => s.includes('event: response.completed')],
  ]
  const sent: Sent[] = []
  const statuses = new Map<string, number>()
  for (let i = 0; i < 240; i++) {
    const [path, bodyOf, ended] = CASES[i % CASES.length]!
    const model = [OPENAI, ANTHROPIC, RESPONSES][Math.floor(i / 3) % 3]!
    const stream = random() < 0.6
    // Pinned (no fallback) the fake's failures reach the client; else the simulator behind it answers them.
    const route = random() < 0.4 ? { 'x-svc-provider-address': FAKE } : { 'x-svc-provider-sort': 'price' }
    const res = await request(stack.url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...route, ...stack.auth },
      body: JSON.stringify(bodyOf(model, stream)),
      headersTimeout: 15_000,
      bodyTimeout: 15_000,
    })
    const text = await res.body.text()
    const requestId = String(res.headers['x-request-id'])
    const label = `${path} ${model} ${stream ? 'stream' : 'json'} ${res.statusCode}`
    statuses.set(label, (statuses.get(label) ?? 0) + 1)
    if (res.statusCode === 500) t.fail(`500 on ${label}: ${text.slice(0, 300)}`)
    if (res.statusCode !== 200) {
      let enveloped = false
      try {
        const error = JSON.parse(text).error
        enveloped = typeof error?.message === 'string' && typeof error?.type === 'string'
      } catch {}
      if (!enveloped) t.fail(`${label}: not an error envelope: ${text.slice(0, 300)}`)
    } else if (!stream) {
      try {
        JSON.parse(text)
      } catch {
        t.fail(`${label}: a 200 that is not JSON: ${text.slice(0, 300)}`)
      }
    }
    sent.push({ requestId, status: res.statusCode, stream, whole: res.statusCode === 200 && (!stream || ended(text)) })
  }
  t.comment([...statuses].sort().map(([k, v]) => `${k}: ${v}`).join('\n'))

  // Charges are committed in groups: wait until every one is in the journal.
  const expected = sent.filter((s) => s.whole).length
  let charged: string[] = []
  for (let i = 0; i < 100; i++) {
    charged = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge').map((e) => e.requestId!)
    if (charged.length >= expected) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const answered = new Set(sent.filter((s) => s.status === 200).map((s) => s.requestId))
  t.same(charged.filter((id) => !answered.has(id)), [], 'no charge for a request the client did not get a 200 for')
  const chargedSet = new Set(charged)
  t.same(sent.filter((s) => s.whole && !chargedSet.has(s.requestId)).map((s) => s.requestId), [], 'every whole answer charged')
  t.equal(chargedSet.size, charged.length, 'no request charged twice')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
  t.ok(sent.some((s) => s.status === 200) && sent.some((s) => s.status !== 200), 'both outcomes were exercised')
  // And the router still serves an ordinary request.
  const after = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-provider-address': SIM, ...stack.auth },
    body: JSON.stringify({ model: OPENAI, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
  })
  t.equal(after.statusCode, 200)
  await after.body.text()
})
