/**
 * POST /v1/responses at its edges: hostile bodies (malformed items and tools, bad ids, huge inputs)
 * answered with clear 400s before any provider is tried; failover across formats; streams that break end with
 * response.failed (never response.completed) and bill what was relayed; require-parameters and the output
 * bound; an Anthropic-only provider reached through two translations; item_reference resolution.
 */
import OpenAI from 'openai'
import t from 'tap'
import { request } from 'undici'
import { parseUsd } from '../../src/billing/money.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-resp'
const N = addr('a') // native: formats [openai, responses]
const O = addr('b') // openai only
const C = addr('c') // anthropic only

function stackOf(t: Parameters<typeof startStack>[0], which: 'native' | 'openai' | 'both', simN = {}, simO = {}, config = {}): Promise<Stack> {
  const providers = []
  if (which !== 'openai') providers.push({ address: N, models: [{ id: MODEL, formats: ['openai', 'responses'], price: { prompt: 0.1, completion: 0.2 } }], sim: simN })
  if (which !== 'native') providers.push({ address: O, models: [{ id: MODEL, formats: ['openai'], price: { prompt: 0.5, completion: 1.5 } }], sim: simO })
  return startStack(t, providers, config)
}

async function post(stack: Stack, body: unknown, headers: Record<string, string> = stack.auth) {
  const res = await request(stack.url + '/v1/responses', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) }
}

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

t.test('hostile bodies get a 400 naming what is wrong, and no provider is asked', async (t) => {
  const stack = await stackOf(t, 'both')
  const cases: [unknown, RegExp][] = [
    [{ input: 'hi' }, /model is required/],
    [{ model: MODEL }, /input is required/],
    [{ model: MODEL, input: 42 }, /input is required/],
    [{ model: MODEL, input: [] }, /input must not be empty/],
    [{ model: MODEL, input: ['hi'] }, /input\[0\] must be an object/],
    [{ model: MODEL, input: [{ role: 'robot', content: 'x' }] }, /input\[0\]\.role must be one of/],
    [{ model: MODEL, input: [{ role: 'user', content: [{ type: 'output_audio' }] }] }, /"output_audio" is not a content part of a user message/],
    [{ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1' }] }] }, /file_id is not supported/],
    [{ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text' }] }] }, /input\[0\]\.content\[0\]\.text must be a string/],
    [{ model: MODEL, input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: { a: 1 } }] }, /arguments must be a string/],
    [{ model: MODEL, input: [{ type: 'function_call_output', output: 'x' }] }, /call_id must be a non-empty string/],
    [{ model: MODEL, input: [{ type: 'item_reference', id: 'bad id!' }] }, /item_reference|must be the id/],
    [{ model: MODEL, input: 'hi', tools: [{ type: 'function' }] }, /tools\[0\]\.name must be a non-empty string/],
    [{ model: MODEL, input: [{ type: 7 }] }, /input\[0\]\.type must be a string/],
    [{ model: MODEL, input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '{}', namespace: 3 }] }, /input\[0\]\.namespace must be a string/],
    [{ model: MODEL, input: 'hi', tools: [{ type: 'custom' }] }, /tools\[0\]\.name must be a non-empty string/],
    [{ model: MODEL, input: 'hi', tools: [{ type: 'namespace', name: 'ns' }] }, /tools\[0\]\.tools must be a non-empty array/],
    [{ model: MODEL, input: 'hi', tools: [{ type: 'namespace', name: 'ns', tools: [{ type: 'web_search' }] }] }, /tools\[0\]\.tools\[0\] must be a function or custom tool/],
    [{ model: MODEL, input: 'hi', tools: [{ type: 'namespace', tools: [{ type: 'function', name: 'f' }] }] }, /tools\[0\]\.name must be a non-empty string/],
    [{ model: MODEL, input: 'hi', tools: [{ type: 'namespace', name: 'ns', tools: [{ type: 'function', name: 'f', parameters: 'x' }] }] }, /tools\[0\]\.tools\[0\]\.parameters/],
    [{ model: MODEL, input: 'hi', tool_choice: { type: 'function' } }, /tool_choice\.name must be a non-empty string/],
    [{ model: MODEL, input: 'hi', tool_choice: { name: 'f' } }, /tool_choice must be/],
    [{ model: MODEL, input: 'hi', tool_choice: 'sometimes' }, /tool_choice must be/],
    [{ model: MODEL, input: 'hi', previous_response_id: 'chatcmpl-1' }, /previous_response_id must be the id of a stored response/],
    [{ model: MODEL, input: 'hi', previous_response_id: 'resp_' + 'x'.repeat(300) }, /previous_response_id/],
    [{ model: MODEL, input: 'hi', previous_response_id: 7 }, /previous_response_id/],
    [{ model: MODEL, input: 'hi', max_output_tokens: 0 }, /max_output_tokens must be a positive integer/],
    [{ model: MODEL, input: 'hi', max_output_tokens: 1.5 }, /max_output_tokens/],
    [{ model: MODEL, input: 'hi', temperature: 'hot' }, /temperature must be a number/],
    [{ model: MODEL, input: 'hi', stream: 'yes' }, /stream must be a boolean/],
    [{ model: MODEL, input: 'hi', store: 1 }, /store must be a boolean/],
    [{ model: MODEL, input: 'hi', text: { format: { type: 'json_schema' } } }, /text\.format\.name is required/],
    [{ model: MODEL, input: 'hi', text: { format: { type: 'xml' } } }, /text\.format\.type must be/],
    [{ model: MODEL, input: 'hi', metadata: { a: 1 } }, /metadata/],
    [{ model: MODEL, input: 'hi', background: true }, /background responses are not supported/],
    [{ model: MODEL, input: 'hi', conversation: 'conv_1' }, /conversations are not supported/],
    [{ model: MODEL, input: 'hi', instructions: ['x'] }, /instructions must be a string/],
    [{ model: MODEL, input: 'hi', reasoning: 'high' }, /reasoning must be an object/],
    [[1, 2], /object/],
  ]
  for (const [body, message] of cases) {
    const res = await post(stack, body)
    t.equal(res.status, 400, JSON.stringify(body).slice(0, 80))
    const err = res.json().error
    t.equal(err.code, 'invalid_request')
    t.equal(err.type, 'invalid_request_error')
    t.match(err.message, message)
    t.ok(res.json().request_id)
  }
  const bad = await post(stack, '{"model":')
  t.equal(bad.status, 400)
  t.equal(stack.sims.get(N)!.stats.requests + stack.sims.get(O)!.stats.requests, 0, 'no provider was asked')

  const unknownModel = await post(stack, { model: 'nope', input: 'hi' })
  t.equal(unknownModel.status, 404)
  t.equal(unknownModel.json().error.code, 'model_not_found')
  const unknownPrev = await post(stack, { model: MODEL, input: 'hi', previous_response_id: 'resp_' + 'f'.repeat(48) })
  t.equal(unknownPrev.status, 404)
  t.equal(unknownPrev.json().error.code, 'response_not_found')
  const unknownRef = await post(stack, { model: MODEL, input: [{ type: 'item_reference', id: 'msg_nothing' }] })
  t.equal(unknownRef.status, 400)
  t.match(unknownRef.json().error.message, /item_reference msg_nothing names no stored item/)
  t.ok(unknownRef.headers['x-ratelimit-limit-requests'])
})

