/**
 * POST /v1/messages/count_tokens (issue 42) through the real router with the real @anthropic-ai/sdk client's
 * messages.countTokens: the Anthropic-native provider's own count (the simulator's, and a provider of the test's
 * own with a count no estimate would give), the router's estimate where no native provider can count or the one
 * asked gives no count, never billed, an sk- key required (x-api-key or Bearer), errors in Anthropic's envelope.
 */
import Anthropic from '@anthropic-ai/sdk'
import t from 'tap'
import { request } from 'undici'
import { estimateMessagesPromptTokens, parseMessagesRequest, type MessagesRequest } from '../../src/simulator/messages.js'
import { estimateInputTokens } from '../../src/surfaces/count-tokens.js'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const NATIVE = 'm-claude'
const OPENAI_ONLY = 'm-gpt'
const OWN = 'm-own'
const BROKEN = 'm-broken'

const PARAMS = {
  model: NATIVE,
  system: 'You are terse.',
  messages: [
    { role: 'user' as const, content: 'What is the capital of France? Answer in one word, please.' },
    { role: 'assistant' as const, content: 'Paris.' },
    { role: 'user' as const, content: [{ type: 'text' as const, text: 'And of Italy?' }] },
  ],
}

async function balance(stack: Stack): Promise<string> {
  const res = await request(stack.url + '/v1/account/balance', { headers: stack.mgmtAuth })
  return JSON.stringify(await res.body.json())
}

t.test('countTokens: the provider\'s own count where a native provider gives one, else the estimate', async (t) => {
  const seen: { path: string; headers: Record<string, unknown>; body: string }[] = []
  const own = await fakeProvider(t, (req, res, body) => {
    seen.push({ path: req.url ?? '', headers: req.headers, body })
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ input_tokens: 4242 }))
  })
  const broken = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"input_tokens":"many","x_svc_trace":{"provider":"0xf"}}')
  })
  const stack = await startStack(t, [
    { address: addr('a'), models: [{ id: NATIVE, formats: ['anthropic'] }] },
    { address: addr('b'), models: [{ id: OPENAI_ONLY, formats: ['openai'] }] },
    { address: addr('c'), url: own.url, models: [{ id: OWN, formats: ['anthropic'] }] },
    { address: addr('d'), url: broken.url, models: [{ id: BROKEN, formats: ['anthropic'] }] },
  ])
  const client = new Anthropic({ baseURL: stack.url, apiKey: stack.key, maxRetries: 0 })
  const before = await balance(stack)

  const { data, response } = await client.messages.countTokens(PARAMS).withResponse()
  const expected = estimateMessagesPromptTokens(parseMessagesRequest({ ...PARAMS, max_tokens: 1 }) as MessagesRequest)
  t.same(data, { input_tokens: expected }, 'the simulator\'s own count, as its messages answer would report it')
  t.equal(response.headers.get('x-svc-token-count'), 'provider')
  t.match(response.headers.get('x-ratelimit-remaining-requests'), /^\d+$/, 'the rate-limit headers')

  const ownCount = await client.messages.countTokens({ ...PARAMS, model: OWN }, { headers: { 'anthropic-beta': 'token-counting-2024-11-01' } }).withResponse()
  t.same(ownCount.data, { input_tokens: 4242 }, "the provider's number, whatever the estimate")
  t.equal(ownCount.response.headers.get('x-svc-token-count'), 'provider')
  t.equal(seen.length, 1)
  t.equal(seen[0]!.path, '/v1/messages/count_tokens', 'asked on its own count_tokens')
  t.same(JSON.parse(seen[0]!.body), { ...PARAMS, model: OWN }, 'the request as the client sent it')
  t.equal(seen[0]!.headers['anthropic-beta'], 'token-counting-2024-11-01', 'with the client\'s anthropic headers')
  t.type(seen[0]!.headers['anthropic-version'], 'string')
  t.notOk(seen[0]!.headers['x-api-key'] ?? seen[0]!.headers.authorization, 'never the client\'s key')
  // The router's deprecated `provider` object stays with the router.
  const withPrefs = await request(stack.url + '/v1/messages/count_tokens', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': stack.key },
    body: JSON.stringify({ ...PARAMS, model: OWN, provider: { sort: 'price' } }),
  })
  t.same(await withPrefs.body.json(), { input_tokens: 4242 })
  t.same(JSON.parse(seen[1]!.body), { ...PARAMS, model: OWN }, 'the provider object left out')

  for (const model of [OPENAI_ONLY, BROKEN]) {
    const answer = await client.messages.countTokens({ ...PARAMS, model }).withResponse()
    t.same(answer.data, { input_tokens: estimateInputTokens({ ...PARAMS }) }, `${model}: the router's estimate`)
    t.equal(answer.response.headers.get('x-svc-token-count'), 'estimate', `${model}: said to be one`)
  }
  t.equal(await balance(stack), before, 'nothing billed')

  // Bearer works as x-api-key does.
  const bearer = await request(stack.url + '/v1/messages/count_tokens', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify(PARAMS),
  })
  t.equal(bearer.statusCode, 200)
  t.same(await bearer.body.json(), { input_tokens: expected })
})

