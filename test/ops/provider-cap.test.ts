/**
 * The per-provider concurrency cap (issue #13 §3): past `max_concurrent_per_provider` attempts wait in a
 * bounded queue; a full queue, or a wait past `queue_timeout_ms`, moves on, and with no other candidate the
 * client gets 503 no_available_provider, nothing billed or held.
 */
import t from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'

async function stream(stack: Stack): Promise<{ status: number; code: string | null }> {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, stream: true }),
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  })
  const text = await res.body.text()
  return { status: res.statusCode, code: res.statusCode === 200 ? null : (JSON.parse(text) as { error: { code: string } }).error.code }
}

t.test('past the cap and its queue: 503 no_available_provider; the queued one runs once a slot frees', async (t) => {
  // 8 tokens at 10/s: each stream holds its slot for most of a second.
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }], sim: { tokensPerS: 10 } }], {
    upstream: { max_concurrent_per_provider: 2, queue_per_provider: 1, queue_timeout_ms: 5000 },
  })
  const results = await Promise.all([stream(stack), stream(stack), stream(stack), stream(stack)])
  const statuses = results.map((r) => r.status).sort()
  t.same(statuses, [200, 200, 200, 503], 'two run, one waits its turn, one is refused')
  t.same(results.filter((r) => r.status === 503).map((r) => r.code), ['no_available_provider'])
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})

t.test('a wait past queue_timeout_ms moves on: 503 no_available_provider', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }], sim: { tokensPerS: 10 } }], {
    upstream: { max_concurrent_per_provider: 1, queue_per_provider: 4, queue_timeout_ms: 150 },
  })
  const results = await Promise.all([stream(stack), stream(stack)])
  t.same(results.map((r) => r.status).sort(), [200, 503])
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
})
