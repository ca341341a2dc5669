/**
 * A JSON answer is held whole and judged before anything reaches the client: a 200 whose body is valid JSON
 * but no answer of the format (an error object sent with a 200, as some providers and proxies do) is the
 * provider failing, like a body that is not JSON: the next candidate answers, or 502 provider_error
 * (invalid_json) with nothing billed. Never relayed and billed as if it were a completion.
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const BAD = addr('d')
const GOOD = addr('e')
const CHEAP = { prompt: 0.1, completion: 0.2 }
const DEAR = { prompt: 0.5, completion: 1 }

const NOT_ANSWERS = {
  openai: [
    ['an OpenAI error object', JSON.stringify({ error: { message: 'overloaded', type: 'server_error' } })],
    ['an empty object', '{}'],
    ['choices that are not a list', JSON.stringify({ id: 'x', object: 'chat.completion', choices: 'none' })],
  ],
  anthropic: [
    ['an Anthropic error object', JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })],
    ['an empty object', '{}'],
  ],
} as const

function provider(t: Test, body: () => string): Promise<string> {
  return fakeProvider(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(body())
  }).then((p) => p.url)
}

async function ask(stack: Stack, surface: 'chat' | 'messages') {
  const res = await request(stack.url + (surface === 'chat' ? '/v1/chat/completions' : '/v1/messages'), {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', 'anthropic-version': '2023-06-01', ...stack.auth },
    body: JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
  })
  return { status: res.statusCode, json: (await res.body.json()) as any }
}

for (const [surface, format] of [['chat', 'openai'], ['messages', 'anthropic']] as const) {
  t.test(`${surface} over an ${format} provider: a 200 that is no answer fails over, or is a 502 billed nothing`, async (t) => {
    let body = ''
    const url = await provider(t, () => body)
    const formats = [format]
    const settings = { routing: { failure_threshold: 100 }, health: { probes: false } }
    const pair = await startStack(
      t,
      [
        { address: BAD, url, models: [{ id: MODEL, formats, price: CHEAP }] },
        { address: GOOD, models: [{ id: MODEL, formats, price: DEAR }] },
      ],
      settings,
    )
    const alone = await startStack(t, [{ address: BAD, url, models: [{ id: MODEL, formats, price: CHEAP }] }], settings)
    for (const [label, text] of NOT_ANSWERS[format]) {
      body = text
      const served = await ask(pair, surface)
      t.equal(served.status, 200, `${label}: the next candidate answered`)
      t.same(served.json.x_svc_trace.attempts, [
        { provider: BAD, status: 200, error: 'invalid_json' },
        { provider: GOOD, status: 200 },
      ])
      const refused = await ask(alone, surface)
      t.equal(refused.status, 502, `${label}: alone, a 502`)
      t.equal(refused.json.error.code, 'provider_error')
      t.equal(refused.json.x_svc_trace.billing.total_cost, '0')
    }
    const charges = (await alone.router.store.ledger.journal(alone.account)).filter((e) => e.kind === 'charge')
    t.equal(charges.length, 0, 'nothing billed')
    t.equal(alone.router.ledger.reserved(alone.account), 0n, 'no reservation left behind')
  })
}
