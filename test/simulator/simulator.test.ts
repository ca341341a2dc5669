import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { Agent, Client, request } from 'undici'
import OpenAI from 'openai'
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from '../../src/simulator/simulator.js'
import { simulateProviderCommand } from '../../src/simulator/cli.js'

async function start(tt: Test, options?: SimulatorOptions): Promise<SimulatorHandle> {
  const sim = await startSimulator(options)
  tt.teardown(() => sim.close())
  return sim
}

function client(sim: SimulatorHandle): OpenAI {
  return new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 })
}

const MESSAGES: OpenAI.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: [{ type: 'text', text: 'hello world!' }] },
]
// ceil(9/4) + 4 + ceil(12/4) + 4
const PROMPT_TOKENS = 14

function post(sim: SimulatorHandle, body: unknown, dispatcher?: Agent) {
  return request(sim.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer x' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...(dispatcher ? { dispatcher } : {}),
  })
}

/** The `data:` payloads of an SSE body, asserting the exact framing on the way. */
function events(tt: Test, text: string): string[] {
  tt.ok(text.endsWith('\n\n'), 'stream ends with a blank line')
  const parts = text.slice(0, -2).split('\n\n')
  tt.ok(parts.every((part) => part.startsWith('data: ')), 'every event is one data line')
  return parts.map((part) => part.slice('data: '.length))
}

async function waitFor(check: () => boolean, ms = 10_000): Promise<boolean> {
  const until = Date.now() + ms
  while (!check()) {
    if (Date.now() > until) return false
    await sleep(5)
  }
  return true
}

const TOOLS = [
  {
    type: 'function' as const,
    function: {
      name: 'get_weather',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string' },
          days: { type: 'integer' },
          metric: { type: 'boolean' },
          tags: { type: 'array', items: { type: 'string' } },
        },
        required: ['city', 'country'],
      },
    },
  },
  {
    type: 'function' as const,
    function: { name: 'second', parameters: { type: 'object', properties: { n: { type: 'number' } } } },
  },
]
const WEATHER_ARGS = { city: 'sample', days: 1, metric: false, tags: ['sample'], country: null }

t.test('non-streaming answer has the exact OpenAI shape', async (t) => {
  const sim = await start(t, { name: 'alpha' })
  const res = await post(sim, { model: 'm1', messages: MESSAGES })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['content-type'], 'application/json')
  t.equal(res.headers['x-simulator-name'], 'alpha')
  t.match(res.headers['keep-alive'], /timeout=65/)
  const body = (await res.body.json()) as any
  t.same(Object.keys(body), ['id', 'object', 'created', 'model', 'system_fingerprint', 'choices', 'usage'])
  t.match(body.id, /^chatcmpl-\w+$/)
  t.equal(body.object, 'chat.completion')
  t.ok(Math.abs(body.created - Date.now() / 1000) < 5)
  t.equal(body.model, 'm1')
  t.equal(body.system_fingerprint, 'alpha')
  t.same(body.choices, [
    {
      index: 0,
      message: { role: 'assistant', content: body.choices[0].message.content, refusal: null },
      logprobs: null,
      finish_reason: 'stop',
    },
  ])
  const content: string = body.choices[0].message.content
  t.equal(content.split(' ').length - 1, 16, '16 words, each with a leading space')
  t.ok(content.startsWith(' '))
  t.same(body.usage, { prompt_tokens: PROMPT_TOKENS, completion_tokens: 16, total_tokens: PROMPT_TOKENS + 16 })
  t.equal(sim.stats.requests, 1)
  t.same(sim.stats.lastBody, { model: 'm1', messages: MESSAGES })
  t.equal(sim.stats.lastHeaders.authorization, 'Bearer x')
  t.ok(await waitFor(() => sim.stats.completed === 1))
})

t.test('ids are unique per response and the content is deterministic', async (t) => {
  const sim = await start(t)
  const a = (await (await post(sim, { model: 'm', messages: MESSAGES })).body.json()) as any
  const b = (await (await post(sim, { model: 'm', messages: MESSAGES })).body.json()) as any
  t.not(a.id, b.id)
  t.equal(a.choices[0].message.content, b.choices[0].message.content)
})

