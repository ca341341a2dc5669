/**
 * POST /v1/messages through the real router to real simulated providers, with the real @anthropic-ai/sdk
 * client: a native Anthropic provider (bytes relayed, trace in the body or in message_stop) and an openai-only
 * one (translated both ways), tools over two turns, system prompts, images, errors, x-api-key, failover across
 * formats, a broken translated stream.
 */
import Anthropic from '@anthropic-ai/sdk'
import t from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-claude'
const N = addr('a') // native: formats [anthropic]
const O = addr('b') // openai only

function stackOf(t: Parameters<typeof startStack>[0], which: 'native' | 'openai' | 'both', simN = {}, simO = {}): Promise<Stack> {
  const providers = []
  if (which !== 'openai') providers.push({ address: N, models: [{ id: MODEL, formats: ['anthropic'], price: { prompt: 0.1, completion: 0.2 } }], sim: simN })
  if (which !== 'native') providers.push({ address: O, models: [{ id: MODEL, formats: ['openai'], price: { prompt: 0.5, completion: 1.5 } }], sim: simO })
  return startStack(t, providers)
}

function client(stack: Stack, headers: Record<string, string> = {}): Anthropic {
  return new Anthropic({ baseURL: stack.url, apiKey: stack.key, maxRetries: 0, defaultHeaders: headers })
}

async function post(stack: Stack, body: object, headers: Record<string, string> = { 'x-api-key': stack.key }) {
  const res = await request(stack.url + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  })
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() }
}

/** The SSE events of a stream body, names and parsed data. */
function events(text: string): { event: string; data: any }[] {
  return text
    .split('\n\n')
    .filter((e) => e.trim() !== '')
    .map((e) => {
      const name = /^event: (.*)$/m.exec(e)?.[1] ?? ''
      const data = /^data: (.*)$/m.exec(e)?.[1]
      return { event: name, data: data === undefined ? undefined : JSON.parse(data) }
    })
}

const HELLO = { model: MODEL, max_tokens: 64, messages: [{ role: 'user' as const, content: 'hello there' }] }
const WEATHER = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
}

