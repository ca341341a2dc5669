/**
 * POST /v1/images/generations through the real router to simulated providers, with the real `openai` client:
 * PNGs as b64_json and as URLs, billing of images × price counted from data[], the Image price ceiling (header
 * and deprecated body object), failover, and the headers and trace of every answer.
 */
import OpenAI from 'openai'
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { startStack } from '../helpers/stack.js'
import { A, atto, B, charges, IMAGE_MODEL, mediaProviders, PRICE_SORT } from './fixtures.js'

const PNG_SIGNATURE = '89504e470d0a1a0a'

t.test('images.generate: n PNGs as b64_json, billed n × price, trace, SVC-Res-Key and rate-limit headers', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0, defaultHeaders: PRICE_SORT })
  const { data, response } = await client.images.generate({ model: IMAGE_MODEL, prompt: 'a red fox', n: 3, response_format: 'b64_json' }).withResponse()
  t.equal(data.data?.length, 3)
  for (const image of data.data ?? []) t.equal(Buffer.from(image.b64_json!, 'base64').subarray(0, 8).toString('hex'), PNG_SIGNATURE)
  const trace = (data as any).x_svc_trace
  t.equal(trace.provider, A)
  t.equal(trace.billing.total_cost, '0.009', '3 images × 0.003')
  t.same(trace.usage, { images: 3 })
  t.match(response.headers.get('svc-res-key'), /^img-/)
  t.ok(response.headers.get('x-request-id'))
  t.ok(response.headers.get('x-ratelimit-remaining-requests'))
  const billed = await charges(stack)
  t.equal(billed.length, 1)
  t.equal(billed[0]!.amount, atto('0.009'))
})

t.test('images as URLs the provider serves; the Image price ceiling header and the deprecated body object', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0, defaultHeaders: { 'X-SVC-Provider-Max-Price-Usd-Image': '0.004' } })
  // A costs 0.003, B 0.005: a ceiling of 0.004 keeps only A, one of 0.002 keeps none.
  const res = await client.images.generate({ model: IMAGE_MODEL, prompt: 'a boat', response_format: 'url' })
  const url = res.data?.[0]?.url
  t.ok(url)
  const png = await request(url!)
  t.equal(png.headers['content-type'], 'image/png')
  t.equal(Buffer.from(await png.body.arrayBuffer()).subarray(0, 8).toString('hex'), PNG_SIGNATURE)
  t.equal((res as any).x_svc_trace.provider, A)
  const low = await request(stack.url + '/v1/images/generations', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, 'X-SVC-Provider-Max-Price-Usd-Image': '0.002' },
    body: JSON.stringify({ model: IMAGE_MODEL, prompt: 'x' }),
  })
  t.equal(low.statusCode, 400)
  t.equal(((await low.body.json()) as any).error.code, 'no_provider_within_max_price')
  // The deprecated body object: a pin to B with a ceiling it is within; billed 2 × 0.005.
  const pinned = await request(stack.url + '/v1/images/generations', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: IMAGE_MODEL, prompt: 'x', n: 2, provider: { address: B, max_price: { image: 0.006 } } }),
  })
  const body = (await pinned.body.json()) as any
  t.equal(pinned.statusCode, 200)
  t.equal(body.x_svc_trace.provider, B)
  t.equal(body.x_svc_trace.billing.total_cost, '0.01')
  t.equal(stack.sims.get(B)!.stats.lastBody.provider, undefined, 'the provider object is not forwarded')
})

t.test('a provider failing with 500 is retried on the next candidate; bad requests get enveloped 400s', async (t) => {
  const stack = await startStack(t, mediaProviders({ fault: 'status-500' }))
  const post = (body: object) =>
    request(stack.url + '/v1/images/generations', { method: 'POST', headers: { 'content-type': 'application/json', ...stack.auth, ...PRICE_SORT }, body: JSON.stringify(body) })
  const res = await post({ model: IMAGE_MODEL, prompt: 'x' })
  const body = (await res.body.json()) as any
  t.equal(res.statusCode, 200)
  t.same(body.x_svc_trace.attempts.map((a: any) => [a.provider, a.status]), [[A, 500], [B, 200]])
  t.equal(body.x_svc_trace.billing.total_cost, '0.005')
  for (const [bad, code] of [
    [{ model: IMAGE_MODEL }, 'invalid_request'],
    [{ model: IMAGE_MODEL, prompt: 'x', n: 0 }, 'invalid_request'],
    [{ model: IMAGE_MODEL, prompt: 'x', n: 11 }, 'invalid_request'],
    [{ model: IMAGE_MODEL, prompt: 'x', response_format: 'png' }, 'invalid_request'],
    [{ model: 'stt-model', prompt: 'x' }, 'model_not_supported_on_surface'],
  ] as const) {
    const r = await post(bad)
    t.equal(r.statusCode, 400, JSON.stringify(bad))
    t.equal(((await r.body.json()) as any).error.code, code)
  }
  t.equal((await charges(stack)).length, 1, 'only the served request is billed')
})

t.test('entries of data[] that hold no image (no b64_json or url) are not billed', async (t) => {
  const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEUlEQVR4nGOY7r0bK2IYWhIATyBnQStKud0AAAAASUVORK5CYII='
  const provider = await fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ created: 1, data: [{ b64_json: PNG }, {}, null, 7, 'x', { url: '' }, { revised_prompt: 'a cat' }, { url: 'http://127.0.0.1/a.png' }] }))
  })
  const stack = await startStack(t, [{ address: A, url: provider.url, models: [{ id: IMAGE_MODEL, type: 'text-to-image', price: { image: '0.003' } }] }])
  const res = await request(stack.url + '/v1/images/generations', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: IMAGE_MODEL, prompt: 'a cat', n: 8 }),
  })
  t.equal(res.statusCode, 200)
  const trace = ((await res.body.json()) as any).x_svc_trace
  t.same(trace.usage, { images: 2 }, 'the b64_json and the url entry')
  t.equal(trace.billing.total_cost, '0.006', '2 images × 0.003, not 8')
  t.same(
    (await charges(stack)).map((c) => c.amount),
    [atto('0.006')],
    'the ledger holds what the trace says',
  )
})
