/**
 * /v1/messages at its edges, through the real router with the real @anthropic-ai/sdk client: the Anthropic
 * headers a native candidate gets (and a translated one does not), stop_sequence from a vLLM-style provider,
 * errors of every kind in Anthropic's shape with our code (a translated provider's own 4xx included), and
 * thinking blocks in the history.
 */
import Anthropic from '@anthropic-ai/sdk'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack, type TestProvider } from '../helpers/stack.js'

const MODEL = 'm-claude'
const N = addr('a') // native: formats [anthropic]
const O = addr('b') // openai only

const HELLO = { model: MODEL, max_tokens: 64, messages: [{ role: 'user' as const, content: 'hello there' }] }

function both(t: Test, simN = {}, simO = {}, config = {}): Promise<Stack> {
  return startStack(
    t,
    [
      { address: N, models: [{ id: MODEL, formats: ['anthropic'], price: { prompt: 0.1, completion: 0.2 } }], sim: simN },
      { address: O, models: [{ id: MODEL, formats: ['openai'], price: { prompt: 0.5, completion: 1.5 } }], sim: simO },
    ],
    config,
  )
}

function client(stack: Stack, headers: Record<string, string> = {}, apiKey = stack.key): Anthropic {
  return new Anthropic({ baseURL: stack.url, apiKey, maxRetries: 0, defaultHeaders: headers })
}

async function post(stack: Stack, body: string | object, headers: Record<string, string> | string[] = { 'x-api-key': stack.key }) {
  const res = await request(stack.url + '/v1/messages', {
    method: 'POST',
    headers: Array.isArray(headers) ? ['content-type', 'application/json', ...headers] : { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() }
}

type Respond = (req: IncomingMessage, res: ServerResponse, body: any) => void

/** A provider played by a small http server (JSON request bodies); its base URL. */
async function fakeProvider(t: Test, respond: Respond): Promise<string> {
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => respond(req, res, JSON.parse(body)))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

async function fakeStack(t: Test, respond: Respond, formats = ['openai']): Promise<Stack> {
  const url = await fakeProvider(t, respond)
  return startStack(t, [{ address: O, url, models: [{ id: MODEL, formats }] } as TestProvider])
}

/** The SDK's error for a request that fails, checked to be an APIError. */
async function apiError(t: Test, p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  )
  t.ok(err instanceof Anthropic.APIError, 'an APIError')
  return err as InstanceType<typeof Anthropic.APIError>
}

/** A POST to /v1/messages written byte for byte on a socket (a header value with a byte no client library sends). */
function rawPost(stack: Stack, headerLines: Buffer, body: string): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(stack.url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      const head = `POST /v1/messages HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n`
      socket.end(Buffer.concat([Buffer.from(head, 'latin1'), headerLines, Buffer.from('\r\n' + body)]))
    })
    const chunks: Buffer[] = []
    socket.on('data', (c: Buffer) => chunks.push(c))
    socket.on('error', reject)
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      resolve({ status: Number(text.slice(9, 12)), text: text.slice(text.indexOf('\r\n\r\n') + 4) })
    })
  })
}

t.test('an anthropic-beta or anthropic-version the upstream request cannot carry is a 400, and no provider pays for it', async (t) => {
  const stack = await both(t)
  const simN = stack.sims.get(N)!
  const lines = (name: string): Buffer =>
    Buffer.concat([Buffer.from(`x-api-key: ${stack.key}\r\nx-svc-provider-address: ${N}\r\n${name}: tools-`, 'latin1'), Buffer.from([0xe9]), Buffer.from('-2024\r\n', 'latin1')])
  const before = simN.stats.requests
  // More than enough failures to mark the provider unhealthy, had they counted as its failures.
  for (let i = 0; i < 12; i++) {
    for (const name of ['anthropic-beta', 'anthropic-version']) {
      const res = await rawPost(stack, lines(name), JSON.stringify(HELLO))
      t.equal(res.status, 400, `${name}: 400`)
      if (i === 0) t.match(JSON.parse(res.text), { type: 'error', error: { type: 'invalid_request_error', code: 'invalid_request', message: new RegExp(name) } })
    }
  }
  t.equal(simN.stats.requests, before, 'nothing reached the provider')
  const providers = await (await request(`${stack.url}/v1/providers?model=${MODEL}`)).body.json() as { data: { address: string; is_healthy: boolean }[] }
  t.equal(providers.data.find((p) => p.address === N)?.is_healthy, true, 'the provider is still healthy')
  t.equal((await post(stack, HELLO, { 'x-api-key': stack.key, 'x-svc-provider-address': N, 'anthropic-beta': 'tools-2024-04-04' })).status, 200, 'a printable value still goes through')
})