t.test('huge inputs: past the body limit 413, and a history that grows past it 413 too', async (t) => {
  const stack = await stackOf(t, 'openai', {}, {}, { server: { max_json_body_bytes: 20_000 } })
  const tooBig = await post(stack, { model: MODEL, input: 'x'.repeat(30_000) })
  t.equal(tooBig.status, 413)
  t.equal(tooBig.json().error.code, 'request_too_large')
  const many = await post(stack, { model: MODEL, input: Array.from({ length: 10_001 }, () => ({ type: 'reasoning' })) })
  t.equal(many.status, 413, 'ten thousand items are past this limit already')
  const first = await post(stack, { model: MODEL, input: 'y'.repeat(12_000) })
  t.equal(first.status, 200)
  const next = await post(stack, { model: MODEL, input: 'z'.repeat(9_000), previous_response_id: first.json().id })
  t.equal(next.status, 413)
  t.match(next.json().error.message, /with its stored history/)
  // Counted in bytes: 7000 'é' are 14000 bytes of history (7000 characters would leave room for the next one).
  const accented = await post(stack, { model: MODEL, input: 'é'.repeat(7000) })
  t.equal(accented.status, 200)
  const after = await post(stack, { model: MODEL, input: 'z'.repeat(6500), previous_response_id: accented.json().id })
  t.equal(after.status, 413, 'the history is measured in bytes')
})