t.test('the openai client parses a non-streaming answer', async (t) => {
  const sim = await start(t, { completionTokens: 40 })
  const completion = await client(sim).chat.completions.create({ model: 'gpt-x', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(completion.choices[0]!.message.content!.split(' ').length - 1, 40)
  t.equal(completion.choices[0]!.finish_reason, 'stop')
  t.equal(completion.usage!.completion_tokens, 40)
  t.equal(completion.usage!.prompt_tokens, 5)
})

t.test('a stream assembles to the non-streaming content, without usage unless asked', async (t) => {
  const sim = await start(t)
  const openai = client(sim)
  const whole = await openai.chat.completions.create({ model: 'm', messages: MESSAGES })
  const stream = await openai.chat.completions.create({ model: 'm', messages: MESSAGES, stream: true })
  let content = ''
  const ids = new Set<string>()
  const finishes: unknown[] = []
  let chunks = 0
  for await (const chunk of stream) {
    chunks++
    ids.add(chunk.id)
    t.equal(chunk.object, 'chat.completion.chunk')
    t.notOk('usage' in chunk, 'no usage field without include_usage')
    content += chunk.choices[0]!.delta.content ?? ''
    finishes.push(chunk.choices[0]!.finish_reason)
  }
  t.equal(content, whole.choices[0]!.message.content)
  t.equal(ids.size, 1, 'one id for the whole stream')
  t.equal(chunks, 1 + 16 + 1, 'role chunk, one chunk per token, finish chunk')
  t.equal(finishes.at(-1), 'stop')
  t.equal(finishes.filter((f) => f !== null).length, 1)
})

t.test('raw stream wire format, with include_usage', async (t) => {
  const sim = await start(t, { completionTokens: 3 })
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true, stream_options: { include_usage: true } })
  t.equal(res.headers['content-type'], 'text/event-stream')
  t.equal(res.headers['x-simulator-name'], 'sim')
  const data = events(t, await res.body.text())
  t.equal(data.at(-1), '[DONE]')
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
  t.equal(chunks.length, 1 + 3 + 1 + 1)
  const [role, ...rest] = chunks
  t.same(Object.keys(role), ['id', 'object', 'created', 'model', 'system_fingerprint', 'choices', 'usage'])
  t.same(role.choices, [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }])
  t.equal(role.usage, null)
  for (const chunk of rest.slice(0, 3)) {
    t.match(chunk.choices[0].delta, { content: /^ \w+$/ })
    t.equal(chunk.usage, null)
  }
  t.same(rest[3].choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }])
  t.equal(rest[3].usage, null)
  t.same(rest[4].choices, [])
  t.same(rest[4].usage, { prompt_tokens: PROMPT_TOKENS, completion_tokens: 3, total_tokens: PROMPT_TOKENS + 3 })
  t.equal(new Set(chunks.map((c) => c.id)).size, 1)
})

t.test('the openai client sees the include_usage chunk', async (t) => {
  const sim = await start(t)
  const stream = await client(sim).chat.completions.create({
    model: 'm',
    messages: MESSAGES,
    stream: true,
    stream_options: { include_usage: true },
  })
  let usage
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage
  t.same(usage, { prompt_tokens: PROMPT_TOKENS, completion_tokens: 16, total_tokens: PROMPT_TOKENS + 16 })
})

t.test('tool call, not streamed', async (t) => {
  const sim = await start(t)
  const completion = await client(sim).chat.completions.create({ model: 'm', messages: MESSAGES, tools: TOOLS })
  const choice = completion.choices[0]!
  t.equal(choice.finish_reason, 'tool_calls')
  t.equal(choice.message.content, null)
  t.equal(choice.message.tool_calls!.length, 1)
  const call = choice.message.tool_calls![0]!
  t.match(call.id, /^call_\w+$/)
  t.equal(call.type, 'function')
  if (call.type !== 'function') return
  t.equal(call.function.name, 'get_weather')
  t.same(JSON.parse(call.function.arguments), WEATHER_ARGS)
  t.ok(completion.usage!.completion_tokens > 0)
})