t.test('a native candidate gets the client anthropic-version and anthropic-beta; a translated one gets neither', async (t) => {
  const stack = await both(t)
  const simN = stack.sims.get(N)!
  const simO = stack.sims.get(O)!
  const pinN = { 'x-api-key': stack.key, 'x-svc-provider-address': N }

  t.equal((await post(stack, HELLO, { ...pinN, 'anthropic-version': '2023-01-01', 'anthropic-beta': 'prompt-caching-2024-07-31' })).status, 200)
  t.equal(simN.stats.lastHeaders['anthropic-version'], '2023-01-01')
  t.equal(simN.stats.lastHeaders['anthropic-beta'], 'prompt-caching-2024-07-31')

  // Sent twice, anthropic-beta is a list: both reach the provider.
  const twice = ['x-api-key', stack.key, 'x-svc-provider-address', N, 'anthropic-beta', 'a-2025-01-01', 'anthropic-beta', 'b-2025-02-02']
  t.equal((await post(stack, HELLO, twice)).status, 200)
  t.equal(simN.stats.lastHeaders['anthropic-beta'], 'a-2025-01-01,b-2025-02-02')
  t.equal(simN.stats.lastHeaders['anthropic-version'], '2023-06-01', 'the default version when the client sent none')

  t.equal((await post(stack, HELLO, pinN)).status, 200)
  t.equal(simN.stats.lastHeaders['anthropic-beta'], undefined)

  // As the SDK sends them: its anthropic-version, and a beta header given per request.
  let sdkVersion: string | null = null
  const recording = new Anthropic({
    baseURL: stack.url,
    apiKey: stack.key,
    maxRetries: 0,
    defaultHeaders: { 'x-svc-provider-address': N },
    fetch: (url: any, init: any) => {
      sdkVersion = new Headers(init?.headers).get('anthropic-version')
      return fetch(url, init)
    },
  })
  await recording.messages.create(HELLO, { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14' } })
  t.equal(simN.stats.lastHeaders['anthropic-beta'], 'interleaved-thinking-2025-05-14')
  t.ok(sdkVersion)
  t.equal(simN.stats.lastHeaders['anthropic-version'], sdkVersion, 'the SDK version, as it sent it')

  const pinO = { 'x-api-key': stack.key, 'x-svc-provider-address': O, 'anthropic-version': '2023-01-01', 'anthropic-beta': 'prompt-caching-2024-07-31' }
  t.equal((await post(stack, HELLO, pinO)).status, 200)
  t.equal(simO.stats.lastPath, '/v1/chat/completions')
  t.equal(simO.stats.lastHeaders['anthropic-version'], undefined)
  t.equal(simO.stats.lastHeaders['anthropic-beta'], undefined)
})

/** A vLLM-style server: it stops on the request's first stop string, drops it from the text, and names it. */
function vllm(_req: IncomingMessage, res: ServerResponse, body: any): void {
  const stop = Array.isArray(body.stop) ? body.stop[0] : null
  const head = { id: 'chatcmpl-vllm-1', object: 'chat.completion.chunk', created: 1, model: body.model }
  const finish = { finish_reason: 'stop', stop_reason: stop ?? null }
  if (body.stream !== true) {
    res.writeHead(200, { 'content-type': 'application/json' })
    const choice = { index: 0, message: { role: 'assistant', content: 'Once upon a time' }, logprobs: null, ...finish }
    res.end(JSON.stringify({ ...head, object: 'chat.completion', choices: [choice], usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 } }))
    return
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  // Python's json.dumps spacing, as vLLM writes it.
  const write = (o: object): boolean => res.write(`data: ${JSON.stringify(o).replaceAll('":', '": ').replaceAll(',"', ', "')}\n\n`)
  write({ ...head, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] })
  for (const piece of ['Once', ' upon', ' a time']) write({ ...head, choices: [{ index: 0, delta: { content: piece }, logprobs: null, finish_reason: null }] })
  write({ ...head, choices: [{ index: 0, delta: { content: '' }, logprobs: null, ...finish }] })
  write({ ...head, choices: [], usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 } })
  res.end('data: [DONE]\n\n')
}

