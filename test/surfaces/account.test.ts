/**
 * GET /v1/account/balance, /funds and /usage/stats through the real router. Charges are written straight to
 * the store's ledger, as the billing stage will write them, so the reads are checked against known amounts.
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { parseUsd } from '../../src/billing/money.js'
import type { Charge } from '../../src/store/store.js'
import { call, isError, oneProviderStack, P, type Answer } from '../auth/http.js'

const stack = await oneProviderStack(t)
const store = stack.router.store.ledger

const usd = (text: string): bigint => parseUsd(text)!
const DAY = 86_400_000
const day = (ms: number): string => new Date(ms).toISOString().slice(0, 10)

/** A fresh account with a deposit, an mk- key with account:read, and two sk- keys. */
async function account(deposit = '10') {
  const wallet = await stack.newAccount(deposit)
  const mk = await stack.newMgmtKey(['account:read'], wallet)
  const k1 = await stack.newApiKey({ account: wallet })
  const k2 = await stack.newApiKey({ account: wallet })
  const get = (path: string): Promise<Answer> => call(stack, 'GET', path, { headers: mk.auth })
  const charge = (c: Omit<Partial<Charge>, 'cost'> & { keyId: string; cost: string }) =>
    store.recordCharge({
      requestId: 'req_' + randomUUID(),
      accountId: wallet,
      model: 'm-chat',
      provider: P,
      at: Date.now(),
      promptTokens: 0,
      completionTokens: 0,
      images: 0,
      audioMs: 0,
      ...c,
      cost: usd(c.cost),
    })
  return { wallet, mk, k1, k2, get, charge }
}

t.test('balance of a new account: its deposit, exactly', async (t) => {
  const a = await account('10.000000000000000001')
  const answer = await a.get('/v1/account/balance')
  t.equal(answer.status, 200)
  t.strictSame(answer.json, {
    deposit_balance: '10.000000000000000001',
    credit_balance: '0',
    total_balance: '10.000000000000000001',
    currency: 'USD',
  })
})

t.test('balance after deposits, credits and charges: charges draw on credit first', async (t) => {
  const a = await account('10')
  await store.addFunds(a.wallet, 'deposit', usd('5'), '', Date.now())
  await store.addFunds(a.wallet, 'credit', usd('2'), 'promo', Date.now())
  await a.charge({ keyId: a.k1.id, cost: '1.5' })
  t.strictSame((await a.get('/v1/account/balance')).json, {
    deposit_balance: '15',
    credit_balance: '0.5',
    total_balance: '15.5',
    currency: 'USD',
  })
  await a.charge({ keyId: a.k2.id, cost: '0.75' })
  t.strictSame((await a.get('/v1/account/balance')).json, {
    deposit_balance: '14.75',
    credit_balance: '0',
    total_balance: '14.75',
    currency: 'USD',
  })
})

t.test('funds: deposit, reserved (none until billing), spent, available', async (t) => {
  const a = await account('3')
  await store.addFunds(a.wallet, 'credit', usd('1'), '', Date.now())
  await a.charge({ keyId: a.k1.id, cost: '0.000001' })
  const answer = await a.get('/v1/account/funds')
  t.equal(answer.status, 200)
  t.strictSame(answer.json, {
    deposit: '3',
    credit: '1',
    reserved: '0',
    spent: '0.000001',
    available: '3.999999',
    currency: 'USD',
  })
})

t.test('accounts see only their own ledger', async (t) => {
  const a = await account('1')
  const b = await account('2')
  await a.charge({ keyId: a.k1.id, cost: '0.5' })
  t.equal((await b.get('/v1/account/balance')).json.total_balance, '2')
  t.equal((await b.get('/v1/account/usage/stats')).json.totals.requests, 0)
  t.ok(isError(await b.get(`/v1/account/usage/stats?api_key_id=${a.k1.id}`), 404, 'api_key_not_found'), "another account's key")
})