for (const which of ['native', 'openai'] as const) {
  const path = which === 'native' ? '/v1/messages' : '/v1/chat/completions'
  const address = which === 'native' ? N : O

  t.test(`sdk messages.create against a ${which} provider: text, usage, trace, SVC-Res-Key`, async (t) => {
    const stack = await stackOf(t, which)
    const { data: msg, response } = await client(stack).messages.create({ ...HELLO, provider: { sort: 'price' } } as any).withResponse()
    t.equal(msg.type, 'message')
    t.equal(msg.role, 'assistant')
    t.equal(msg.content[0]!.type, 'text')
    t.match((msg.content[0] as Anthropic.TextBlock).text, /The quick brown fox/)
    t.equal(msg.stop_reason, 'end_turn')
    t.equal(msg.usage.output_tokens, 16)
    t.ok(msg.usage.input_tokens > 0)
    const trace = (msg as any).x_svc_trace
    t.equal(trace.provider, address)
    t.equal(trace.usage.completion_tokens, 16)
    t.equal(response.headers.get('svc-res-key'), msg.id)
    t.ok(response.headers.get('x-ratelimit-limit-requests'))
    t.ok(response.headers.get('x-request-id'))
    const sim = stack.sims.get(address)!
    t.equal(sim.stats.lastPath, path)
    t.notOk('provider' in sim.stats.lastBody, 'the deprecated provider object is not sent upstream')
  })

  t.test(`sdk messages.stream against a ${which} provider: events in order, trace in message_stop`, async (t) => {
    const stack = await stackOf(t, which)
    const stream = client(stack).messages.stream({ ...HELLO })
    let text = ''
    stream.on('text', (delta) => (text += delta))
    const msg = await stream.finalMessage()
    t.match(text, /^ The quick brown fox/)
    t.equal((msg.content[0] as Anthropic.TextBlock).text, text)
    t.equal(msg.stop_reason, 'end_turn')
    t.equal(msg.usage.output_tokens, 16)

    const raw = await post(stack, { ...HELLO, stream: true })
    t.equal(raw.status, 200)
    t.match(raw.headers['content-type'], /text\/event-stream/)
    const evs = events(raw.text).filter((e) => e.event !== 'ping')
    t.same(
      [...new Set(evs.map((e) => e.event))],
      ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    )
    const last = evs.at(-1)!
    t.equal(last.event, 'message_stop')
    t.equal(last.data.x_svc_trace.provider, address)
    t.equal(last.data.x_svc_trace.usage.completion_tokens, 16)
    t.ok(raw.text.endsWith('\n\n'))
  })

  t.test(`sdk tool use over two turns against a ${which} provider`, async (t) => {
    const stack = await stackOf(t, which)
    const anthropic = client(stack)
    const first = await anthropic.messages.create({ ...HELLO, tools: [WEATHER], tool_choice: { type: 'any' } })
    t.equal(first.stop_reason, 'tool_use')
    const use = first.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock
    t.equal(use.name, 'get_weather')
    t.same(use.input, { city: 'sample' })
    t.ok(use.id.length > 0)
    const second = await anthropic.messages.create({
      ...HELLO,
      tools: [WEATHER],
      messages: [
        HELLO.messages[0]!,
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny', is_error: false }] },
      ],
    })
    t.equal(second.stop_reason, 'end_turn', 'the tool result is answered in text, natively and translated')
    const sent = stack.sims.get(address)!.stats.lastBody
    if (which === 'openai') {
      t.equal(sent.messages[1].role, 'assistant')
      t.equal(sent.messages[1].tool_calls[0].id, use.id)
      t.same(sent.messages[2], { role: 'tool', tool_call_id: use.id, content: 'sunny' })
      t.equal(sent.tool_choice, undefined)
    }

    // Streamed: the tool input arrives as input_json_delta and is parsed by the SDK.
    const stream = anthropic.messages.stream({ ...HELLO, tools: [WEATHER], tool_choice: { type: 'tool', name: 'get_weather' } })
    const msg = await stream.finalMessage()
    t.equal(msg.stop_reason, 'tool_use')
    const streamed = msg.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock
    t.same(streamed.input, { city: 'sample' })
  })

  t.test(`system prompt and images reach a ${which} provider`, async (t) => {
    const stack = await stackOf(t, which)
    const msg = await client(stack).messages.create({
      ...HELLO,
      system: [{ type: 'text', text: 'You are terse.' }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } },
          ],
        },
      ],
    })
    t.equal(msg.stop_reason, 'end_turn')
    const sent = stack.sims.get(address)!.stats.lastBody
    if (which === 'native') {
      t.same(sent.system, [{ type: 'text', text: 'You are terse.' }])
    } else {
      t.same(sent.messages[0], { role: 'system', content: 'You are terse.' })
      t.same(sent.messages[1].content, [
        { type: 'text', text: 'what is this?' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
      ])
    }
  })
}