t.test('stop_sequence from a provider that names the stop it matched, JSON and stream', async (t) => {
  const stack = await fakeStack(t, vllm)
  const anthropic = client(stack)
  const msg = await anthropic.messages.create({ ...HELLO, stop_sequences: ['\n\nHuman:', 'THE END'] })
  t.equal(msg.stop_reason, 'stop_sequence')
  t.equal(msg.stop_sequence, '\n\nHuman:')
  const streamed = await anthropic.messages.stream({ ...HELLO, stop_sequences: ['THE END'] }).finalMessage()
  t.equal(streamed.stop_reason, 'stop_sequence')
  t.equal(streamed.stop_sequence, 'THE END')
  t.equal((streamed.content[0] as Anthropic.TextBlock).text, 'Once upon a time')
  // Without stop_sequences the same "stop" is the end of the turn.
  const plain = await anthropic.messages.create(HELLO)
  t.equal(plain.stop_reason, 'end_turn')
  t.equal(plain.stop_sequence, null)
})

const CONTEXT_ERROR = {
  error: {
    message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.",
    type: 'invalid_request_error',
    param: 'messages',
    code: 'context_length_exceeded',
  },
}

t.test("a translated provider's own 4xx is Anthropic-shaped with our code, JSON and stream", async (t) => {
  let calls = 0
  const stack = await fakeStack(t, (_req, res) => {
    calls++
    res.writeHead(calls === 1 ? 400 : 404, { 'content-type': 'application/json' })
    res.end(calls === 1 ? JSON.stringify(CONTEXT_ERROR) : '<html>not here</html>')
  })
  const err = await apiError(t, client(stack).messages.create(HELLO))
  t.ok(err instanceof Anthropic.BadRequestError)
  t.equal(err.status, 400)
  const body = err.error as any
  t.equal(body.type, 'error')
  t.same(body.error, { type: 'invalid_request_error', message: CONTEXT_ERROR.error.message, code: 'invalid_request' })
  t.equal(body.request_id, err.headers?.get('x-request-id'))

  const html = await apiError(t, client(stack).messages.stream(HELLO).finalMessage())
  t.ok(html instanceof Anthropic.NotFoundError)
  t.same((html.error as any).error, { type: 'not_found_error', message: 'the provider answered HTTP 404', code: 'provider_error' })
})

t.test('a native provider 4xx is relayed as the provider wrote it', async (t) => {
  const stack = await both(t, { fault: 'status-400' })
  const res = await post(stack, HELLO, { 'x-api-key': stack.key, 'x-svc-provider-address': N })
  t.equal(res.status, 400)
  t.equal(JSON.parse(res.text).error.message, 'Invalid request (simulated).')
  t.notOk('request_id' in JSON.parse(res.text))
})