t.test('tool call, streamed, accumulates in the openai client', async (t) => {
  const sim = await start(t, { tokensPerS: 1000 })
  const runner = client(sim).chat.completions.stream({ model: 'm', messages: MESSAGES, tools: TOOLS })
  let argumentChunks = 0
  runner.on('chunk', (chunk) => {
    if (chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments) argumentChunks++
  })
  const final = await runner.finalChatCompletion()
  const choice = final.choices[0]!
  t.equal(choice.finish_reason, 'tool_calls')
  const call = choice.message.tool_calls![0]!
  t.equal(call.type, 'function')
  if (call.type !== 'function') return
  t.equal(call.function.name, 'get_weather')
  t.same(JSON.parse(call.function.arguments), WEATHER_ARGS)
  t.ok(argumentChunks > 1, `arguments split into ${argumentChunks} pieces`)
})

t.test('raw streamed tool call deltas', async (t) => {
  const sim = await start(t)
  const res = await post(sim, {
    model: 'm',
    messages: MESSAGES,
    stream: true,
    tools: TOOLS,
    tool_choice: { type: 'function', function: { name: 'second' } },
  })
  const chunks = events(t, await res.body.text()).slice(0, -1).map((d) => JSON.parse(d))
  const first = chunks[0].choices[0].delta
  t.match(first, { role: 'assistant', tool_calls: [{ index: 0, id: /^call_/, type: 'function', function: { name: 'second', arguments: '' } }] })
  let args = ''
  for (const chunk of chunks.slice(1, -1)) {
    t.same(Object.keys(chunk.choices[0].delta.tool_calls[0]), ['index', 'function'])
    args += chunk.choices[0].delta.tool_calls[0].function.arguments
  }
  t.same(JSON.parse(args), { n: 1 })
  t.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls')
})

t.test('tool_choice none answers with content', async (t) => {
  const sim = await start(t)
  const completion = await client(sim).chat.completions.create({ model: 'm', messages: MESSAGES, tools: TOOLS, tool_choice: 'none' })
  t.equal(completion.choices[0]!.finish_reason, 'stop')
  t.type(completion.choices[0]!.message.content, 'string')
  t.notOk(completion.choices[0]!.message.tool_calls)
})

t.test('max_tokens caps the output with finish_reason length', async (t) => {
  const sim = await start(t)
  const openai = client(sim)
  const capped = await openai.chat.completions.create({ model: 'm', messages: MESSAGES, max_tokens: 5 })
  t.equal(capped.choices[0]!.finish_reason, 'length')
  t.equal(capped.choices[0]!.message.content!.split(' ').length - 1, 5)
  t.equal(capped.usage!.completion_tokens, 5)
  const roomy = await openai.chat.completions.create({ model: 'm', messages: MESSAGES, max_completion_tokens: 100 })
  t.equal(roomy.choices[0]!.finish_reason, 'stop')
  t.equal(roomy.usage!.completion_tokens, 16)
  const stream = await openai.chat.completions.create({ model: 'm', messages: MESSAGES, max_completion_tokens: 3, stream: true })
  let content = ''
  let finish
  for await (const chunk of stream) {
    content += chunk.choices[0]!.delta.content ?? ''
    finish = chunk.choices[0]!.finish_reason ?? finish
  }
  t.equal(content.split(' ').length - 1, 3)
  t.equal(finish, 'length')
})

t.test('ttft and token pacing are respected', async (t) => {
  const sim = await start(t, { ttftMs: 100 })
  let began = performance.now()
  await (await post(sim, { model: 'm', messages: MESSAGES })).body.json()
  t.ok(performance.now() - began >= 100, 'non-streaming waits ttft')

  began = performance.now()
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true })
  const arrivals: number[] = []
  for await (const piece of res.body) if (String(piece).includes('"content":" ')) arrivals.push(performance.now() - began)
  t.ok(arrivals[0]! >= 100, 'first token after ttft')

  sim.setOptions({ ttftMs: 0, tokensPerS: 100, completionTokens: 10 })
  began = performance.now()
  await (await post(sim, { model: 'm', messages: MESSAGES, stream: true })).body.text()
  t.ok(performance.now() - began >= 85, '10 tokens at 100/s take at least 9 intervals')
})

