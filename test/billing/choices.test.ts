/**
 * Chat requests with `n` > 1: the provider generates n choices and bills every token of each, so the hold covers
 * n times the output bound, the bill is the provider's whole usage (never capped down to one choice), and a key
 * whose limit covers one choice but not n is refused before anything is sent. The provider is a small http
 * server that honours `n` and `max_tokens` exactly.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { parseUsd } from '../../src/billing/money.js'
import { addr, DEFAULT_PRICE, startStack, type TestProvider } from '../helpers/stack.js'

const P = addr('c')
const MODEL = 'm-choices'
const PROMPT_TOKENS = 7

let calls = 0
const server = createServer((req, res) => {
  let text = ''
  req.on('data', (c: Buffer) => (text += c.toString()))
  req.on('end', () => {
    calls++
    const body = JSON.parse(text) as { n?: number; max_tokens: number }
    const n = body.n ?? 1
    const choices = Array.from({ length: n }, (_, i) => ({ index: i, message: { role: 'assistant', content: 'x'.repeat(body.max_tokens) }, finish_reason: 'length' }))
    const completion = n * body.max_tokens
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ id: 'chatcmpl-n', object: 'chat.completion', created: 1, model: MODEL, choices, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: completion, total_tokens: PROMPT_TOKENS + completion } }))
  })
})
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

const stack = await startStack(t, [{ address: P, url, models: [{ id: MODEL }] } as TestProvider])

/** Atto-USD per token at the default prices (USD per million tokens). */
const PROMPT = parseUsd(String(DEFAULT_PRICE.prompt))! / 1_000_000n
const COMPLETION = parseUsd(String(DEFAULT_PRICE.completion))! / 1_000_000n

function body(extra: Record<string, unknown>): string {
  return JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100, ...extra })
}

async function post(auth: Record<string, string>, text: string) {
  const res = await request(`${stack.url}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: text })
  return { status: res.statusCode, json: (await res.body.json()) as any }
}

t.test('n choices are held and billed in full: the provider was paid for every token of every choice', async (t) => {
  const key = await stack.newApiKey()
  const { status, json } = await post(key.auth, body({ n: 10 }))
  t.equal(status, 200)
  t.equal(json.choices.length, 10)
  const billing = json.x_svc_trace.billing
  t.notOk(billing.capped, 'not capped at a one-choice hold')
  const expected = BigInt(PROMPT_TOKENS) * PROMPT + 1000n * COMPLETION
  t.equal(parseUsd(billing.total_cost), expected, 'prompt tokens + 10 × 100 completion tokens at the offer price')
  const listed = await request(`${stack.url}/v1/api-keys`, { headers: stack.mgmtAuth })
  const keys = ((await listed.body.json()) as { data: { key_id: string; used: string }[] }).data
  t.equal(parseUsd(keys.find((k) => k.key_id === key.id)!.used), expected, 'the key is charged what the trace shows')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing left held')
})

t.test('a key whose limit covers one choice but not n is refused before the provider is called', async (t) => {
  const text = body({ n: 10 })
  const oneChoice = BigInt(Buffer.byteLength(text)) * PROMPT + 100n * COMPLETION
  const key = await stack.newApiKey({ creditLimit: 2n * oneChoice })
  const before = calls
  const refused = await post(key.auth, text)
  t.equal(refused.status, 402)
  t.equal(refused.json.error.code, 'credit_limit_exceeded')
  t.equal(calls, before, 'nothing was sent')
  t.equal((await post(key.auth, body({ n: 1 }))).status, 200, 'one choice fits the same limit')
})

t.test('n must be an integer from 1 to 128', async (t) => {
  const key = await stack.newApiKey()
  const before = calls
  for (const n of [0, -1, 129, 2.5, '2', true, {}]) {
    const { status, json } = await post(key.auth, body({ n }))
    t.equal(status, 400, `n = ${JSON.stringify(n)}`)
    t.equal(json.error.code, 'invalid_request')
  }
  t.equal(calls, before, 'none was sent')
  t.equal((await post(key.auth, body({ n: null }))).status, 200, 'null is unset')
  t.equal((await post(key.auth, body({ n: 128, max_tokens: 1 }))).status, 200, '128 is allowed')
})