t.test('failover from a native provider that answers 500 to a translated one, JSON and stream', async (t) => {
  const stack = await stackOf(t, 'both', { fault: 'status-500' })
  const price = { ...stack.auth, 'x-svc-provider-sort': 'price' }
  const res = await post(stack, { model: MODEL, input: 'hello' }, price)
  t.equal(res.status, 200)
  const body = res.json()
  t.equal(body.status, 'completed')
  t.same(body.x_svc_trace.attempts.map((a: any) => [a.provider, a.status]), [[N, 500], [O, 200]])
  t.equal(stack.sims.get(O)!.stats.lastPath, '/v1/chat/completions')
  t.equal(stack.sims.get(N)!.stats.lastPath, '/v1/responses')
  const stream = await post(stack, { model: MODEL, input: 'hello', stream: true }, price)
  const evs = events(stream.text)
  t.equal(evs.at(-1)!.event, 'response.completed')
  t.equal(evs.at(-1)!.data.response.x_svc_trace.provider, O)

  // The other way: translated first (a 429), native second.
  stack.sims.get(N)!.setOptions({ fault: 'none' })
  stack.sims.get(O)!.setOptions({ fault: 'status-429' })
  const back = await post(stack, { model: MODEL, input: 'hello' }, { ...stack.auth, 'x-svc-provider-max-price-usd-prompt': '1', 'x-svc-provider-sort': 'latency' })
  t.equal(back.status, 200)
  t.ok(back.json().x_svc_trace.attempts.some((a: any) => a.provider === N && a.status === 200))
})

for (const which of ['native', 'openai'] as const) {
  t.test(`a ${which} stream that breaks midway ends with response.failed, billed for what was relayed`, async (t) => {
    const stack = await stackOf(t, which, { fault: 'reset-mid-stream' }, { fault: 'reset-mid-stream' })
    const raw = await post(stack, { model: MODEL, input: 'hello', stream: true })
    t.equal(raw.status, 200)
    const evs = events(raw.text)
    t.equal(evs[0]!.event, 'response.created')
    t.notOk(evs.some((e) => e.event === 'response.completed'), 'never a fake response.completed')
    const [failed, last] = evs.slice(-2)
    t.equal(failed!.event, 'response.failed')
    t.equal(failed!.data.response.status, 'failed')
    t.equal(failed!.data.response.error.code, 'provider_error')
    t.equal(last!.event, 'error', 'then the error event that clients raise')
    t.equal(last!.data.error.code, 'provider_error')
    t.same(evs.map((e) => e.data.sequence_number), evs.map((_, i) => i), 'numbered on from the last relayed event')
    const trace = failed!.data.response.x_svc_trace
    t.same(last!.data.x_svc_trace, trace)
    t.ok(parseUsd(trace.billing.total_cost)! > 0n, 'what was relayed is billed')
    t.equal(trace.usage.estimated, true)
    t.ok(evs.some((e) => e.event === 'response.output_text.delta'))
    const id = evs[0]!.data.response.id
    const get = await request(stack.url + '/v1/responses/' + id, { headers: stack.auth })
    t.equal(get.statusCode, 404, 'a failed response is not stored')
    await get.body.dump()

    const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
    const seen: string[] = []
    const stream = await client.responses.create({ model: MODEL, input: 'hello', stream: true })
    const err = await (async () => {
      for await (const ev of stream) seen.push(ev.type)
    })().catch((e: any) => e)
    t.equal(seen.at(-1), 'response.failed', 'the client reads response.failed')
    t.equal(err?.code, 'provider_error', 'then raises the error event')
  })
}

t.test('max_output_tokens: the output bound for require-parameters and the reservation; a cut answer is incomplete', async (t) => {
  const stack = await startStack(t, [
    { address: O, models: [{ id: MODEL, formats: ['openai'], max_completion_tokens: 100, supported_parameters: ['temperature'] }] },
  ])
  const strict = { ...stack.auth, 'x-svc-provider-require-parameters': 'true' }
  const over = await post(stack, { model: MODEL, input: 'hi', max_output_tokens: 1000 }, strict)
  t.equal(over.status, 400)
  t.equal(over.json().error.code, 'no_provider_within_max_tokens')
  const tools = await post(stack, { model: MODEL, input: 'hi', tools: [{ type: 'function', name: 'f' }] }, strict)
  t.equal(tools.status, 400)
  t.equal(tools.json().error.code, 'model_not_capable')
  const cut = await post(stack, { model: MODEL, input: 'hi', max_output_tokens: 5, temperature: 0.2 }, strict)
  t.equal(cut.status, 200)
  const body = cut.json()
  t.equal(body.status, 'incomplete')
  t.same(body.incomplete_details, { reason: 'max_output_tokens' })
  t.equal(body.usage.output_tokens, 5)
  t.equal(stack.sims.get(O)!.stats.lastBody.max_tokens, 5)
  t.equal(stack.sims.get(O)!.stats.lastBody.temperature, 0.2)
  const streamed = events((await post(stack, { model: MODEL, input: 'hi', max_output_tokens: 5, stream: true })).text)
  t.equal(streamed.at(-1)!.event, 'response.incomplete')
  t.equal(streamed.at(-1)!.data.response.incomplete_details.reason, 'max_output_tokens')
})