t.test('usage stats: totals and groups by day, model and key', async (t) => {
  const a = await account('100')
  const now = Date.now()
  await a.charge({ keyId: a.k1.id, at: now, model: 'm-chat', promptTokens: 10, completionTokens: 5, cost: '0.1' })
  await a.charge({ keyId: a.k1.id, at: now, model: 'm-chat', promptTokens: 1, completionTokens: 2, cost: '0.2' })
  await a.charge({ keyId: a.k2.id, at: now - DAY, model: 'm-image', images: 2, cost: '0.006' })
  await a.charge({ keyId: a.k2.id, at: now - 2 * DAY, model: 'm-audio', audioMs: 12_345, cost: '0.0012345' })
  const answer = await a.get('/v1/account/usage/stats')
  t.equal(answer.status, 200)
  const s = answer.json
  t.equal(s.object, 'usage_stats')
  t.equal(s.end_date, day(now))
  t.equal(s.start_date, day(now - 29 * DAY), 'thirty days by default')
  t.equal(s.currency, 'USD')
  t.strictSame(s.totals, {
    requests: 4,
    prompt_tokens: 11,
    completion_tokens: 7,
    total_tokens: 18,
    images: 2,
    audio_seconds: 12.345,
    spend: '0.3072345',
  })
  t.strictSame(
    s.by_day.map((d: { date: string; requests: number; spend: string }) => [d.date, d.requests, d.spend]),
    [
      [day(now - 2 * DAY), 1, '0.0012345'],
      [day(now - DAY), 1, '0.006'],
      [day(now), 2, '0.3'],
    ],
  )
  t.strictSame(
    s.by_model.map((m: { model: string; spend: string }) => [m.model, m.spend]),
    [
      ['m-audio', '0.0012345'],
      ['m-chat', '0.3'],
      ['m-image', '0.006'],
    ],
  )
  const byKey = new Map(s.by_key.map((k: { api_key_id: string; spend: string }) => [k.api_key_id, k.spend]))
  t.strictSame(byKey, new Map([[a.k1.id, '0.3'], [a.k2.id, '0.0072345']]))
  t.equal(s.data.length, 3, 'one row per (day, model, key)')
  t.match(s.data.find((r: { model: string }) => r.model === 'm-chat'), {
    date: day(now),
    api_key_id: a.k1.id,
    requests: 2,
    prompt_tokens: 11,
    completion_tokens: 7,
    total_tokens: 18,
    spend: '0.3',
  })
})

t.test('usage stats filters: start_date, end_date, api_key_id, model', async (t) => {
  const a = await account('100')
  const now = Date.now()
  await a.charge({ keyId: a.k1.id, at: now, model: 'm-chat', cost: '1' })
  await a.charge({ keyId: a.k2.id, at: now, model: 'm-other', cost: '2' })
  await a.charge({ keyId: a.k1.id, at: now - 40 * DAY, model: 'm-chat', cost: '4' })
  const spend = async (query: string): Promise<string> => (await a.get(`/v1/account/usage/stats?${query}`)).json.totals.spend
  t.equal(await spend(''), '3', 'the last thirty days')
  t.equal(await spend(`start_date=${day(now - 60 * DAY)}`), '7')
  t.equal(await spend(`start_date=${day(now - 60 * DAY)}&end_date=${day(now - DAY)}`), '4')
  t.equal(await spend(`api_key_id=${a.k2.id}`), '2')
  t.equal(await spend('model=m-chat'), '1')
  t.equal(await spend(`model=m-chat&start_date=${day(now - 60 * DAY)}&api_key_id=${a.k1.id}`), '5')
  t.equal(await spend('model=nothing'), '0')
  const echoed = (await a.get(`/v1/account/usage/stats?model=m-chat&api_key_id=${a.k1.id}`)).json
  t.equal(echoed.model, 'm-chat')
  t.equal(echoed.api_key_id, a.k1.id)
})

t.test('usage stats: bad parameters are 400s naming the parameter', async (t) => {
  const a = await account('1')
  for (const [query, message] of [
    ['start_date=2025-13-01', /start_date must be a date as YYYY-MM-DD/],
    ['end_date=2025-02-30', /end_date must be a date/],
    ['start_date=yesterday', /start_date/],
    ['start_date=2025-02-01&end_date=2025-01-01', /start_date \(2025-02-01\) is after end_date/],
  ] as [string, RegExp][]) {
    const answer = await a.get(`/v1/account/usage/stats?${query}`)
    t.ok(isError(answer, 400, 'invalid_request'), query)
    t.match(answer.json.error.message, message)
  }
  t.ok(isError(await a.get(`/v1/account/usage/stats?api_key_id=${randomUUID()}`), 404, 'api_key_not_found'))
})

t.test('account endpoints need account:read', async (t) => {
  const a = await account('1')
  const keysOnly = await stack.newMgmtKey(['keys:read', 'keys:create', 'keys:manage'], a.wallet)
  for (const path of ['/v1/account/balance', '/v1/account/funds', '/v1/account/usage/stats']) {
    t.ok(isError(await call(stack, 'GET', path, { headers: keysOnly.auth }), 403, 'insufficient_scope'), path)
    t.equal((await a.get(path)).status, 200, path)
  }
})