t.test('refuse closes the port, clearing it re-listens on the same port', async (t) => {
  const sim = await start(t)
  const ok = await post(sim, { model: 'm', messages: MESSAGES }, new Agent())
  t.equal(ok.statusCode, 200)
  await ok.body.dump()
  sim.setOptions({ fault: 'refuse' })
  await t.rejects(post(sim, { model: 'm', messages: MESSAGES }, new Agent()), { code: 'ECONNREFUSED' })
  sim.setOptions({ fault: 'none' })
  const again = await post(sim, { model: 'm', messages: MESSAGES }, new Agent())
  t.equal(again.statusCode, 200)
  await again.body.dump()
  t.equal(new URL(sim.url).port, String(sim.port))
})

t.test('refuse drops open connections', async (t) => {
  const sim = await start(t, { tokensPerS: 20, completionTokens: 100 })
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true })
  sim.setOptions({ fault: 'refuse' })
  await t.rejects(res.body.text())
  t.equal(sim.stats.aborted, 0, 'a provider crash is not a client abort')
})

t.test('reset-before-headers destroys the socket', async (t) => {
  const sim = await start(t, { fault: 'reset-before-headers' })
  await t.rejects(post(sim, { model: 'm', messages: MESSAGES }), { code: /UND_ERR_SOCKET|ECONNRESET/ })
  t.equal(sim.stats.requests, 1)
  t.same(sim.stats.lastBody, { model: 'm', messages: MESSAGES }, 'the request was read first')
  await sleep(20)
  t.equal(sim.stats.aborted, 0)
})

t.test('status faults answer OpenAI-style errors', async (t) => {
  const sim = await start(t, { fault: 'status-500' })
  const cases = [
    ['status-500', 500, 'server_error'],
    ['status-429', 429, 'requests'],
    ['status-400', 400, 'invalid_request_error'],
  ] as const
  for (const [fault, status, type] of cases) {
    sim.setOptions({ fault })
    const res = await post(sim, { model: 'm', messages: MESSAGES })
    t.equal(res.statusCode, status, fault)
    t.equal(res.headers['content-type'], 'application/json')
    t.equal(res.headers['retry-after'], status === 429 ? '1' : undefined)
    const body = (await res.body.json()) as any
    t.same(Object.keys(body.error), ['message', 'type', 'code'])
    t.equal(body.error.type, type)
    t.type(body.error.message, 'string')
    t.type(body.error.code, 'string')
  }
  sim.setOptions({ fault: 'status-400' })
  await t.rejects(client(sim).chat.completions.create({ model: 'm', messages: MESSAGES }), { status: 400, code: 'invalid_request' })
})

t.test('slow-headers delays the status line, then answers normally', async (t) => {
  const sim = await start(t, { fault: 'slow-headers', slowHeadersMs: 150 })
  const began = performance.now()
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true })
  t.ok(performance.now() - began >= 150)
  t.equal(events(t, await res.body.text()).at(-1), '[DONE]')
})

t.test('reset-mid-stream breaks a stream after faultAfterChunks chunks', async (t) => {
  const sim = await start(t, { fault: 'reset-mid-stream', faultAfterChunks: 3 })
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true })
  t.equal(res.statusCode, 200)
  let text = ''
  await t.rejects(
    (async () => {
      for await (const piece of res.body) text += String(piece)
    })(),
  )
  const data = events(t, text)
  t.equal(data.length, 1 + 3, 'role chunk and three content chunks')
  t.notOk(text.includes('[DONE]'))

  const stream = await client(sim).chat.completions.create({ model: 'm', messages: MESSAGES, stream: true })
  let chunks = 0
  await t.rejects(
    (async () => {
      for await (const _ of stream) chunks++
    })(),
  )
  t.equal(chunks, 4)
  t.equal(sim.stats.aborted, 0)
})

