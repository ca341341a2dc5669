/**
 * Fuzzed input through the real router: valid chat bodies mutated at random (bytes flipped, cut, nested,
 * keys repeated, odd unicode) with random routing header values. Every answer is either a success or an error
 * in the envelope with a request_id, nothing hangs, no reservation is left behind, and a normal request still
 * succeeds afterwards. The router runs in this process: a throw that escaped a guard would end the test run.
 */
import t from 'tap'
import { request } from 'undici'
import { addr, startStack } from '../helpers/stack.js'
import { mutate, seeded } from '../helpers/seeded.js'

const MODEL = 'm-chat'
const BASE = JSON.stringify({
  model: MODEL,
  messages: [
    { role: 'system', content: 'be brief' },
    { role: 'user', content: [{ type: 'text', text: 'hello' }] },
  ],
  max_tokens: 3,
  temperature: 0.5,
  stream: true,
  provider: { sort: 'price', max_price: { prompt: 1 } },
})

const HEADER_NAMES = [
  'x-svc-provider-sort',
  'x-svc-provider-trust-mode',
  'x-svc-provider-allow-fallbacks',
  'x-svc-provider-require-parameters',
  'x-svc-provider-max-price-usd-prompt',
  'x-svc-provider-max-price-usd-completion',
  'x-svc-provider-address',
]
const HEADER_VALUES = ['price', 'latency', 'PRICE', 'true', 'False', '1', '', ' ', '0.5', '-1', 'NaN', '1e3', '0x' + 'a'.repeat(40), 'private', 'é', '\t']
const INSERTS = ['[', ']', '{', '}', '"', '\\', ',', ':', '"model":"x",', '"__proto__":{}', '\u0000', '\u2028', '\ud83d\ude00', '99999999999999999999', '[[[[[[[[', 'null', 'true']

t.test('fuzzed bodies and routing headers: every answer is a success or an enveloped error, nothing is lost', async (t) => {
  const stack = await startStack(t, [
    { address: addr('a'), models: [{ id: MODEL, supported_parameters: ['temperature'] }] },
    { address: addr('b'), trust_mode: 'private', verifiability: 'TeeML', models: [{ id: MODEL }] },
  ])
  const random = seeded(7)
  const seen = new Map<number, number>()
  for (let i = 0; i < 400; i++) {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...stack.auth }
    const n = Math.floor(random() * 3)
    for (let h = 0; h < n; h++) {
      headers[HEADER_NAMES[Math.floor(random() * HEADER_NAMES.length)]!] = HEADER_VALUES[Math.floor(random() * HEADER_VALUES.length)]!
    }
    const body = random() < 0.9 ? mutate(random, BASE, INSERTS) : BASE
    let res
    try {
      res = await request(stack.url + '/v1/chat/completions', { method: 'POST', headers, body, headersTimeout: 10_000, bodyTimeout: 10_000 })
    } catch (err) {
      // undici refuses to send some header values itself (a NUL, a newline): not the router's answer to judge.
      if ((err as { code?: string }).code === 'UND_ERR_INVALID_ARG') continue
      throw err
    }
    const text = await res.body.text()
    seen.set(res.statusCode, (seen.get(res.statusCode) ?? 0) + 1)
    if (res.statusCode === 200) continue
    let parsed: { error?: { code?: unknown }; request_id?: unknown }
    try {
      parsed = JSON.parse(text)
    } catch {
      t.fail(`request ${i}: a ${res.statusCode} that is not the JSON envelope: ${text.slice(0, 200)}`)
      continue
    }
    if (typeof parsed.error?.code !== 'string' || typeof parsed.request_id !== 'string' || res.statusCode >= 500) {
      t.fail(`request ${i}: ${res.statusCode} ${text.slice(0, 300)} for ${JSON.stringify(body).slice(0, 300)}`)
    }
  }
  t.ok((seen.get(400) ?? 0) > 50, `most mutations are refused with 400 (${JSON.stringify([...seen])})`)
  t.ok((seen.get(200) ?? 0) > 0, 'some still succeed')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
  const ok = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  })
  t.equal(ok.statusCode, 200)
  await ok.body.text()
})
