/**
 * /v1/chat/completions to a model served only by native-Anthropic providers: the chat request translated to
 * an Anthropic messages request, the answer (JSON and SSE) translated back, with the real openai client.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { addr, startStack, type Stack, type TestProvider } from '../helpers/stack.js'

const MODEL = 'm-claude-only'
const N = addr('c')
const O = addr('d') // openai only

function stackOf(t: Parameters<typeof startStack>[0], sim = {}): Promise<Stack> {
  return startStack(t, [{ address: N, models: [{ id: MODEL, formats: ['anthropic'] }], sim }])
}

function client(stack: Stack): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
}

const TOOL = {
  type: 'function' as const,
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
}

t.test('openai client on chat against an anthropic-only provider: JSON', async (t) => {
  const stack = await stackOf(t)
  const { data, response } = await client(stack)
    .chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'system', content: 'Be terse.' },
        { role: 'user', content: 'hello' },
      ],
    })
    .withResponse()
  t.equal(data.object, 'chat.completion')
  t.match(data.choices[0]!.message.content, /The quick brown fox/)
  t.equal(data.choices[0]!.finish_reason, 'stop')
  t.equal(data.usage!.completion_tokens, 16)
  t.equal(response.headers.get('svc-res-key'), data.id)
  t.equal((data as any).x_svc_trace.provider, N)
  const sim = stack.sims.get(N)!
  t.equal(sim.stats.lastPath, '/v1/messages')
  t.equal(sim.stats.lastBody.system, 'Be terse.')
  t.same(sim.stats.lastBody.messages, [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }])
  t.equal(sim.stats.lastBody.max_tokens, 4096)
})

t.test('openai client on chat against an anthropic-only provider: stream with usage and trace', async (t) => {
  const stack = await stackOf(t)
  const stream = await client(stack).chat.completions.create({
    model: MODEL,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 5,
    messages: [{ role: 'user', content: 'hello' }],
  })
  let text = ''
  let finish: string | null = null
  let usage: OpenAI.CompletionUsage | undefined
  let trace: any
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? ''
    finish = chunk.choices[0]?.finish_reason ?? finish
    usage = chunk.usage ?? usage
    trace = (chunk as any).x_svc_trace ?? trace
  }
  t.equal(text, ' The quick brown fox jumps')
  t.equal(finish, 'length')
  t.equal(usage!.completion_tokens, 5)
  t.equal(trace.provider, N)
  t.equal(trace.usage.completion_tokens, 5)
})

t.test('tool calls cross the translation both ways, streamed and not', async (t) => {
  const stack = await stackOf(t)
  const openai = client(stack)
  const first = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'weather?' }], tools: [TOOL], tool_choice: 'required' })
  t.equal(first.choices[0]!.finish_reason, 'tool_calls')
  const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall
  t.equal(call.function.name, 'get_weather')
  t.same(JSON.parse(call.function.arguments), { city: 'sample' })
  t.same(stack.sims.get(N)!.stats.lastBody.tool_choice, { type: 'any' })

  const second = await openai.chat.completions.create({
    model: MODEL,
    tools: [TOOL],
    messages: [{ role: 'user', content: 'weather?' }, first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny' }],
  })
  t.equal(second.choices[0]!.finish_reason, 'stop', 'the tool result reached the provider as a tool_result block')
  const sent = stack.sims.get(N)!.stats.lastBody
  t.same(sent.messages[2], { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'sunny' }] })

  const stream = await openai.chat.completions.create({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'weather?' }], tools: [TOOL] })
  let args = ''
  let name = ''
  for await (const chunk of stream) {
    const tc = chunk.choices[0]?.delta?.tool_calls?.[0]
    if (tc?.function?.name) name = tc.function.name
    args += tc?.function?.arguments ?? ''
  }
  t.equal(name, 'get_weather')
  t.same(JSON.parse(args), { city: 'sample' })
})

t.test('failover from an openai provider that fails to an anthropic-only one, listed in attempts, JSON and stream', async (t) => {
  const stack = await startStack(t, [
    { address: O, models: [{ id: MODEL, formats: ['openai'], price: { prompt: 0.1, completion: 0.2 } }], sim: { fault: 'status-500' } },
    { address: N, models: [{ id: MODEL, formats: ['anthropic'], price: { prompt: 0.5, completion: 1.5 } }] },
  ])
  const openai = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0, defaultHeaders: { 'x-svc-provider-sort': 'price' } })
  const json = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], tools: [TOOL] })
  t.equal(json.choices[0]!.finish_reason, 'tool_calls')
  const attempts = (x: any) => x.x_svc_trace.attempts.map((a: any) => [a.provider, a.status])
  t.same(attempts(json), [
    [O, 500],
    [N, 200],
  ])
  t.equal(stack.sims.get(N)!.stats.lastPath, '/v1/messages')
  let trace: any
  let text = ''
  for await (const chunk of await openai.chat.completions.create({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'hello' }] })) {
    text += chunk.choices[0]?.delta?.content ?? ''
    trace = (chunk as any).x_svc_trace ?? trace
  }
  t.match(text, /The quick brown fox/)
  t.same(attempts({ x_svc_trace: trace }), [
    [O, 500],
    [N, 200],
  ])
})

type Respond = (req: IncomingMessage, res: ServerResponse, body: any) => void

/** An anthropic-only provider played by a small http server; the stack around it. */
async function fakeAnthropic(t: Test, respond: Respond, price = { prompt: 0.3, completion: 1.2 }): Promise<Stack> {
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => respond(req, res, JSON.parse(body)))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return startStack(t, [{ address: N, url, models: [{ id: MODEL, formats: ['anthropic'], price }] } as TestProvider])
}

