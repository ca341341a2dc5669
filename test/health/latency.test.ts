/**
 * Latency (issue #13 §2): the catalog's latency is the EWMA of time to first byte, and sort=latency follows a
 * provider that becomes slow once the routing index is rebuilt from the moved stats (in the pool, off the loop).
 */
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const A = addr('a')
const B = addr('b')

async function served(stack: Stack, headers: Record<string, string>): Promise<string> {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, ...headers },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
  })
  const body = (await res.body.json()) as { x_svc_trace: { provider: string } }
  return body.x_svc_trace.provider
}

async function latencies(stack: Stack): Promise<Map<string, number | null>> {
  const res = await request(`${stack.url}/v1/providers?model=${MODEL}`)
  const body = (await res.body.json()) as { data: { address: string; latency: number | null }[] }
  return new Map(body.data.map((p) => [p.address, p.latency]))
}

t.test('sort=latency follows a provider that becomes slow', async (t) => {
  const stack = await startStack(
    t,
    [
      { address: A, models: [{ id: MODEL }] },
      { address: B, models: [{ id: MODEL }] },
    ],
    { routing: { stats_rebuild_ms: 50, latency_ewma_alpha: 1 }, health: { probes: false } },
  )
  t.same([...(await latencies(stack)).values()], [null, null], 'no latency before any observation')
  for (const p of [A, B]) t.equal(await served(stack, { 'x-svc-provider-address': p }), p)
  const before = await latencies(stack)
  t.type(before.get(A), 'number')
  t.type(before.get(B), 'number')

  stack.sims.get(A)!.setOptions({ ttftMs: 300 })
  t.equal(await served(stack, { 'x-svc-provider-address': A }), A)
  const after = await latencies(stack)
  t.ok(after.get(A)! >= 250, `A's latency follows its slowness (${after.get(A)} ms)`)
  t.ok(after.get(A)! > after.get(B)!)

  // The index is rebuilt from the moved stats within stats_rebuild_ms; then sort=latency picks B every time.
  let picks: string[] = []
  const deadline = Date.now() + 5000
  while (Date.now() < deadline) {
    picks = [await served(stack, { 'x-svc-provider-sort': 'latency' }), await served(stack, { 'x-svc-provider-sort': 'latency' })]
    if (picks.every((p) => p === B)) break
    await sleep(60)
  }
  t.same(picks, [B, B], 'sort=latency routes to the provider that stayed fast')
})