t.test('reset-mid-stream sends half a JSON body', async (t) => {
  const sim = await start(t, { fault: 'reset-mid-stream', tokensPerS: 1000, faultAfterChunks: 0 })
  const res = await post(sim, { model: 'm', messages: MESSAGES })
  t.equal(res.statusCode, 200)
  await t.rejects(res.body.text())
  const paced = await post(sim, { model: 'm', messages: MESSAGES, stream: true })
  let text = ''
  await t.rejects(
    (async () => {
      for await (const piece of paced.body) text += String(piece)
    })(),
  )
  t.same(events(t, text).map((d) => JSON.parse(d).choices[0].delta), [{ role: 'assistant', content: '' }])
})

t.test('no-usage never reports usage', async (t) => {
  const sim = await start(t, { fault: 'no-usage' })
  const body = (await (await post(sim, { model: 'm', messages: MESSAGES })).body.json()) as any
  t.notOk('usage' in body)
  t.equal(body.choices[0].finish_reason, 'stop')
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true, stream_options: { include_usage: true } })
  const text = await res.body.text()
  t.notOk(text.includes('usage'))
  t.equal(events(t, text).at(-1), '[DONE]')
})

t.test('faultCount: the first N requests fail, then success', async (t) => {
  const sim = await start(t, { fault: 'status-500', faultCount: 2 })
  const statuses = []
  for (let i = 0; i < 3; i++) {
    const res = await post(sim, { model: 'm', messages: MESSAGES })
    statuses.push(res.statusCode)
    await res.body.dump()
  }
  t.same(statuses, [500, 500, 200])
  sim.setOptions({ faultCount: 1 })
  const rearmed = await post(sim, { model: 'm', messages: MESSAGES })
  t.equal(rearmed.statusCode, 500, 'setting faultCount re-arms the counter')
  await rearmed.body.dump()
  t.equal(sim.stats.requests, 4)
})

t.test('a client abort stops generation and counts as aborted', async (t) => {
  const sim = await start(t, { tokensPerS: 50, completionTokens: 1000 })
  const controller = new AbortController()
  const res = await request(sim.url + '/v1/chat/completions', {
    method: 'POST',
    body: JSON.stringify({ model: 'm', messages: MESSAGES, stream: true }),
    signal: controller.signal,
  })
  for await (const _ of res.body) break
  controller.abort()
  t.ok(await waitFor(() => sim.stats.aborted === 1), 'aborted counted')
  t.equal(sim.stats.completed, 0)

  // The ttft timer is surely pending when close() starts (the request has arrived, and is held 10 s): any
  // close under 5 s did not wait for it.
  sim.setOptions({ tokensPerS: 0, ttftMs: 10_000 })
  const pending = post(sim, { model: 'm', messages: MESSAGES }).catch(() => undefined)
  t.ok(await waitFor(() => sim.stats.requests === 2), 'the request is held')
  const closing = performance.now()
  await sim.close()
  t.ok(performance.now() - closing < 5000, 'close does not wait for the pending ttft timer')
  await pending
})

t.test('slow readers: a large stream goes through backpressure intact', async (t) => {
  const sim = await start(t, { completionTokens: 50_000 })
  const res = await post(sim, { model: 'm', messages: MESSAGES, stream: true })
  await sleep(200)
  const data = events(t, await res.body.text())
  t.equal(data.length, 1 + 50_000 + 1 + 1)
  t.equal(data.at(-1), '[DONE]')
})

