/**
 * Budgets through the whole router under concurrent load: 500 requests at once on a key whose credit limit
 * covers 10 worst cases, then on an account whose balance does. `used` never passes the limit, the balance
 * never goes below zero, every refused request is a 402, and every served response has exactly its charge,
 * equal to the cost its trace shows. Streams and aborted streams are billed too.
 */
import t from 'tap'
import { request } from 'undici'
import { parseUsd, formatUsd } from '../../src/billing/money.js'
import { addr, DEFAULT_PRICE, startStack, type Stack } from '../helpers/stack.js'

const P = addr('1')
const MODEL = 'm-chat'
const N = 500

const stack: Stack = await startStack(t, [{ address: P, models: [{ id: MODEL }], sim: { ttftMs: 20, completionTokens: 4 } }], {
  limits: { requests_per_minute: 100_000 },
})

const BODY = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'count to four' }], max_tokens: 5 })
/** The reservation of BODY: every byte as a prompt token, plus max_tokens, at the default price. */
const WORST = BigInt(BODY.length) * parseUsd(String(DEFAULT_PRICE.prompt))! / 1_000_000n + 5n * parseUsd(String(DEFAULT_PRICE.completion))! / 1_000_000n

interface Answer {
  status: number
  json: { x_svc_trace?: { request_id: string; billing: { total_cost: string } }; error?: { code: string } }
}