t.test('failures on the last attempt and every router error are Anthropic-shaped APIErrors with our code', async (t) => {
  const stack = await both(t, { fault: 'status-500' }, { fault: 'status-429' }, { server: { max_json_body_bytes: 4096 } })
  const anthropic = client(stack)

  const rated = await apiError(t, anthropic.messages.create(HELLO, { headers: { 'x-svc-provider-sort': 'price' } }))
  t.ok(rated instanceof Anthropic.RateLimitError)
  t.equal((rated.error as any).error.code, 'provider_rate_limited')
  t.same(
    (rated.error as any).x_svc_trace.attempts.map((a: any) => [a.provider, a.status]),
    [
      [N, 500],
      [O, 429],
    ],
  )
  const failed = await apiError(t, anthropic.messages.create(HELLO, { headers: { 'x-svc-provider-address': N } }))
  t.equal(failed.status, 502)
  t.equal((failed.error as any).error.code, 'provider_error')
  t.equal((failed.error as any).type, 'error')

  const poor = await stack.newApiKey({ account: await stack.newAccount('0') })
  const limited = await stack.newApiKey({ allowedModels: ['other-model'] })
  const cases: [string, () => Promise<unknown>, number, string][] = [
    ['unknown model', () => anthropic.messages.create({ ...HELLO, model: 'nope' }), 404, 'model_not_found'],
    ['bad routing header', () => anthropic.messages.create(HELLO, { headers: { 'x-svc-provider-sort': 'cheapest' } }), 400, 'invalid_provider_header'],
    ['no provider at the tier', () => anthropic.messages.create(HELLO, { headers: { 'x-svc-provider-trust-mode': 'private' } }), 503, 'no_provider_for_trust_mode'],
    ['price ceiling', () => anthropic.messages.create(HELLO, { headers: { 'x-svc-provider-max-price-usd-prompt': '0.01' } }), 400, 'no_provider_within_max_price'],
    ['no balance', () => client(stack, {}, poor.key).messages.create(HELLO), 402, 'insufficient_balance'],
    ['model not allowed for the key', () => client(stack, {}, limited.key).messages.create(HELLO), 403, 'model_not_allowed'],
    ['bad key', () => client(stack, {}, 'sk-nope').messages.create(HELLO), 401, 'invalid_api_key'],
    ['a bad block', () => anthropic.messages.create({ ...HELLO, messages: [{ role: 'user', content: [{ type: 'text', text: 5 } as any] }] }), 400, 'invalid_request'],
    ['too large', () => anthropic.messages.create({ ...HELLO, messages: [{ role: 'user', content: 'x'.repeat(5000) }] }), 413, 'request_too_large'],
  ]
  for (const [name, call, status, code] of cases) {
    const err = await apiError(t, call())
    t.equal(err.status, status, name)
    t.equal((err.error as any)?.type, 'error', `${name}: Anthropic envelope`)
    t.equal((err.error as any)?.error?.code, code, `${name}: our code`)
    t.ok((err.error as any)?.request_id, `${name}: request_id`)
  }
  const malformed = await post(stack, '{"model":', { 'x-api-key': stack.key })
  t.equal(malformed.status, 400)
  t.equal(JSON.parse(malformed.text).type, 'error')
  t.equal(JSON.parse(malformed.text).error.code, 'invalid_request')
})