t.test('native provider gets the client bytes as sent', async (t) => {
  const stack = await stackOf(t, 'native')
  const body = '{"model":"m-claude",  "max_tokens":8,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u1"}}'
  const res = await request(stack.url + '/v1/messages', { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': stack.key }, body })
  await res.body.text()
  t.equal(res.statusCode, 200)
  t.same(stack.sims.get(N)!.stats.lastBody, JSON.parse(body))
  t.equal(stack.sims.get(N)!.stats.lastHeaders['anthropic-version'], '2023-06-01')
})

t.test('errors are Anthropic-shaped with our code, and the SDK exposes them as APIError', async (t) => {
  const stack = await stackOf(t, 'native')
  const bad = await post(stack, { model: MODEL, messages: HELLO.messages })
  t.equal(bad.status, 400)
  const body = JSON.parse(bad.text)
  t.equal(body.type, 'error')
  t.same(body.error, { type: 'invalid_request_error', message: 'max_tokens is required and must be a positive integer', code: 'invalid_request' })
  t.ok(body.request_id)

  const err = await client(stack)
    .messages.create({ ...HELLO, model: 'no-such-model' })
    .catch((e: unknown) => e)
  t.ok(err instanceof Anthropic.APIError)
  t.equal((err as InstanceType<typeof Anthropic.APIError>).status, 404)
  t.equal(((err as any).error as any).error.code, 'model_not_found')
  t.equal(((err as any).error as any).error.type, 'not_found_error')

  const unauth = await new Anthropic({ baseURL: stack.url, apiKey: 'sk-wrong', maxRetries: 0 }).messages.create(HELLO).catch((e: unknown) => e)
  t.ok(unauth instanceof Anthropic.AuthenticationError)
  t.equal(((unauth as any).error as any).error.code, 'invalid_api_key')
})

t.test('x-api-key and Authorization: Bearer both authenticate; none is missing_authorization', async (t) => {
  const stack = await stackOf(t, 'native')
  t.equal((await post(stack, HELLO, { 'x-api-key': stack.key })).status, 200)
  t.equal((await post(stack, HELLO, stack.auth)).status, 200)
  const none = await post(stack, HELLO, {})
  t.equal(none.status, 401)
  t.equal(JSON.parse(none.text).error.code, 'missing_authorization')
  const wrong = await post(stack, HELLO, { 'x-api-key': 'sk-nope' })
  t.equal(wrong.status, 401)
  t.equal(JSON.parse(wrong.text).error.code, 'invalid_api_key')
})

t.test('failover from a native provider that answers 500 to a translated one', async (t) => {
  const stack = await stackOf(t, 'both', { fault: 'status-500' })
  const price = { 'x-svc-provider-sort': 'price' }
  const { data: msg } = await client(stack, price).messages.create(HELLO).withResponse()
  t.equal((msg.content[0] as Anthropic.TextBlock).type, 'text')
  const trace = (msg as any).x_svc_trace
  t.equal(trace.provider, O)
  t.same(
    trace.attempts.map((a: { provider: string; status: number | null }) => [a.provider, a.status]),
    [
      [N, 500],
      [O, 200],
    ],
  )
  t.equal(stack.sims.get(O)!.stats.lastPath, '/v1/chat/completions')

  const stream = client(stack, price).messages.stream(HELLO)
  const streamed = await stream.finalMessage()
  t.equal(streamed.stop_reason, 'end_turn')
  t.equal(streamed.usage.output_tokens, 16)
})

for (const which of ['native', 'openai'] as const) {
  t.test(`a ${which} stream that breaks midway ends with event: error and no message_stop`, async (t) => {
    const stack = await stackOf(t, which, { fault: 'reset-mid-stream' }, { fault: 'reset-mid-stream' })
    const raw = await post(stack, { ...HELLO, stream: true })
    t.equal(raw.status, 200)
    const evs = events(raw.text)
    t.equal(evs[0]!.event, 'message_start')
    t.notOk(evs.some((e) => e.event === 'message_stop'))
    const last = evs.at(-1)!
    t.equal(last.event, 'error')
    t.equal(last.data.type, 'error')
    t.equal(last.data.error.code, 'provider_error')
    t.ok(last.data.x_svc_trace)

    const err = await client(stack)
      .messages.stream(HELLO)
      .finalMessage()
      .catch((e: unknown) => e)
    t.ok(err instanceof Error, 'the SDK surfaces the error event')
  })
}

t.test('tool names past OpenAI 64 characters survive the round trip through a translated provider', async (t) => {
  const stack = await stackOf(t, 'openai')
  const long = 'mcp__a_very_long_server_name__and_an_even_longer_tool_name_that_goes_past_64_chars'
  const tool = { ...WEATHER, name: long }
  const msg = await client(stack).messages.create({ ...HELLO, tools: [tool] })
  const use = msg.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock
  t.equal(use.name, long)
  const sent = stack.sims.get(O)!.stats.lastBody
  t.ok(sent.tools[0].function.name.length <= 64)
  const streamed = await client(stack).messages.stream({ ...HELLO, tools: [tool] }).finalMessage()
  t.equal((streamed.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock).name, long)
})

t.test('require-parameters: a translated candidate must cover the mapped OpenAI parameters', async (t) => {
  const stack = await startStack(t, [{ address: O, models: [{ id: MODEL, formats: ['openai'], supported_parameters: ['temperature'], max_completion_tokens: 1000 }] }])
  const req = { 'x-api-key': stack.key, 'x-svc-provider-require-parameters': 'true' }
  t.equal((await post(stack, { ...HELLO, temperature: 0.5 }, req)).status, 200)
  const refused = await post(stack, { ...HELLO, stop_sequences: ['x'] }, req)
  t.equal(refused.status, 400)
  t.equal(JSON.parse(refused.text).type, 'error')
  t.equal(JSON.parse(refused.text).error.code, 'model_not_capable')
})