async function post(auth: Record<string, string>, body = BODY): Promise<Answer> {
  const res = await request(`${stack.url}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body })
  return { status: res.statusCode, json: (await res.body.json()) as Answer['json'] }
}

async function recordsOf(account: string, keyId: string): Promise<{ requests: number; cost: bigint }> {
  const rows = await stack.router.store.ledger.usage(account, { fromDay: '2000-01-01', toDay: '2999-12-31', keyId })
  return { requests: rows.reduce((s, r) => s + r.requests, 0), cost: rows.reduce((s, r) => s + r.cost, 0n) }
}

function served(answers: Answer[]): { count: number; billed: bigint } {
  const ok = answers.filter((a) => a.status === 200)
  return { count: ok.length, billed: ok.reduce((s, a) => s + parseUsd(a.json.x_svc_trace!.billing.total_cost)!, 0n) }
}

t.test(`${N} concurrent requests on a key whose credit limit covers 10`, async (t) => {
  const limit = 10n * WORST
  const key = await stack.newApiKey({ creditLimit: limit })
  const answers = await Promise.all(Array.from({ length: N }, () => post(key.auth)))
  const refused = answers.filter((a) => a.status !== 200)
  t.ok(refused.every((a) => a.status === 402 && a.json.error?.code === 'credit_limit_exceeded'), 'every refused request is 402 credit_limit_exceeded')
  const { count, billed } = served(answers)
  t.ok(count >= 10, `at least the 10 worst cases were served (${count})`)
  const records = await recordsOf(stack.account, key.id)
  t.equal(records.requests, count, 'every served response has its usage record')
  t.equal(records.cost, billed, 'the ledger holds exactly what the traces show')
  t.ok(records.cost <= limit, `used ${formatUsd(records.cost)} ≤ limit ${formatUsd(limit)}`)
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing left held')
  const listed = await request(`${stack.url}/v1/api-keys`, { headers: stack.mgmtAuth })
  const keys = ((await listed.body.json()) as { data: { key_id: string; used: string }[] }).data
  t.equal(keys.find((k) => k.key_id === key.id)!.used, formatUsd(records.cost), "the key's used is its billed spend")
})

t.test(`${N} concurrent requests on an account whose balance covers 10`, async (t) => {
  const deposit = 10n * WORST
  const account = await stack.newAccount(formatUsd(deposit))
  const key = await stack.newApiKey({ account })
  const answers = await Promise.all(Array.from({ length: N }, () => post(key.auth)))
  const refused = answers.filter((a) => a.status !== 200)
  t.ok(refused.every((a) => a.status === 402 && a.json.error?.code === 'insufficient_balance'), 'every refused request is 402 insufficient_balance')
  const { count, billed } = served(answers)
  t.ok(count >= 10, `at least the 10 worst cases were served (${count})`)
  const totals = await stack.router.store.ledger.totals(account)
  t.ok(totals.spent <= totals.deposited, 'the balance never went below zero')
  t.equal(totals.spent, billed, 'the journal holds exactly what the traces show')
  t.equal((await recordsOf(account, key.id)).requests, count)
  const journal = await stack.router.store.ledger.journal(account)
  t.equal(journal.filter((e) => e.kind === 'charge').length, count, 'one charge per served response')
  t.equal(new Set(journal.filter((e) => e.kind === 'charge').map((e) => e.requestId)).size, count, 'no request billed twice')
})

t.test('streams are billed before [DONE]; a stream the client abandons is billed for what was produced', async (t) => {
  const key = await stack.newApiKey()
  const res = await request(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...key.auth, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true }),
  })
  const text = await res.body.text()
  t.ok(text.endsWith('data: [DONE]\n\n'))
  const traceEvent = text.split('\n\n').find((e) => e.includes('x_svc_trace'))!
  const trace = (JSON.parse(traceEvent.slice('data: '.length)) as { x_svc_trace: { billing: { total_cost: string } } }).x_svc_trace
  const records = await recordsOf(stack.account, key.id)
  t.equal(records.requests, 1)
  t.equal(formatUsd(records.cost), trace.billing.total_cost, 'the trace shows what the ledger recorded')

  // A slow stream the client walks away from after the first event.
  stack.sims.get(P)!.setOptions({ tokensPerS: 20, completionTokens: 40 })
  t.teardown(() => stack.sims.get(P)!.setOptions({ tokensPerS: 0, completionTokens: 4 }))
  const abandoning = await stack.newApiKey()
  const controller = new AbortController()
  const partial = await request(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...abandoning.auth, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true }),
    signal: controller.signal,
  })
  let got = ''
  for await (const chunk of partial.body) {
    got += String(chunk)
    if (got.split('\n\n').length > 3) break
  }
  controller.abort()
  const deadline = Date.now() + 5000
  while ((await recordsOf(stack.account, abandoning.id)).requests === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  const billed = await recordsOf(stack.account, abandoning.id)
  t.equal(billed.requests, 1, 'the abandoned stream is billed')
  t.ok(billed.cost > 0n, 'for what the provider produced')
  t.ok(billed.cost < WORST * 100n, 'not for a whole answer it never produced')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing left held')
})

t.test('a request that fails everywhere is not billed and releases its hold', async (t) => {
  const key = await stack.newApiKey()
  stack.sims.get(P)!.setOptions({ fault: 'status-500' })
  t.teardown(() => stack.sims.get(P)!.setOptions({ fault: 'none' }))
  const answer = await post(key.auth)
  t.equal(answer.status, 502)
  t.equal((await recordsOf(stack.account, key.id)).requests, 0)
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})

t.test('clients that walk away at random moments leave no reservation behind and are billed at most once', async (t) => {
  stack.sims.get(P)!.setOptions({ tokensPerS: 200, completionTokens: 12 })
  t.teardown(() => stack.sims.get(P)!.setOptions({ tokensPerS: 0, completionTokens: 4 }))
  const key = await stack.newApiKey()
  const runs = Array.from({ length: 60 }, async (_, i) => {
    const controller = new AbortController()
    // Anywhere from before the request is admitted to after the answer ended.
    const timer = setTimeout(() => controller.abort(), (i * 7) % 120)
    try {
      const res = await request(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...key.auth, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: i % 2 === 0, max_tokens: 12 }),
        signal: controller.signal,
      })
      await res.body.text()
      return res.statusCode === 200 ? 'served' : 'refused'
    } catch {
      return 'aborted'
    } finally {
      clearTimeout(timer)
    }
  })
  const outcomes = await Promise.all(runs)
  t.ok(outcomes.includes('aborted'), 'some clients walked away')
  // Settlements of abandoned streams land shortly after the abort reaches the router.
  const deadline = Date.now() + 5000
  while (stack.router.ledger.reserved(stack.account) !== 0n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing left held')
  const journal = await stack.router.store.ledger.journal(stack.account)
  const charges = journal.filter((e) => e.kind === 'charge' && e.keyId === key.id)
  const ids = new Set(charges.map((c) => c.requestId))
  t.equal(ids.size, charges.length, 'no request billed twice')
  const servedCount = outcomes.filter((o) => o === 'served').length
  t.ok(charges.length >= servedCount, `every served answer is billed (${charges.length} charges, ${servedCount} served)`)
  t.ok(charges.length <= 60)
})

t.test(`a burst of ${N} on a capped key spends at least 70% of the cap before refusals, never more than all of it`, async (t) => {
  const limit = 10n * WORST
  const key = await stack.newApiKey({ creditLimit: limit })
  const answers = await Promise.all(Array.from({ length: N }, () => post(key.auth)))
  const refused = answers.filter((a) => a.status !== 200)
  t.ok(refused.every((a) => a.status === 402 && a.json.error?.code === 'credit_limit_exceeded'), 'every refused request is 402 credit_limit_exceeded')
  const records = await recordsOf(stack.account, key.id)
  t.ok(records.cost <= limit, `used ${formatUsd(records.cost)} ≤ limit ${formatUsd(limit)}`)
  // Each request holds its worst case while in flight; those blocked only by such holds wait for them.
  t.ok(records.cost * 10n >= limit * 7n, `spent ${formatUsd(records.cost)} of ${formatUsd(limit)} (≥ 70%)`)
  t.ok(records.cost + WORST > limit, 'refusals start only when not even one more worst case fits beside what is spent')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing left held')
  t.equal(stack.router.ledger.waiting, 0, 'nobody left waiting')
})

t.test('a credit limit changed while a request waits for room binds that request', async (t) => {
  // As above: the first request holds most of the limit on a slow provider while the second waits for it.
  const slow = await startStack(t, [{ address: P, models: [{ id: MODEL }], sim: { ttftMs: 600, completionTokens: 4 } }])
  const sim = slow.sims.get(P)!
  const send = async (auth: Record<string, string>): Promise<Answer> => {
    const res = await request(`${slow.url}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: BODY })
    return { status: res.statusCode, json: (await res.body.json()) as Answer['json'] }
  }
  const patch = async (keyId: string, creditLimit: bigint): Promise<void> => {
    const res = await request(`${slow.url}/v1/api-keys/${keyId}`, {
      method: 'PATCH',
      headers: { ...slow.mgmtAuth, 'content-type': 'application/json' },
      body: JSON.stringify({ credit_limit: formatUsd(creditLimit) }),
    })
    t.equal(res.statusCode, 200)
    await res.body.dump()
  }
  const waitingBehind = async (auth: Record<string, string>): Promise<[Promise<Answer>, Promise<Answer>]> => {
    const first = send(auth)
    await new Promise((resolve) => setTimeout(resolve, 100))
    const second = send(auth)
    await new Promise((resolve) => setTimeout(resolve, 100))
    t.equal(slow.router.ledger.waiting, 1, 'the second request waits for the first one’s hold')
    return [first, second]
  }

  // Lowered below what the first request holds: the waiting one can no longer fit, and is refused at once.
  const lowered = await slow.newApiKey({ creditLimit: (3n * WORST) / 2n })
  const [first, second] = await waitingBehind(lowered.auth)
  await patch(lowered.id, WORST / 2n)
  const b = await second
  t.equal(b.status, 402, 'the waiting request is refused under the new limit')
  t.equal(b.json.error?.code, 'credit_limit_exceeded')
  t.equal(sim.stats.requests, 1, 'it was never sent')
  const a = await first
  t.equal(a.status, 200, 'the request already sent runs to its end')
  const journal = await slow.router.store.ledger.journal(slow.account)
  t.same(journal.filter((e) => e.kind === 'charge').map((e) => e.requestId), [a.json.x_svc_trace!.request_id], 'only the first is billed')

  // Raised: the waiting request fits beside the first and is sent without waiting for it to end.
  const raised = await slow.newApiKey({ creditLimit: (3n * WORST) / 2n })
  const [third, fourth] = await waitingBehind(raised.auth)
  await patch(raised.id, 3n * WORST)
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(slow.router.ledger.waiting, 0, 'the waiting request holds its room at once')
  t.equal(sim.stats.requests, 3, 'and is sent while the one before it is still under way')
  const [c, d] = await Promise.all([third, fourth])
  t.same([c.status, d.status], [200, 200])
  t.equal(slow.router.ledger.reserved(slow.account), 0n, 'nothing left held')
})

