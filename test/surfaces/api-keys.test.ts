/**
 * GET/POST /v1/api-keys and PATCH/DELETE /v1/api-keys/:id (spec §2.1, §4.3–4.5) through the real router:
 * the key object field by field, the secret shown once, strict validation naming the field, and isolation
 * between accounts.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import { parseUsd } from '../../src/billing/money.js'
import { call, chat, isError, oneProviderStack, P, type Answer } from '../auth/http.js'

const stack = await oneProviderStack(t)
const mk = stack.mgmtAuth

const FIELDS = [
  'key_id',
  'key_preview',
  'name',
  'trust_mode',
  'status',
  'revoked',
  'credit_limit',
  'used',
  'currency',
  'reset_period',
  'expires_at',
  'allowed_models',
  'allowed_providers',
  'created_at',
].sort()

const create = (body: unknown, headers = mk): Promise<Answer> => call(stack, 'POST', '/v1/api-keys', { headers, body })
const patch = (id: string, body: unknown): Promise<Answer> => call(stack, 'PATCH', `/v1/api-keys/${id}`, { headers: mk, body })
const list = async (headers = mk): Promise<Record<string, unknown>[]> => (await call(stack, 'GET', '/v1/api-keys', { headers })).json.data

t.test('create with only a name: every field of spec §2.1, the secret once', async (t) => {
  const before = Date.now()
  const answer = await create({ name: 'staging' })
  t.equal(answer.status, 201)
  const key = answer.json
  t.strictSame(Object.keys(key).sort(), [...FIELDS, 'key'].sort())
  t.match(key.key_id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  t.match(key.key, /^sk-[A-Za-z0-9_-]{43}$/)
  t.ok(key.key_preview.startsWith(key.key.slice(0, 7)) && key.key_preview.endsWith(key.key.slice(-4)), 'the preview matches the secret')
  t.ok(key.key_preview.length < key.key.length)
  t.equal(key.name, 'staging')
  t.equal(key.trust_mode, '')
  t.equal(key.status, 'active')
  t.equal(key.revoked, false)
  t.equal(key.credit_limit, null)
  t.equal(key.used, '0')
  t.equal(key.currency, 'USD')
  t.equal(key.reset_period, 'never')
  t.equal(key.expires_at, null)
  t.equal(key.allowed_models, null)
  t.equal(key.allowed_providers, null)
  const created = Date.parse(key.created_at)
  t.ok(created >= before - 1000 && created <= Date.now() + 1000)
  t.match(key.created_at, /Z$/)
  const served = await chat(stack, { authorization: `Bearer ${key.key}` })
  t.equal(served.status, 200, 'the new key works at once')

  const listed = (await list()).find((k) => k.key_id === key.key_id)!
  t.notOk('key' in listed, 'the list never shows the secret')
  const { key: _secret, used: _unused, ...shown } = key
  const { used, ...rest } = listed
  t.strictSame(rest, shown, 'the list shows what create showed, minus the secret')
  t.equal(used, served.json.x_svc_trace.billing.total_cost, 'and the key has used what its one call was billed')
})

t.test('create with every field', async (t) => {
  const expires = new Date(Date.now() + 86_400_000).toISOString()
  const answer = await create({
    name: 'prod',
    trust_mode: 'verified',
    credit_limit: '25.50',
    reset_period: 'monthly',
    expires_at: expires,
    allowed_models: ['m-chat', 'm-other', 'm-chat'],
    allowed_providers: [P.toUpperCase().replace('0X', '0x')],
  })
  t.equal(answer.status, 201)
  t.match(answer.json, {
    name: 'prod',
    trust_mode: 'verified',
    credit_limit: '25.5',
    reset_period: 'monthly',
    expires_at: expires,
    allowed_models: ['m-chat', 'm-other'],
    allowed_providers: [P],
  })
  t.equal((await create({ name: 'n', credit_limit: 12.25 })).json.credit_limit, '12.25', 'a JSON number is read as the decimal written')
  t.equal((await create({ name: 'n', credit_limit: 123456789012345 })).json.credit_limit, '123456789012345', '15 significant digits are exact')
  t.equal((await create({ name: 'n', credit_limit: 1e20 })).json.credit_limit, '100000000000000000000', 'so is a power of ten')
  // JSON.stringify would write the double it became: the client's text is what a number past 15 digits loses.
  const long = await call(stack, 'POST', '/v1/api-keys', { headers: mk, raw: '{"name":"n","credit_limit":12345678901234567890}' })
  t.ok(isError(long, 400, 'invalid_request'), 'a number that may not be what was written is refused')
  t.match(long.json.error.message, /send it as a decimal string/)
  t.equal((await create({ name: 'n', credit_limit: '12345678901234567890' })).json.credit_limit, '12345678901234567890', 'as a string it is exact')
  t.equal((await create({ name: 'n', trust_mode: null, allowed_models: [] })).json.allowed_models, null, 'empty list: unrestricted')
  t.equal((await create({ name: '  spaced  ' })).json.name, 'spaced')
})

t.test('the secret is stored only as its hash', async (t) => {
  const answer = await create({ name: 'hash-only' })
  const record = await stack.router.store.keys.getApiKey(stack.account, answer.json.key_id)
  t.equal(record?.hash, createHash('sha256').update(answer.json.key).digest('base64url'))
  t.notOk(JSON.stringify(record, (_k, v) => (typeof v === 'bigint' ? String(v) : v)).includes(answer.json.key.slice(3)))
})

t.test('create: name is required, bad JSON and bad fields are 400s naming the field', async (t) => {
  const cases: [string, unknown, string, RegExp][] = [
    ['no name', {}, 'invalid_request', /name is required/],
    ['empty name', { name: '  ' }, 'invalid_request', /name must not be empty/],
    ['name not a string', { name: 42 }, 'invalid_request', /name must be a string/],
    ['long name', { name: 'x'.repeat(201) }, 'invalid_request', /name must be at most/],
    ['bad trust_mode', { name: 'n', trust_mode: 'Private' }, 'invalid_trust_mode', /trust_mode/],
    ['trust_mode not a string', { name: 'n', trust_mode: 2 }, 'invalid_trust_mode', /trust_mode/],
    ['negative credit_limit', { name: 'n', credit_limit: '-1' }, 'invalid_request', /credit_limit/],
    ['credit_limit not a number', { name: 'n', credit_limit: 'ten' }, 'invalid_request', /credit_limit/],
    ['credit_limit boolean', { name: 'n', credit_limit: true }, 'invalid_request', /credit_limit/],
    ['bad reset_period', { name: 'n', reset_period: 'yearly' }, 'invalid_request', /reset_period must be one of never, daily, weekly, monthly/],
    ['null reset_period', { name: 'n', reset_period: null }, 'invalid_request', /reset_period/],
    ['expires_at not a timestamp', { name: 'n', expires_at: 'tomorrow' }, 'invalid_request', /expires_at/],
    ['expires_at without a zone', { name: 'n', expires_at: '2099-01-01T00:00:00' }, 'invalid_request', /expires_at/],
    ['expires_at as a number', { name: 'n', expires_at: 4102444800 }, 'invalid_request', /expires_at/],
    ['expires_at in the past', { name: 'n', expires_at: '2020-01-01T00:00:00Z' }, 'invalid_request', /expires_at must be in the future/],
    ['expires_at on a day its month does not have', { name: 'n', expires_at: '2030-02-30T00:00:00Z' }, 'invalid_request', /ISO 8601/],
    ['expires_at on 29 February of a common year', { name: 'n', expires_at: '2031-02-29' }, 'invalid_request', /ISO 8601/],
    ['expires_at in month 13', { name: 'n', expires_at: '2030-13-01T00:00:00Z' }, 'invalid_request', /ISO 8601/],
    ['expires_at at hour 24', { name: 'n', expires_at: '2030-01-01T24:30:00Z' }, 'invalid_request', /ISO 8601/],
    ['expires_at with a zone of +25:00', { name: 'n', expires_at: '2030-01-01T10:00:00+25:00' }, 'invalid_request', /ISO 8601/],
    ['allowed_models not a list', { name: 'n', allowed_models: 'm-chat' }, 'invalid_request', /allowed_models must be an array/],
    ['allowed_models item', { name: 'n', allowed_models: ['ok', 3] }, 'invalid_request', /allowed_models\[1\]/],
    ['allowed_providers item', { name: 'n', allowed_providers: ['0x12'] }, 'invalid_request', /allowed_providers\[0\]/],
    ['unknown field', { name: 'n', scopes: ['all'] }, 'invalid_request', /unknown field "scopes"/],
    ['not an object', ['name'], 'invalid_request', /JSON object/],
  ]
  const before = (await list()).length
  for (const [what, body, code, message] of cases) {
    const answer = await create(body)
    t.ok(isError(answer, 400, code), what)
    t.match(answer.json.error.message, message, what)
  }
  const bad = await call(stack, 'POST', '/v1/api-keys', { headers: mk, raw: '{"name": "x",' })
  t.ok(isError(bad, 400, 'invalid_request'))
  t.match(bad.json.error.message, /not valid JSON/)
  const empty = await call(stack, 'POST', '/v1/api-keys', { headers: mk, raw: '' })
  t.ok(isError(empty, 400, 'invalid_request'), 'no body')
  t.equal((await list()).length, before, 'no key was created by a refused request')
})

t.test('create: an oversized body is 413', async (t) => {
  const answer = await call(stack, 'POST', '/v1/api-keys', { headers: mk, raw: JSON.stringify({ name: 'x'.repeat(100_000) }) })
  t.ok(isError(answer, 413, 'request_too_large'))
})

t.test('list: the envelope, every key of the account (revoked ones too), nothing of other accounts', async (t) => {
  const other = await stack.newAccount()
  const otherMk = await stack.newMgmtKey(['keys:read', 'keys:create'], other)
  const theirs = (await create({ name: 'theirs' }, otherMk.auth)).json
  const mine = (await create({ name: 'mine' })).json
  await call(stack, 'DELETE', `/v1/api-keys/${mine.key_id}`, { headers: mk })
  const answer = await call(stack, 'GET', '/v1/api-keys', { headers: mk })
  t.equal(answer.json.object, 'list')
  const ids = answer.json.data.map((k: { key_id: string }) => k.key_id)
  t.ok(ids.includes(stack.keyId))
  t.ok(ids.includes(mine.key_id))
  t.notOk(ids.includes(theirs.key_id))
  t.match(answer.json.data.find((k: { key_id: string }) => k.key_id === mine.key_id), { revoked: true, status: 'revoked' })
  t.strictSame((await list(otherMk.auth)).map((k) => k.key_id), [theirs.key_id])
  for (const k of answer.json.data) t.strictSame(Object.keys(k).sort(), FIELDS)
})

t.test('used: the key spend in its reset period, from the ledger', async (t) => {
  const daily = (await create({ name: 'daily', reset_period: 'daily', credit_limit: '1' })).json
  const never = (await create({ name: 'never' })).json
  const now = Date.now()
  const charge = (keyId: string, at: number, cost: string) =>
    stack.router.store.ledger.recordCharge({
      requestId: `req_${Math.random()}`,
      accountId: stack.account,
      keyId,
      model: 'm-chat',
      provider: P,
      at,
      promptTokens: 1,
      completionTokens: 1,
      images: 0,
      audioMs: 0,
      cost: parseUsd(cost)!,
    })
  await charge(daily.key_id, now, '0.25')
  await charge(daily.key_id, now - 3 * 86_400_000, '10')
  await charge(never.key_id, now, '0.000000000000000001')
  await charge(never.key_id, now - 3 * 86_400_000, '2')
  const keys = await list()
  t.equal(keys.find((k) => k.key_id === daily.key_id)!.used, '0.25', 'daily: only today')
  t.equal(keys.find((k) => k.key_id === never.key_id)!.used, '2.000000000000000001', 'never: all time, exactly')
  const patched = await patch(daily.key_id, { reset_period: 'never' })
  t.equal(patched.json.used, '10.25', 'PATCH answers with the spend of the new period')
})

t.test('PATCH: each field updates, absent fields stay, null clears', async (t) => {
  const key = (await create({ name: 'p', trust_mode: 'private', credit_limit: '5', allowed_models: ['m-chat'] })).json
  const renamed = await patch(key.key_id, { name: 'renamed' })
  t.equal(renamed.status, 200)
  const { name: _a, ...rest } = key
  const { key: _secret, ...restShown } = rest
  t.match(renamed.json, { ...restShown, name: 'renamed' })
  const expires = new Date(Date.now() + 3_600_000).toISOString()
  const all = await patch(key.key_id, {
    trust_mode: 'standard',
    credit_limit: '0.000000000000000001',
    reset_period: 'weekly',
    expires_at: expires,
    allowed_models: null,
    allowed_providers: [P],
  })
  t.match(all.json, {
    name: 'renamed',
    trust_mode: 'standard',
    credit_limit: '0.000000000000000001',
    reset_period: 'weekly',
    expires_at: expires,
    allowed_models: null,
    allowed_providers: [P],
  })
  const cleared = await patch(key.key_id, { trust_mode: null, credit_limit: null, expires_at: null, allowed_providers: [] })
  t.match(cleared.json, { trust_mode: '', credit_limit: null, expires_at: null, allowed_providers: null })
  t.strictSame((await list()).find((k) => k.key_id === key.key_id), cleared.json, 'the list agrees')
})

t.test('PATCH: bad input is a 400 naming the field, and changes nothing', async (t) => {
  const key = (await create({ name: 'strict' })).json
  for (const [body, message] of [
    [{}, /nothing to update/],
    [{ name: '' }, /name must not be empty/],
    [{ trust_mode: 'secret' }, /trust_mode/],
    [{ credit_limit: [] }, /credit_limit/],
    [{ revoked: false }, /unknown field "revoked"/],
    [{ key_id: key.key_id, name: 'x' }, /unknown field "key_id"/],
  ] as [unknown, RegExp][]) {
    const answer = await patch(key.key_id, body)
    t.equal(answer.status, 400, JSON.stringify(body))
    t.match(answer.json.error.message, message)
  }
  const bad = await call(stack, 'PATCH', `/v1/api-keys/${key.key_id}`, { headers: mk, raw: 'name=x' })
  t.ok(isError(bad, 400, 'invalid_request'))
  t.equal((await list()).find((k) => k.key_id === key.key_id)!.name, 'strict')
})

t.test('DELETE: message and key_id; the key stays listed as revoked; a second DELETE is harmless', async (t) => {
  const key = (await create({ name: 'gone' })).json
  const first = await call(stack, 'DELETE', `/v1/api-keys/${key.key_id}`, { headers: mk })
  t.equal(first.status, 200)
  t.strictSame(first.json, { message: 'API key revoked', key_id: key.key_id })
  const listed = (await list()).find((k) => k.key_id === key.key_id)!
  t.match(listed, { revoked: true, status: 'revoked' })
  const second = await call(stack, 'DELETE', `/v1/api-keys/${key.key_id}`, { headers: mk })
  t.strictSame(second.json, { message: 'API key was already revoked', key_id: key.key_id })
  t.ok(isError(await chat(stack, { authorization: `Bearer ${key.key}` }), 401, 'invalid_api_key'))
})

t.test('keys of another account are invisible: PATCH and DELETE give 404 and change nothing', async (t) => {
  const other = await stack.newAccount()
  const otherMk = await stack.newMgmtKey(undefined, other)
  const theirs = (await create({ name: 'theirs' }, otherMk.auth)).json
  t.ok(isError(await patch(theirs.key_id, { name: 'mine now' }), 404, 'api_key_not_found'))
  t.ok(isError(await call(stack, 'DELETE', `/v1/api-keys/${theirs.key_id}`, { headers: mk }), 404, 'api_key_not_found'))
  t.match((await list(otherMk.auth)).find((k) => k.key_id === theirs.key_id), { name: 'theirs', revoked: false })
  t.equal((await chat(stack, { authorization: `Bearer ${theirs.key}` })).status, 200)
})

t.test('a method the path does not have is 405 with Allow', async (t) => {
  const answer = await call(stack, 'PUT', '/v1/api-keys', { headers: mk })
  t.equal(answer.status, 405)
})
