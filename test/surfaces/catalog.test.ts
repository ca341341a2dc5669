/**
 * The public catalog (spec §2.3, §2.4, §4.6) through the real router: GET /v1/models and
 * GET /v1/providers?model=, with live health and latency from real traffic to simulated providers.
 */
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { addr, startStack, type Stack, type TestProvider } from '../helpers/stack.js'

interface ModelEntry {
  id: string
  type: string
  supported_formats: string[]
  verifiability: string
  tee_type: string
  tee_verifier: string
  provider_count: number
  context_length: number | null
}

interface ProviderEntry {
  address: string
  is_healthy: boolean
  trust_mode: string
  verifiability: string
  latency: number | null
  uptime: number
  max_completion_tokens: number | null
}

interface Answer<T> {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: { object?: string; data?: T[]; error?: { message: string; type: string; code: string }; request_id?: string }
}

const A = addr('a')
const B = addr('b')
const C = addr('c')
const SLASHED = 'org/chat-b:free'

/**
 * chat: A standard (context 8192, cap 1024), B verified TeeTLS (context 32768, openai + anthropic, no cap),
 * C private TeeML (no context length, answers after 30 ms). img on A, whisper on C, org/chat-b:free on B.
 */
const PROVIDERS: TestProvider[] = [
  {
    address: A,
    trust_mode: 'standard',
    models: [
      { id: 'chat', context_length: 8192, max_completion_tokens: 1024, supported_parameters: ['temperature'] },
      { id: 'img', type: 'text-to-image', price: { image: 0.003 } },
    ],
  },
  {
    address: B,
    trust_mode: 'verified',
    verifiability: 'TeeTLS',
    models: [
      { id: 'chat', context_length: 32768, formats: ['openai', 'anthropic'] },
      { id: SLASHED, formats: ['anthropic'], context_length: 4096 },
    ],
  },
  {
    address: C,
    trust_mode: 'private',
    verifiability: 'TeeML',
    models: [{ id: 'chat' }, { id: 'whisper', type: 'speech-to-text', price: { audio_second: 0.0001 } }],
    sim: { ttftMs: 30 },
  },
]

const MODEL_FIELDS = ['id', 'type', 'supported_formats', 'verifiability', 'tee_type', 'tee_verifier', 'provider_count', 'context_length']
const PROVIDER_FIELDS = ['address', 'is_healthy', 'trust_mode', 'verifiability', 'latency', 'uptime', 'max_completion_tokens']

function stackFor(t: Test, providers: TestProvider[], config: Record<string, Record<string, unknown>> = {}): Promise<Stack> {
  return startStack(t, providers, config)
}

/** A catalog call, with no credential: the catalog is public. */
async function get<T>(stack: Stack, path: string): Promise<Answer<T>> {
  const res = await request(stack.url + path)
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, body: JSON.parse(text) as Answer<T>['body'] }
}

async function models(stack: Stack): Promise<Map<string, ModelEntry>> {
  const res = await get<ModelEntry>(stack, '/v1/models')
  return new Map((res.body.data ?? []).map((m) => [m.id, m]))
}

async function providers(stack: Stack, model: string): Promise<Map<string, ProviderEntry>> {
  const res = await get<ProviderEntry>(stack, '/v1/providers?model=' + encodeURIComponent(model))
  return new Map((res.body.data ?? []).map((p) => [p.address, p]))
}

/** One chat request pinned to `address` (no fallbacks), to drive health and latency. */
async function pinnedChat(stack: Stack, address: string): Promise<number> {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, 'X-SVC-Provider-Address': address },
    body: JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'hi' }] }),
  })
  await res.body.text()
  return res.statusCode
}

function expectError(t: Test, res: Answer<unknown>, status: number, code: string, type: string, what: string): void {
  t.equal(res.status, status, `${what}: status`)
  t.equal(res.body.error?.code, code, `${what}: code`)
  t.equal(res.body.error?.type, type, `${what}: type`)
  t.ok(typeof res.body.error?.message === 'string' && res.body.error.message.length > 0, `${what}: message`)
  t.ok(typeof res.body.request_id === 'string' && res.body.request_id.length > 0, `${what}: request_id`)
  t.equal(res.body.request_id, res.headers['x-request-id'], `${what}: request_id is x-request-id`)
}