t.test('validation errors, unknown paths and models', async (t) => {
  const sim = await start(t, { models: ['a', 'b'] })
  const malformed = await post(sim, '{"model":')
  t.equal(malformed.statusCode, 400)
  t.match(await malformed.body.json(), { error: { type: 'invalid_request_error' } })
  const noMessages = await post(sim, { model: 'a' })
  t.equal(noMessages.statusCode, 400)
  t.match(await noMessages.body.json(), { error: { message: /messages/ } })
  const unknown = await post(sim, { model: 'zzz', messages: MESSAGES })
  t.equal(unknown.statusCode, 404)
  t.same(await unknown.body.json(), {
    error: { message: "model 'zzz' not found", type: 'invalid_request_error', code: 'model_not_found' },
  })
  const known = await post(sim, { model: 'b', messages: MESSAGES })
  t.equal(known.statusCode, 200)
  await known.body.dump()
  const path = await request(sim.url + '/v1/nope')
  t.equal(path.statusCode, 404)
  t.match(await path.body.json(), { error: { code: 'unknown_url' } })

  const models = await request(sim.url + '/v1/models')
  const list = (await models.body.json()) as any
  t.equal(list.object, 'list')
  t.same(list.data.map((m: any) => [m.id, m.object, m.owned_by, typeof m.created]), [
    ['a', 'model', 'sim', 'number'],
    ['b', 'model', 'sim', 'number'],
  ])
  const page = await client(sim).models.list()
  t.same(page.data.map((m) => m.id), ['a', 'b'])

  const empty = await start(t)
  t.same(await (await request(empty.url + '/v1/models')).body.json(), { object: 'list', data: [] })
})

t.test('connections are kept alive across requests', async (t) => {
  const sim = await start(t)
  const single = new Client(sim.url)
  t.teardown(() => single.close())
  let connections = 0
  single.on('connect', () => connections++)
  for (let i = 0; i < 3; i++) {
    const res = await single.request({ path: '/v1/chat/completions', method: 'POST', body: JSON.stringify({ model: 'm', messages: MESSAGES, stream: i % 2 === 1 }) })
    await res.body.dump()
  }
  t.equal(connections, 1)
})

t.test('invalid options are rejected', async (t) => {
  await t.rejects(startSimulator({ ttftMs: -1 }), RangeError)
  await t.rejects(startSimulator({ fault: 'explode' as never }), TypeError)
  const sim = await start(t)
  t.throws(() => sim.setOptions({ completionTokens: 1.5 }), RangeError)
  const res = await post(sim, { model: 'm', messages: MESSAGES })
  t.equal(res.statusCode, 200, 'a rejected patch leaves the settings alone')
  await res.body.dump()
})

t.test('cli --help prints usage and returns', async (t) => {
  let out = ''
  const write = process.stdout.write
  process.stdout.write = ((chunk: string) => {
    out += chunk
    return true
  }) as typeof process.stdout.write
  try {
    await simulateProviderCommand(['--help'])
  } finally {
    process.stdout.write = write
  }
  t.match(out, /^Usage: svc-router simulate-provider/)
  t.match(out, /--fault-count/)
})

function runCli(args: string[]) {
  const cli = new URL('../../src/simulator/cli.js', import.meta.url).href
  const script = `import { simulateProviderCommand } from ${JSON.stringify(cli)}; await simulateProviderCommand(process.argv.slice(1))`
  return spawn(process.execPath, ['--input-type=module', '-e', script, '--', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
}

function exited(child: ReturnType<typeof spawn>): Promise<number | null> {
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)))
}

t.test('cli prints its listening line, serves, and stops on SIGTERM', async (t) => {
  const child = runCli(['--port', '0', '--name', 'cli-sim', '--models', 'x, y'])
  t.teardown(() => void child.kill('SIGKILL'))
  let stdout = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  t.ok(await waitFor(() => stdout.includes('\n'), 10_000), 'listening line printed')
  const match = /^simulator listening on (http:\/\/127\.0\.0\.1:\d+)\n$/.exec(stdout)
  t.ok(match, stdout)
  const res = await request(match![1] + '/v1/models')
  t.equal(res.headers['x-simulator-name'], 'cli-sim')
  t.same(((await res.body.json()) as any).data.map((m: any) => m.id), ['x', 'y'])
  child.kill('SIGTERM')
  t.equal(await exited(child), 0)
  t.equal(stdout.split('\n').length, 2, 'exactly one line on stdout')
})

t.test('cli rejects invalid values with exit code 2', async (t) => {
  const cases = [['--fault', 'bogus'], ['--ttft-ms=abc'], ['--port', '70000'], ['--unknown'], ['--name', 'two words']]
  await Promise.all(
    cases.map(async (args) => {
      const child = runCli(args)
      let stderr = ''
      child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
      t.equal(await exited(child), 2, args.join(' '))
      t.match(stderr, /^simulate-provider: /)
    }),
  )
})