t.test('a request waiting for room when its key is revoked is refused with 401, never sent or billed', async (t) => {
  // A provider slow enough for the first request to hold the key's whole limit while the second waits.
  const slow = await startStack(t, [{ address: P, models: [{ id: MODEL }], sim: { ttftMs: 600, completionTokens: 4 } }])
  const sim = slow.sims.get(P)!
  const key = await slow.newApiKey({ creditLimit: (3n * WORST) / 2n })
  const send = async (): Promise<Answer> => {
    const res = await request(`${slow.url}/v1/chat/completions`, { method: 'POST', headers: { ...key.auth, 'content-type': 'application/json' }, body: BODY })
    return { status: res.statusCode, json: (await res.body.json()) as Answer['json'] }
  }
  const first = send()
  await new Promise((resolve) => setTimeout(resolve, 100))
  const second = send()
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(slow.router.ledger.waiting, 1, 'the second request waits for the first one’s hold')
  const revoked = await request(`${slow.url}/v1/api-keys/${key.id}`, { method: 'DELETE', headers: slow.mgmtAuth })
  t.equal(revoked.statusCode, 200)
  await revoked.body.dump()
  const [a, b] = await Promise.all([first, second])
  t.equal(a.status, 200, 'the request already sent runs to its end')
  t.equal(b.status, 401, 'the waiting one is refused at once')
  t.equal(b.json.error?.code, 'invalid_api_key')
  t.equal(sim.stats.requests, 1, 'only the first reached the provider')
  const journal = await slow.router.store.ledger.journal(slow.account)
  t.same(
    journal.filter((e) => e.kind === 'charge').map((e) => e.requestId),
    [a.json.x_svc_trace!.request_id],
    'only the first is billed',
  )
  t.equal(slow.router.ledger.reserved(slow.account), 0n, 'nothing left held')
  t.equal(slow.router.ledger.waiting, 0)
})