t.test('GET /v1/models', async (t) => {
  const stack = await stackFor(t, PROVIDERS)

  t.test('is public and lists every model with every field of spec §2.3', async (t) => {
    const res = await get<ModelEntry>(stack, '/v1/models')
    t.equal(res.status, 200)
    t.match(res.headers['content-type'], /application\/json/)
    t.ok(typeof res.headers['x-request-id'] === 'string', 'x-request-id')
    t.equal(res.body.object, 'list')
    t.ok(Array.isArray(res.body.data), 'data is an array')
    t.same((res.body.data ?? []).map((m) => m.id).sort(), ['chat', 'img', SLASHED, 'whisper'].sort())
    for (const entry of res.body.data ?? []) {
      for (const field of MODEL_FIELDS) t.ok(Object.hasOwn(entry, field), `${entry.id} has ${field}`)
      t.type(entry.supported_formats, Array, `${entry.id}: supported_formats is an array`)
      t.type(entry.tee_type, 'string', `${entry.id}: tee_type`)
      t.type(entry.tee_verifier, 'string', `${entry.id}: tee_verifier`)
      t.ok(['TeeML', 'TeeTLS', ''].includes(entry.verifiability), `${entry.id}: verifiability ${entry.verifiability}`)
      t.ok(['chatbot', 'text-to-image', 'speech-to-text'].includes(entry.type), `${entry.id}: type ${entry.type}`)
    }
  })

  t.test('a model served by several providers: counts, formats, context and enclave', async (t) => {
    const chat = (await models(stack)).get('chat')!
    t.equal(chat.type, 'chatbot')
    t.equal(chat.provider_count, 3)
    t.same(chat.supported_formats, ['openai', 'anthropic'], 'both surfaces route every chat model')
    t.same([...(chat as any).native_formats].sort(), ['anthropic', 'openai'], 'any provider’s own formats')
    t.equal(chat.context_length, 32768, 'the largest context window')
    t.equal(chat.verifiability, 'TeeML', 'the strongest enclave among its providers')
  })

  t.test('single-provider models of every type', async (t) => {
    const all = await models(stack)
    const img = all.get('img')!
    t.equal(img.type, 'text-to-image')
    t.equal(img.provider_count, 1)
    t.equal(img.verifiability, '')
    const whisper = all.get('whisper')!
    t.equal(whisper.type, 'speech-to-text')
    t.equal(whisper.verifiability, 'TeeML')
    const slashed = all.get(SLASHED)!
    t.same(slashed.supported_formats, ['openai', 'anthropic'], 'chat reaches it translated')
    t.same((slashed as any).native_formats, ['anthropic'])
    t.same(img.supported_formats, [], 'not a chat model')
    t.same(whisper.supported_formats, [])
    t.equal(slashed.context_length, 4096)
    t.equal(slashed.verifiability, 'TeeTLS')
  })
})