t.test('text.format, reasoning.effort, tool_choice and parallel_tool_calls reach a chat provider translated', async (t) => {
  const advertised = ['response_format', 'reasoning_effort', 'tools', 'tool_choice', 'parallel_tool_calls']
  const stack = await startStack(t, [{ address: O, models: [{ id: MODEL, formats: ['openai'], supported_parameters: advertised, price: { prompt: 0.5, completion: 1.5 } }] }])
  const schema = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false }
  const res = await post(stack, {
    model: MODEL,
    input: [
      { role: 'developer', content: 'answer in JSON' },
      { role: 'user', content: [{ type: 'input_text', text: 'look' }, { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'low' }] },
    ],
    text: { format: { type: 'json_schema', name: 'thing', schema, strict: true } },
    reasoning: { effort: 'low' },
    tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }],
    tool_choice: { type: 'function', name: 'f' },
    parallel_tool_calls: false,
    metadata: { job: '42' },
    user: 'u-1',
  })
  t.equal(res.status, 200)
  const sent = stack.sims.get(O)!.stats.lastBody
  t.same(sent.messages, [
    { role: 'system', content: 'answer in JSON' },
    { role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } }] },
  ])
  t.same(sent.response_format, { type: 'json_schema', json_schema: { name: 'thing', schema, strict: true } })
  t.equal(sent.reasoning_effort, 'low')
  t.same(sent.tool_choice, { type: 'function', function: { name: 'f' } })
  t.equal(sent.parallel_tool_calls, false)
  t.equal(sent.user, 'u-1')
  t.equal(sent.metadata, undefined, 'metadata stays with the router')
  const body = res.json()
  t.same(body.metadata, { job: '42' })
  t.equal(body.parallel_tool_calls, false)
  t.same(body.text.format.name, 'thing')
  t.equal((await post(stack, { model: MODEL, input: 'x', text: { format: { type: 'json_object' } } })).status, 200)
  t.same(stack.sims.get(O)!.stats.lastBody.response_format, { type: 'json_object' })
})

t.test('reasoning.effort and text.format reach only a chat provider that advertises them; the trace says what was not sent', async (t) => {
  const stack = await stackOf(t, 'openai')
  const schema = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false }
  const res = await post(stack, { model: MODEL, input: 'x', reasoning: { effort: 'high' }, text: { format: { type: 'json_schema', name: 'thing', schema } } })
  t.equal(res.status, 200)
  const sent = stack.sims.get(O)!.stats.lastBody
  t.equal(sent.reasoning_effort, undefined, 'no reasoning_effort for a provider that does not advertise it')
  t.equal(sent.response_format, undefined, 'no response_format either')
  t.same(res.json().x_svc_trace.notes, [
    'reasoning.effort was not sent: the provider does not advertise reasoning_effort',
    'text.format was not sent: the provider does not advertise response_format',
  ])
  const plain = await post(stack, { model: MODEL, input: 'x' })
  t.equal(plain.json().x_svc_trace.notes, undefined, 'no notes when nothing was left out')
  const strict = await post(stack, { model: MODEL, input: 'x', reasoning: { effort: 'high' } }, { ...stack.auth, 'X-SVC-Provider-Require-Parameters': 'true' })
  t.equal(strict.status, 400, 'with require-parameters on, no candidate remains')
  t.equal(strict.json().error.code, 'model_not_capable')
})

t.test('item_reference: a stored output item is resolved by id, for its account only', async (t) => {
  const stack = await stackOf(t, 'openai')
  const first = (await post(stack, { model: MODEL, input: 'hi', tools: [{ type: 'function', name: 'f' }] })).json()
  const call = first.output[0]
  t.equal(call.type, 'function_call')
  const next = await post(stack, {
    model: MODEL,
    input: [{ role: 'user', content: 'hi' }, { type: 'item_reference', id: call.id }, { type: 'function_call_output', call_id: call.call_id, output: 'ok' }],
  })
  t.equal(next.status, 200)
  const sent = stack.sims.get(O)!.stats.lastBody.messages
  t.same(sent[1].tool_calls[0], { id: call.call_id, type: 'function', function: { name: 'f', arguments: call.arguments } })
  const other = await stack.newApiKey({ account: await stack.newAccount() })
  const refused = await post(stack, { model: MODEL, input: [{ type: 'item_reference', id: call.id }] }, other.auth)
  t.equal(refused.status, 400, "another account's item is unknown to it")
})