/** Anthropic's usage with a prompt cache written and read: input_tokens excludes both. */
const CACHED = { input_tokens: 10, cache_creation_input_tokens: 100, cache_read_input_tokens: 1000 }

function cachedAnswer(_req: IncomingMessage, res: ServerResponse, body: any): void {
  const id = 'msg_01Cache'
  if (body.stream !== true) {
    res.writeHead(200, { 'content-type': 'application/json' })
    const content = [{ type: 'text', text: 'Cached hello' }]
    res.end(JSON.stringify({ id, type: 'message', role: 'assistant', model: body.model, content, stop_reason: 'end_turn', stop_sequence: null, usage: { ...CACHED, output_tokens: 5 } }))
    return
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const ev = (name: string, data: object): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`
  const start = { id, type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { ...CACHED, output_tokens: 1 } }
  // Split mid-event, as TCP may deliver it.
  const all =
    ev('message_start', { type: 'message_start', message: start }) +
    ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }) +
    ev('ping', { type: 'ping' }) +
    ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Cached' } }) +
    ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' hello' } }) +
    ev('content_block_stop', { type: 'content_block_stop', index: 0 }) +
    ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 5 } }) +
    ev('message_stop', { type: 'message_stop' })
  res.write(all.slice(0, 333))
  setImmediate(() => res.end(all.slice(333)))
}

t.test('cache tokens are prompt tokens billed at the prompt price (no cache price in the registry), JSON and stream', async (t) => {
  const stack = await fakeAnthropic(t, cachedAnswer)
  // 10 + 100 + 1000 = 1110 prompt tokens at 0.3 USD per 1M = 0.000333; 5 completion tokens at 1.2 per 1M = 0.000006.
  const billing = { input_cost: '0.000333', output_cost: '0.000006', total_cost: '0.000339', currency: 'USD' }
  const usage = { prompt_tokens: 1110, completion_tokens: 5, total_tokens: 1115 }
  const json = await client(stack).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] })
  t.equal(json.choices[0]!.message.content, 'Cached hello')
  t.same(json.usage, { ...usage, prompt_tokens_details: { cached_tokens: 1000 } })
  t.same((json as any).x_svc_trace.billing, billing)
  t.same((json as any).x_svc_trace.usage, usage)

  let trace: any
  let streamedUsage: any
  for await (const chunk of await client(stack).chat.completions.create({
    model: MODEL,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'hello' }],
  })) {
    trace = (chunk as any).x_svc_trace ?? trace
    streamedUsage = chunk.usage ?? streamedUsage
  }
  t.same(streamedUsage, { ...usage, prompt_tokens_details: { cached_tokens: 1000 } })
  t.same(trace.billing, billing)
  const charges = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 2)
})

t.test("an anthropic-only provider's own 4xx reaches the openai client in the chat envelope with our code", async (t) => {
  const stack = await fakeAnthropic(t, (_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 210000 tokens > 200000 maximum' } }))
  })
  for (const stream of [false, true]) {
    const err = await client(stack)
      .chat.completions.create({ model: MODEL, stream, messages: [{ role: 'user', content: 'hello' }] })
      .then(
        () => null,
        (e: unknown) => e,
      )
    t.ok(err instanceof OpenAI.BadRequestError, `stream ${stream}: a BadRequestError`)
    const e = err as InstanceType<typeof OpenAI.BadRequestError>
    t.equal(e.code, 'invalid_request')
    t.equal(e.type, 'invalid_request_error')
    t.equal(e.message, '400 prompt is too long: 210000 tokens > 200000 maximum')
  }
})

t.test('a json_schema response_format reaches an anthropic-only provider as output_config.format', async (t) => {
  const stack = await startStack(t, [{ address: N, models: [{ id: MODEL, formats: ['anthropic'], supported_parameters: ['max_tokens', 'response_format'] }] }])
  const schema = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false }
  const data = await client(stack).chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'a forecast' }],
    response_format: { type: 'json_schema', json_schema: { name: 'forecast', strict: true, schema } },
  })
  t.same(stack.sims.get(N)!.stats.lastBody.output_config, { format: { type: 'json_schema', schema } })
  t.same(JSON.parse(data.choices[0]!.message.content!), { city: 'sample', days: 1 }, "the provider's JSON answer, as chat content")
  t.equal((data as any).x_svc_trace.notes, undefined, 'nothing left out')
  const mode = await client(stack).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'json' }], response_format: { type: 'json_object' } })
  t.equal(stack.sims.get(N)!.stats.lastBody.output_config, undefined, 'json_object has no Anthropic equivalent')
  t.same((mode as any).x_svc_trace.notes, ['response_format json_object has no Anthropic equivalent and was not sent'], 'and the trace says so')
})