t.test('GET /v1/providers?model=', async (t) => {
  // Health and latency here come from the test's own requests only: an active probe (every 10 s by default)
  // would give C a latency or A a success at a moment that depends on how long the subtests took.
  const stack = await stackFor(t, PROVIDERS, { routing: { failure_threshold: 1 }, health: { probes: false } })

  t.test('is public and lists every provider of the model with every field of spec §2.4', async (t) => {
    const res = await get<ProviderEntry>(stack, '/v1/providers?model=chat')
    t.equal(res.status, 200)
    t.ok(typeof res.headers['x-request-id'] === 'string', 'x-request-id')
    t.equal(res.body.object, 'list')
    t.same((res.body.data ?? []).map((p) => p.address).sort(), [A, B, C])
    for (const p of res.body.data ?? []) {
      for (const field of PROVIDER_FIELDS) t.ok(Object.hasOwn(p, field), `${p.address} has ${field}`)
      t.type(p.is_healthy, 'boolean')
      t.type(p.uptime, 'number')
      t.ok(p.latency === null || typeof p.latency === 'number', 'latency numeric or not yet observed')
    }
    const byAddress = new Map((res.body.data ?? []).map((p) => [p.address, p]))
    t.match(byAddress.get(A), { trust_mode: 'standard', verifiability: '', max_completion_tokens: 1024, is_healthy: true, uptime: 100 })
    t.match(byAddress.get(B), { trust_mode: 'verified', verifiability: 'TeeTLS', max_completion_tokens: null, is_healthy: true })
    t.match(byAddress.get(C), { trust_mode: 'private', verifiability: 'TeeML', max_completion_tokens: null, is_healthy: true })
  })

  t.test('a model id with reserved characters is found when URL-encoded', async (t) => {
    const list = await providers(stack, SLASHED)
    t.same([...list.keys()], [B])
  })

  t.test('latency reports the observed time to first byte', async (t) => {
    t.equal((await providers(stack, 'chat')).get(C)!.latency, null, 'nothing observed yet')
    t.equal(await pinnedChat(stack, C), 200)
    const latency = (await providers(stack, 'chat')).get(C)!.latency
    t.type(latency, 'number')
    t.ok((latency ?? 0) >= 25, `at least the simulated 30 ms (got ${latency})`)
  })

  t.test('is_healthy turns false once a provider failed failure_threshold times, and provider_count still counts it', async (t) => {
    stack.sims.get(A)!.setOptions({ fault: 'status-500' })
    t.equal(await pinnedChat(stack, A), 502, 'the pinned request fails')
    const list = await providers(stack, 'chat')
    t.equal(list.get(A)!.is_healthy, false, 'A is unhealthy')
    t.ok(list.get(A)!.uptime < 100, `A uptime dropped (${list.get(A)!.uptime})`)
    t.equal(list.get(B)!.is_healthy, true, 'B unaffected')
    t.equal(list.get(C)!.is_healthy, true, 'C unaffected')
    t.equal((await models(stack)).get('chat')!.provider_count, 3, 'provider_count ignores health')
    t.equal((await models(stack)).get('img')!.provider_count, 1, 'A’s other model still counts it')
  })

  t.test('a missing model parameter is 400 invalid_request', async (t) => {
    for (const path of ['/v1/providers', '/v1/providers?model=', '/v1/providers?other=chat']) {
      expectError(t, await get(stack, path), 400, 'invalid_request', 'invalid_request_error', path)
    }
  })

  t.test('an unknown model is 404 model_not_found', async (t) => {
    expectError(t, await get(stack, '/v1/providers?model=no-such-model'), 404, 'model_not_found', 'not_found_error', 'unknown')
    expectError(t, await get(stack, '/v1/providers?model=CHAT'), 404, 'model_not_found', 'not_found_error', 'ids are case-sensitive')
  })
})

t.test('is_healthy counts consecutive failures up to failure_threshold, and recovers after the cooldown', async (t) => {
  // No probes: a probe's success between the two failures would reset the count (see above).
  const stack = await stackFor(t, PROVIDERS, { routing: { failure_threshold: 2, unhealthy_cooldown_ms: 1000 }, health: { probes: false } })
  stack.sims.get(A)!.setOptions({ fault: 'status-500' })
  t.equal(await pinnedChat(stack, A), 502)
  t.equal((await providers(stack, 'chat')).get(A)!.is_healthy, true, 'one failure of two: still healthy')
  t.equal(await pinnedChat(stack, A), 502)
  t.equal((await providers(stack, 'chat')).get(A)!.is_healthy, false, 'two failures: unhealthy')
  stack.sims.get(A)!.setOptions({ fault: 'none' })
  await sleep(1100)
  t.equal((await providers(stack, 'chat')).get(A)!.is_healthy, true, 'healthy again after the cooldown')
  t.equal(await pinnedChat(stack, A), 200)
  t.equal((await providers(stack, 'chat')).get(A)!.is_healthy, true)
})