t.test('an Anthropic-only provider answers through two translations (responses → chat → messages and back)', async (t) => {
  const stack = await startStack(t, [{ address: C, models: [{ id: MODEL, formats: ['anthropic'] }] }])
  const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
  const resp = await client.responses.create({ model: MODEL, input: 'hello', instructions: 'short' })
  t.equal(resp.status, 'completed')
  t.match(resp.output_text, /^ The quick brown fox/)
  t.equal(resp.usage!.output_tokens, 16)
  t.equal(stack.sims.get(C)!.stats.lastPath, '/v1/messages')
  t.equal(stack.sims.get(C)!.stats.lastBody.system, 'short')
  const seen: any[] = []
  for await (const ev of await client.responses.create({ model: MODEL, input: 'hello', stream: true })) seen.push(ev)
  t.equal(seen.at(-1).type, 'response.completed')
  t.same(seen.map((e) => e.sequence_number), seen.map((_, i) => i))
  t.equal(seen.at(-1).response.output[0].content[0].text, resp.output_text)
  t.equal(seen.at(-1).response.usage.output_tokens, 16)
  const tool = await client.responses.create({ model: MODEL, input: 'w?', tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }] })
  const call = tool.output[0] as OpenAI.Responses.ResponseFunctionToolCall
  t.equal(call.type, 'function_call')
  const done = await client.responses.create({ model: MODEL, previous_response_id: tool.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' }] })
  t.equal(done.output[0]!.type, 'message', 'the Anthropic simulator answers a tool result in text')
  const schema = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false }
  const jsonMode = await post(stack, { model: MODEL, input: 'x', text: { format: { type: 'json_object' } } })
  t.equal(jsonMode.status, 200)
  t.same(jsonMode.json().x_svc_trace.notes, ['text.format json_object has no Anthropic equivalent and was not sent'])
  t.equal(stack.sims.get(C)!.stats.lastBody.output_config, undefined)
  const withSchema = await post(stack, { model: MODEL, input: 'x', text: { format: { type: 'json_schema', name: 'thing', schema } } })
  t.equal(withSchema.json().x_svc_trace.notes, undefined, 'a schema goes as output_config.format: nothing to note')
  t.same(stack.sims.get(C)!.stats.lastBody.output_config, { format: { type: 'json_schema', schema } })
})

t.test('a chat provider that interleaves parallel tool calls: the client gets one whole item at a time', async (t) => {
  const { createServer } = await import('node:http')
  const head = { id: 'chatcmpl-p', object: 'chat.completion.chunk', created: 1, model: MODEL }
  const c = (delta: object, finish: string | null = null) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
  const body =
    c({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'f', arguments: '' } }] }) +
    c({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'g', arguments: '' } }] }) +
    c({ tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] }) +
    c({ tool_calls: [{ index: 1, function: { arguments: '{"b":' } }] }) +
    c({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }) +
    c({ tool_calls: [{ index: 1, function: { arguments: '2}' } }] }) +
    c({}, 'tool_calls') +
    `data: ${JSON.stringify({ ...head, choices: [], usage: { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 } })}\n\ndata: [DONE]\n\n`
  let last: any = null
  const server = createServer((req, res) => {
    let text = ''
    req.on('data', (chunk) => (text += chunk))
    req.on('end', () => {
      last = JSON.parse(text)
      res.writeHead(200, { 'content-type': 'text/event-stream' }).end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  const stack = await startStack(t, [{ address: O, url, models: [{ id: MODEL, formats: ['openai'] }] }])
  const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
  const seen: any[] = []
  const tools = [{ type: 'function' as const, name: 'f', parameters: null, strict: false }, { type: 'function' as const, name: 'g', parameters: null, strict: false }]
  for await (const ev of await client.responses.create({ model: MODEL, input: 'both', tools, stream: true })) seen.push(ev)
  t.same(seen.map((e) => e.sequence_number), seen.map((_, i) => i))
  const order = seen.filter((e) => e.type.startsWith('response.output_item') || e.type.startsWith('response.function_call')).map((e) => `${e.type.slice(9)}@${e.output_index}`)
  t.same(order, [
    'output_item.added@0', 'function_call_arguments.delta@0', 'function_call_arguments.delta@0', 'function_call_arguments.done@0', 'output_item.done@0',
    'output_item.added@1', 'function_call_arguments.delta@1', 'function_call_arguments.done@1', 'output_item.done@1',
  ])
  const done = seen.at(-1)
  t.equal(done.type, 'response.completed')
  t.same(done.response.output.map((i: any) => [i.call_id, i.name, i.arguments]), [['call_a', 'f', '{"a":1}'], ['call_b', 'g', '{"b":2}']])
  t.equal(done.response.usage.output_tokens, 6)
  // The stored response continues with both calls, each answered: one assistant message with both calls.
  const next = await post(stack, {
    model: MODEL,
    stream: true,
    previous_response_id: done.response.id,
    input: [{ type: 'function_call_output', call_id: 'call_a', output: 'A' }, { type: 'function_call_output', call_id: 'call_b', output: 'B' }],
  })
  t.equal(next.status, 200)
  t.same(last.messages.slice(1), [
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }, { id: 'call_b', type: 'function', function: { name: 'g', arguments: '{"b":2}' } }] },
    { role: 'tool', tool_call_id: 'call_a', content: 'A' },
    { role: 'tool', tool_call_id: 'call_b', content: 'B' },
  ])
})