const THINKING_HISTORY = [
  { role: 'user', content: 'weather in Paris?' },
  {
    role: 'assistant',
    content: [
      { type: 'thinking', thinking: 'The user wants the weather.', signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds' },
      { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP' },
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_01A', name: 'get_weather', input: { city: 'Paris' } },
    ],
  },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01A', content: 'sunny' }] },
]

t.test('thinking and redacted_thinking in the history: dropped for a translated candidate, bytes for a native one', async (t) => {
  const stack = await both(t)
  const body = JSON.stringify({ model: MODEL, max_tokens: 32, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: THINKING_HISTORY })
  const native = await post(stack, body, { 'x-api-key': stack.key, 'x-svc-provider-address': N })
  t.equal(native.status, 200)
  t.same(stack.sims.get(N)!.stats.lastBody, JSON.parse(body), 'the native provider gets the blocks, signatures and all')

  const translated = await post(stack, body, { 'x-api-key': stack.key, 'x-svc-provider-address': O })
  t.equal(translated.status, 200)
  t.equal(JSON.parse(translated.text).type, 'message')
  const sent = stack.sims.get(O)!.stats.lastBody
  t.same(sent.messages[1], {
    role: 'assistant',
    content: 'Let me check.',
    tool_calls: [{ id: 'toolu_01A', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
  })
  t.notMatch(JSON.stringify(sent), /thinking|signature|EmwK/, 'nothing of the thinking blocks is sent')
  // The simulated provider does not advertise reasoning: not sent (messages-agent-shapes.test.ts has one that does).
  t.equal(sent.reasoning_effort, undefined)
  t.equal(sent.reasoning, undefined)
})

t.test('catalog supported_formats is what routing does: every listed surface serves the model, none else', async (t) => {
  const stack = await startStack(t, [
    { address: N, models: [{ id: 'claude-only', formats: ['anthropic'] }] },
    { address: O, models: [{ id: 'gpt-only', formats: ['openai'] }, { id: 'img', type: 'text-to-image', price: { image: 0.01 } }] },
  ])
  const res = await request(stack.url + '/v1/models')
  const models = ((await res.body.json()) as { data: { id: string; supported_formats: string[]; native_formats: string[] }[] }).data
  const byId = new Map(models.map((m) => [m.id, m]))
  t.same(byId.get('claude-only')!.native_formats, ['anthropic'])
  t.same(byId.get('gpt-only')!.native_formats, ['openai'])
  const PATHS: Record<string, string> = { openai: '/v1/chat/completions', anthropic: '/v1/messages' }
  for (const m of models) {
    for (const [format, path] of Object.entries(PATHS)) {
      const body = { model: m.id, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }
      const answer = await request(stack.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...stack.auth }, body: JSON.stringify(body) })
      const json = (await answer.body.json()) as any
      if (m.supported_formats.includes(format)) t.equal(answer.statusCode, 200, `${m.id} listed ${format}: served on ${path}`)
      else {
        t.equal(answer.statusCode, 400, `${m.id} does not list ${format}: refused on ${path}`)
        t.equal(json.error.code, 'model_not_supported_on_surface')
      }
    }
  }
  t.same(byId.get('img')!.supported_formats, [])
})

t.test("what the front end refuses on /v1/messages is Anthropic-shaped too: a wrong method, a conflicting key header", async (t) => {
  const stack = await both(t)
  const get = await request(stack.url + '/v1/messages', { method: 'GET', headers: { 'x-api-key': stack.key } })
  t.equal(get.statusCode, 405)
  t.equal(get.headers.allow, 'POST')
  const getBody = JSON.parse(await get.body.text())
  t.equal(getBody.type, 'error')
  t.equal(getBody.error.code, 'method_not_allowed')
  t.type(getBody.error.message, 'string')

  const twice = await post(stack, HELLO, ['x-api-key', stack.key, 'x-api-key', 'sk-other'])
  t.equal(twice.status, 400)
  const twiceBody = JSON.parse(twice.text)
  t.equal(twiceBody.type, 'error')
  t.equal(twiceBody.error.code, 'invalid_request')

  // A path under /v1/messages that is no route (the Anthropic SDK's batches) is a 404 in the same envelope.
  const count = await request(stack.url + '/v1/messages/batches', { method: 'POST', headers: { 'x-api-key': stack.key, 'content-type': 'application/json' }, body: '{}' })
  t.equal(count.statusCode, 404)
  const countBody = JSON.parse(await count.body.text())
  t.equal(countBody.type, 'error')
  t.equal(countBody.error.type, 'not_found_error')
  t.equal(countBody.error.code, 'not_found')
  // Only below it: a path that merely starts with the same letters keeps the default envelope.
  const near = await request(stack.url + '/v1/messagesx', { method: 'POST', headers: { 'x-api-key': stack.key }, body: '{}' })
  t.equal(near.statusCode, 404)
  t.equal(JSON.parse(await near.body.text()).type, undefined)

  // Chat keeps the OpenAI envelope for the same refusals.
  const chat = await request(stack.url + '/v1/chat/completions', { method: 'GET', headers: { authorization: `Bearer ${stack.key}` } })
  t.equal(chat.statusCode, 405)
  const chatBody = JSON.parse(await chat.body.text())
  t.equal(chatBody.type, undefined)
  t.equal(chatBody.error.code, 'method_not_allowed')
})