t.test('countTokens errors: no key, a management key, an unknown model, a bad body, in Anthropic\'s envelope', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: NATIVE, formats: ['anthropic'] }] }])
  const anon = await new Anthropic({ baseURL: stack.url, apiKey: 'sk-wrong', maxRetries: 0 }).messages.countTokens(PARAMS).catch((e: unknown) => e)
  t.ok(anon instanceof Anthropic.AuthenticationError)
  t.match(anon, { status: 401, error: { type: 'error', error: { code: 'invalid_api_key' } } })

  const mgmt = await new Anthropic({ baseURL: stack.url, apiKey: stack.mgmtKey, maxRetries: 0 }).messages.countTokens(PARAMS).catch((e: unknown) => e)
  t.ok(mgmt instanceof Anthropic.APIError, 'an mk- key cannot count')
  t.match((mgmt as { status: number }).status, /^40[13]$/)

  const client = new Anthropic({ baseURL: stack.url, apiKey: stack.key, maxRetries: 0 })
  const unknown = await client.messages.countTokens({ ...PARAMS, model: 'nope' }).catch((e: unknown) => e)
  t.ok(unknown instanceof Anthropic.NotFoundError)
  t.match(unknown, { status: 404, error: { type: 'error', error: { type: 'not_found_error', code: 'model_not_found' } } })

  for (const [what, body] of [
    ['not JSON', '{"model":'],
    ['no messages', JSON.stringify({ model: NATIVE })],
    ['an array', '[]'],
  ]) {
    const res = await request(stack.url + '/v1/messages/count_tokens', { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': stack.key }, body })
    t.equal(res.statusCode, 400, what)
    t.match(await res.body.json(), { type: 'error', error: { type: 'invalid_request_error', code: 'invalid_request' } }, what)
  }
  const missing = await request(stack.url + '/v1/messages/count_tokens', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(PARAMS) })
  t.equal(missing.statusCode, 401)
  t.match(await missing.body.json(), { type: 'error', error: { code: 'missing_authorization' } })
})

t.test('countTokens follows the pin and the trust mode; a malformed routing header is the 400 /v1/messages gives', async (t) => {
  const counts: Record<string, number> = {}
  const provider = (n: number) =>
    fakeProvider(t, (_req, res) => {
      counts[n] = (counts[n] ?? 0) + 1
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ input_tokens: n }))
    })
  const [one, two] = await Promise.all([provider(1111), provider(2222)])
  const stack = await startStack(t, [
    { address: addr('a'), url: one.url, trust_mode: 'standard', models: [{ id: OWN, formats: ['anthropic'] }] },
    { address: addr('b'), url: two.url, trust_mode: 'verified', verifiability: 'TeeML', models: [{ id: OWN, formats: ['anthropic'] }] },
  ])
  const count = async (headers: Record<string, string>) => {
    const res = await request(stack.url + '/v1/messages/count_tokens', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': stack.key, ...headers },
      body: JSON.stringify({ ...PARAMS, model: OWN }),
    })
    return { status: res.statusCode, source: res.headers['x-svc-token-count'], body: (await res.body.json()) as any }
  }
  t.same((await count({})).body, { input_tokens: 1111 }, 'unpinned: the first native provider in registry order')
  t.same((await count({ 'X-SVC-Provider-Address': addr('b').toUpperCase().replace('0X', '0x') })).body, { input_tokens: 2222 }, 'pinned: that provider counts')
  t.same((await count({ 'X-SVC-Provider-Trust-Mode': 'verified' })).body, { input_tokens: 2222 }, 'a trust floor passes over the standard provider')
  const none = await count({ 'X-SVC-Provider-Trust-Mode': 'private' })
  t.equal(none.source, 'estimate', 'no provider of the tier: the estimate, and no provider asked')
  t.same(counts, { 1111: 1, 2222: 2 })
  const bad = await count({ 'X-SVC-Provider-Trust-Mode': 'gold' })
  t.equal(bad.status, 400)
  t.match(bad.body, { type: 'error', error: { type: 'invalid_request_error', code: 'invalid_trust_mode' } })
  const badSort = await count({ 'X-SVC-Provider-Sort': 'cheap' })
  t.equal(badSort.status, 400)
  t.match(badSort.body, { type: 'error', error: { code: 'invalid_provider_header' } })
})