t.test('a stored response expires after responses.retention_ms, and the sweep deletes it', async (t) => {
  const stack = await stackOf(t, 'openai', {}, {}, { responses: { retention_ms: 1, sweep_interval_ms: 10 } })
  const made = (await post(stack, { model: MODEL, input: 'short-lived' })).json()
  await new Promise((resolve) => setTimeout(resolve, 20))
  const get = await request(stack.url + '/v1/responses/' + made.id, { headers: stack.auth })
  t.equal(get.statusCode, 404)
  t.equal(((await get.body.json()) as any).error.code, 'response_not_found')
  const next = await post(stack, { model: MODEL, input: 'x', previous_response_id: made.id })
  t.equal(next.status, 404)
  // Swept: not even a read as of its creation time finds it.
  const store = stack.router.store.responses
  while ((await store.getResponse(stack.account, made.id, 0)) !== null) await new Promise((resolve) => setTimeout(resolve, 10))
  t.pass('deleted by the sweep')
})

t.test("a native provider's own 4xx reaches the client in the OpenAI envelope, status kept, nothing billed", async (t) => {
  const stack = await stackOf(t, 'native', { fault: 'status-400' })
  const res = await post(stack, { model: MODEL, input: 'hi' })
  t.equal(res.status, 400)
  const body = res.json()
  t.equal(body.error.message, 'Invalid request (simulated).')
  t.ok(body.request_id)
  const charges = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 0)
})

t.test('a client that leaves a stream midway pays for what it read; nothing is stored, nothing held', async (t) => {
  const { connect } = await import('node:net')
  const { eventually } = await import('../helpers/wait.js')
  for (const which of ['native', 'openai'] as const) {
    // Paced: the client leaves long before the provider would finish (16 tokens at 20/s).
    const stack = await stackOf(t, which, { tokensPerS: 20 }, { tokensPerS: 20 })
    const payload = JSON.stringify({ model: MODEL, input: 'hello', stream: true })
    const sock = connect(Number(new URL(stack.url).port), '127.0.0.1')
    sock.write(
      `POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${stack.key}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    )
    let seen = ''
    await new Promise<void>((resolve) => {
      sock.on('data', (chunk: Buffer) => {
        seen += chunk.toString('latin1')
        if (seen.split('response.output_text.delta').length > 3) resolve()
      })
    })
    sock.destroy()
    const id = /"id":"(resp_[0-9a-f]{48})"/.exec(seen)![1]!
    const charges = async () => (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
    t.ok(await eventually(async () => (await charges()).length === 1), `${which}: the abandoned stream is billed`)
    t.ok((await charges())[0]!.amount > 0n)
    t.ok(await eventually(() => stack.router.ledger.reserved(stack.account) === 0n), `${which}: no reservation left behind`)
    t.equal(await stack.router.store.responses.getResponse(stack.account, id, Date.now()), null, `${which}: an unfinished response is not stored`)
  }
})

t.test('a store that fails to keep a response: the billed answer is delivered all the same, JSON and stream', async (t) => {
  const stack = await stackOf(t, 'openai')
  const responses = stack.router.store.responses as { putResponse: (...args: unknown[]) => Promise<void> }
  responses.putResponse = async () => {
    throw new Error('disk full (injected)')
  }
  const json = await post(stack, { model: MODEL, input: 'hi' })
  t.equal(json.status, 200)
  t.equal(json.json().status, 'completed')
  const stream = events((await post(stack, { model: MODEL, input: 'hi', stream: true })).text)
  t.equal(stream.at(-1)!.event, 'response.completed')
  const charges = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 2, 'both billed')
  const get = await request(stack.url + '/v1/responses/' + json.json().id, { headers: stack.auth })
  t.equal(get.statusCode, 404, 'not kept')
  await get.body.dump()
})

t.test('fuzzed Responses bodies: every answer is a success or an enveloped error, nothing held, and the router still serves', async (t) => {
  const { seeded } = await import('../helpers/seeded.js')
  const stack = await stackOf(t, 'both')
  const random = seeded(32)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!
  const VALUES: unknown[] = [null, true, 0, -1, 1.5, '', 'x', 'resp_x', [], {}, [{}], [null], { type: 'function' }, { type: 'item_reference', id: 'msg_x' }, 'é'.repeat(50)]
  const KEYS = ['input', 'tools', 'tool_choice', 'instructions', 'text', 'reasoning', 'metadata', 'max_output_tokens', 'store', 'previous_response_id', 'stream', 'temperature', 'parallel_tool_calls', 'provider']
  const ITEM_KEYS = ['type', 'role', 'content', 'call_id', 'name', 'arguments', 'output', 'id']
  const base = (): any => ({
    model: MODEL,
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
      { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c', output: 'ok' },
    ],
    tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }],
  })
  const statuses = new Map<number, number>()
  for (let i = 0; i < 150; i++) {
    const body = base()
    for (let e = 0; e < 1 + Math.floor(random() * 3); e++) {
      if (random() < 0.5) body[pick(KEYS)] = pick(VALUES)
      else if (Array.isArray(body.input) && body.input.length > 0) {
        const item = body.input[Math.floor(random() * body.input.length)]
        if (item !== null && typeof item === 'object') item[pick(ITEM_KEYS)] = pick(VALUES)
      }
    }
    const res = await post(stack, body)
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
    t.ok([200, 400, 404, 413].includes(res.status), `status ${res.status} for ${JSON.stringify(body).slice(0, 120)}`)
    if (res.status !== 200) {
      const err = JSON.parse(res.text)
      t.ok(typeof err.error?.code === 'string' && typeof err.request_id === 'string', 'an enveloped error')
    }
  }
  t.ok((statuses.get(400) ?? 0) > 0 && (statuses.get(200) ?? 0) > 0, `both kinds of answer (${JSON.stringify([...statuses])})`)
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
  t.equal((await post(stack, { model: MODEL, input: 'still there?' })).status, 200)
})

t.test('the reservation counts the stored history: a continuation the balance cannot cover is 402, before any provider', async (t) => {
  const stack = await stackOf(t, 'openai')
  // 0.5 USD per 1M prompt tokens: a 12 kB history reserves about 0.006 USD, a bare request almost nothing.
  const account = await stack.newAccount('0.007')
  const key = await stack.newApiKey({ account })
  const first = await post(stack, { model: MODEL, input: 'y'.repeat(12_000), max_output_tokens: 10 }, key.auth)
  t.equal(first.status, 200, 'the first request fits the balance')
  const asked = stack.sims.get(O)!.stats.requests
  const bare = await post(stack, { model: MODEL, input: 'short', max_output_tokens: 10 }, key.auth)
  t.equal(bare.status, 200, 'a request without the history still fits')
  const next = await post(stack, { model: MODEL, input: 'short', max_output_tokens: 10, previous_response_id: first.json().id }, key.auth)
  t.equal(next.status, 402)
  t.equal(next.json().error.code, 'insufficient_balance')
  t.equal(stack.sims.get(O)!.stats.requests, asked + 1, 'the refused continuation reached no provider')
})

t.test('providers that misbehave: an error object with a 200, junk mid-stream, an error chunk mid-stream', async (t) => {
  const { fakeProvider } = await import('../helpers/fake-provider.js')
  const sse = (events: string[]) => (res: import('node:http').ServerResponse) => res.writeHead(200, { 'content-type': 'text/event-stream' }).end(events.join(''))
  const created = (seq: number) => `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', sequence_number: seq, response: { id: 'resp_p', object: 'response', status: 'in_progress', output: [] } })}\n\n`
  const delta = (seq: number) => `event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', sequence_number: seq, item_id: 'msg_p', output_index: 0, content_index: 0, delta: 'x' })}\n\n`
  const chat = (obj: object) => `data: ${JSON.stringify(obj)}\n\n`
  const head = { id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: MODEL }

  // Native JSON: an error object with a 200 is no answer: the next candidate (translated) serves it.
  const bad = await fakeProvider(t, (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"error":{"message":"nope"}}'))
  const ok = await startStack(t, [
    { address: N, url: bad.url, models: [{ id: MODEL, formats: ['openai', 'responses'], price: { prompt: 0.01, completion: 0.01 } }] },
    { address: O, models: [{ id: MODEL, formats: ['openai'], price: { prompt: 5, completion: 5 } }] },
  ])
  const failedOver = await post(ok, { model: MODEL, input: 'hi' }, { ...ok.auth, 'x-svc-provider-sort': 'price' })
  t.equal(failedOver.status, 200)
  t.same(failedOver.json().x_svc_trace.attempts.map((a: any) => [a.provider, a.status, a.error ?? null]), [[N, 200, 'invalid_json'], [O, 200, null]])

  // Native stream with junk after its first event: the response fails, never completes.
  const junk = await fakeProvider(t, (_req, res) => sse([created(0), delta(1), 'data: {oops\n\n', delta(3)])(res))
  const s1 = await startStack(t, [{ address: N, url: junk.url, models: [{ id: MODEL, formats: ['openai', 'responses'] }] }])
  const j = events((await post(s1, { model: MODEL, input: 'hi', stream: true })).text)
  t.equal(j[0]!.data.response.id.startsWith('resp_') && j[0]!.data.response.id !== 'resp_p', true, 'our id, not the provider’s')
  t.same(j.slice(-2).map((e) => e.event), ['response.failed', 'error'])
  t.notOk(j.some((e) => e.event === 'response.completed'))

  // Translated stream whose provider reports an error mid-stream: what it produced is billed, then it fails.
  const erring = await fakeProvider(t, (_req, res) =>
    sse([chat({ ...head, choices: [{ index: 0, delta: { content: 'par' }, finish_reason: null }] }), chat({ error: { message: 'overloaded', type: 'server_error' } }), 'data: [DONE]\n\n'])(res),
  )
  const s2 = await startStack(t, [{ address: O, url: erring.url, models: [{ id: MODEL, formats: ['openai'] }] }])
  const e = events((await post(s2, { model: MODEL, input: 'hi', stream: true })).text)
  t.same(e.slice(-2).map((x) => x.event), ['response.failed', 'error'])
  t.equal(e.at(-2)!.data.response.error.message, 'overloaded')
  t.ok(e.some((x) => x.event === 'response.output_text.delta' && x.data.delta === 'par'))
  t.same(e.map((x) => x.data.sequence_number), e.map((_, i) => i))
  const charges = (await s2.router.store.ledger.journal(s2.account)).filter((c) => c.kind === 'charge')
  t.equal(charges.length, 1, 'what was relayed is billed')
  t.equal(await s2.router.store.responses.getResponse(s2.account, e[0]!.data.response.id, Date.now()), null, 'and nothing is stored')
})

t.test('a native provider that keeps its stream open after response.completed: the answer ends at that event', async (t) => {
  const { fakeProvider } = await import('../helpers/fake-provider.js')
  const response = { id: 'resp_p', object: 'response', status: 'completed', output: [], usage: { input_tokens: 2, output_tokens: 1, total_tokens: 3 } }
  const open = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(`event: response.created\ndata: ${JSON.stringify({ type: 'response.created', sequence_number: 0, response: { ...response, status: 'in_progress', usage: null } })}\n\n`)
    res.write(`event: response.completed\ndata: ${JSON.stringify({ type: 'response.completed', sequence_number: 1, response })}\n\n`)
    // …and never ends the body.
  })
  const stack = await startStack(t, [{ address: N, url: open.url, models: [{ id: MODEL, formats: ['openai', 'responses'] }] }])
  const evs = events((await post(stack, { model: MODEL, input: 'hi', stream: true })).text)
  t.same(evs.map((e) => e.event), ['response.created', 'response.completed'])
  t.equal(evs[1]!.data.response.usage.output_tokens, 1)
  t.ok(evs[1]!.data.response.x_svc_trace)
})

t.test("a native provider's stream whose first event is its failure is a miss: the next candidate answers", async (t) => {
  const { fakeProvider } = await import('../helpers/fake-provider.js')
  const first = {
    error: `event: error\ndata: ${JSON.stringify({ type: 'error', sequence_number: 0, code: 'server_error', message: 'overloaded' })}\n\n`,
    failed: `event: response.failed\ndata: ${JSON.stringify({ type: 'response.failed', sequence_number: 0, response: { id: 'resp_p', object: 'response', status: 'failed', output: [], error: { code: 'server_error', message: 'overloaded' } } })}\n\n`,
  }
  let which: keyof typeof first = 'error'
  const failing = await fakeProvider(t, (_req, res) => res.writeHead(200, { 'content-type': 'text/event-stream' }).end(first[which]))
  const stack = await startStack(t, [
    { address: N, url: failing.url, models: [{ id: MODEL, formats: ['openai', 'responses'], price: { prompt: 0.01, completion: 0.01 } }] },
    { address: O, models: [{ id: MODEL, formats: ['openai'], price: { prompt: 5, completion: 5 } }] },
  ])
  for (const c of ['error', 'failed'] as const) {
    which = c
    const evs = events((await post(stack, { model: MODEL, input: 'hi', stream: true }, { ...stack.auth, 'x-svc-provider-sort': 'price' })).text)
    t.equal(evs.at(-1)!.event, 'response.completed', `${c}: the next candidate's whole answer`)
    t.notOk(evs.some((e) => JSON.stringify(e.data ?? '').includes('overloaded')), `${c}: nothing of the failed stream reached the client`)
    t.same(evs.at(-1)!.data.response.x_svc_trace.attempts.map((a: any) => [a.provider, a.status, a.error ?? null]), [[N, 200, 'stream_error'], [O, 200, null]], `${c}: a miss`)
  }
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing held')
})
