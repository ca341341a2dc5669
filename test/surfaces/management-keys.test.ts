/**
 * GET/POST /v1/management-keys and PATCH/DELETE /v1/management-keys/:id (spec §2.2, §4.1, §5) through the real
 * router with a wallet session: the key object, the secret shown once, rename and scope changes that take
 * effect at once, revocation, the audit fields, isolation between accounts, and no bearer key of either kind.
 */
import t from 'tap'
import { call, isError, oneProviderStack, type Answer } from '../auth/http.js'
import { signIn } from '../console/wallet.js'

const stack = await oneProviderStack(t)
const session = await signIn(stack)
const headers = session.headers

const FIELDS = ['key_id', 'key_preview', 'name', 'scopes', 'status', 'revoked', 'created_at', 'last_used_at', 'last_source_ip'].sort()

const create = (body: unknown, h = headers): Promise<Answer> => call(stack, 'POST', '/v1/management-keys', { headers: h, body })
const patch = (id: string, body: unknown, h = headers): Promise<Answer> => call(stack, 'PATCH', `/v1/management-keys/${id}`, { headers: h, body })
const revoke = (id: string, h = headers): Promise<Answer> => call(stack, 'DELETE', `/v1/management-keys/${id}`, { headers: h })
const list = async (h = headers): Promise<Record<string, any>[]> => (await call(stack, 'GET', '/v1/management-keys', { headers: h })).json.data

t.test('create: every field, the secret once, the key works with its scopes only', async (t) => {
  const answer = await create({ name: 'ci', scopes: ['keys:read', 'account:read'] })
  t.equal(answer.status, 201, answer.text)
  const key = answer.json
  t.strictSame(Object.keys(key).sort(), [...FIELDS, 'key'].sort())
  t.match(key.key, /^mk-[A-Za-z0-9_-]{43}$/)
  t.equal(key.name, 'ci')
  t.strictSame(key.scopes, ['keys:read', 'account:read'])
  t.equal(key.status, 'active')
  t.equal(key.last_used_at, null)
  t.equal(key.last_source_ip, null)
  const bearer = { authorization: `Bearer ${key.key}` }
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: bearer })).status, 200)
  t.ok(isError(await call(stack, 'POST', '/v1/api-keys', { headers: bearer, body: { name: 'x' } }), 403, 'insufficient_scope'))
  const listed = (await list()).find((k) => k.key_id === key.key_id)!
  t.strictSame(Object.keys(listed).sort(), FIELDS, 'the list never shows the secret')
  t.equal(listed.key_preview, key.key_preview)
  t.ok(Date.parse(listed.last_used_at) > Date.now() - 60_000, 'last_used_at recorded')
  t.equal(listed.last_source_ip, '127.0.0.1', 'the source address, dotted')
  const mine = await stack.router.store.keys.listMgmtKeys(session.wallet.address.toLowerCase())
  t.ok(mine.some((k) => k.id === key.key_id), "made in the signed-in wallet's account")
})

t.test('rename and change scopes: in effect on the next request', async (t) => {
  const { key, key_id } = (await create({ name: 'deploy', scopes: ['keys:read'] })).json
  const bearer = { authorization: `Bearer ${key}` }
  t.ok(isError(await call(stack, 'GET', '/v1/account/balance', { headers: bearer }), 403, 'insufficient_scope'))
  const changed = await patch(key_id, { name: 'deploy-2', scopes: ['account:read'] })
  t.equal(changed.status, 200, changed.text)
  t.equal(changed.json.name, 'deploy-2')
  t.strictSame(changed.json.scopes, ['account:read'])
  t.equal(changed.json.key, undefined)
  t.equal((await call(stack, 'GET', '/v1/account/balance', { headers: bearer })).status, 200, 'the new scope works at once')
  t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: bearer }), 403, 'insufficient_scope'), 'the old one is gone at once')
  t.equal((await patch(key_id, { name: 'only-renamed' })).json.scopes[0], 'account:read', 'absent fields are left alone')
})

t.test('revoke: the key stops working; a second revoke says so', async (t) => {
  const { key, key_id } = (await create({ name: 'temp', scopes: ['keys:read'] })).json
  const bearer = { authorization: `Bearer ${key}` }
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: bearer })).status, 200)
  const answer = await revoke(key_id)
  t.equal(answer.status, 200)
  t.strictSame(answer.json, { message: 'management key revoked', key_id })
  t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: bearer }), 401, 'invalid_api_key'))
  t.equal((await revoke(key_id)).json.message, 'management key was already revoked')
  const listed = (await list()).find((k) => k.key_id === key_id)!
  t.equal(listed.status, 'revoked')
  t.equal(listed.revoked, true)
})

t.test('validation names the field', async (t) => {
  t.ok(isError(await create({ scopes: ['keys:read'] }), 400, 'invalid_request'))
  t.ok(isError(await create({ name: 'x' }), 400, 'invalid_request'))
  t.ok(isError(await create({ name: 'x', scopes: [] }), 400, 'invalid_request'))
  const bad = await create({ name: 'x', scopes: ['keys:delete'] })
  t.ok(isError(bad, 400, 'invalid_request'))
  t.match(bad.json.error.message, /scopes\[0\]/)
  t.match((await create({ name: 'x', scopes: ['keys:read'], admin: true })).json.error.message, /unknown field "admin"/)
  t.ok(isError(await create({ name: '  ', scopes: ['keys:read'] }), 400, 'invalid_request'))
  const { key_id } = (await create({ name: 'v', scopes: ['keys:read'] })).json
  t.ok(isError(await patch(key_id, {}), 400, 'invalid_request'))
})

t.test("another account's key, an unknown id, an id that is no UUID: 404", async (t) => {
  const other = await signIn(stack)
  const theirs = (await create({ name: 'theirs', scopes: ['keys:read'] }, other.headers)).json
  for (const id of [theirs.key_id, '00000000-0000-4000-8000-000000000000', 'nope']) {
    t.ok(isError(await patch(id, { name: 'x' }), 404, 'api_key_not_found'), `PATCH ${id}`)
    t.ok(isError(await revoke(id), 404, 'api_key_not_found'), `DELETE ${id}`)
  }
  t.notOk((await list()).some((k) => k.key_id === theirs.key_id), "the other account's keys are not listed")
  t.equal((await list(other.headers)).length, 1)
})

t.test('no bearer key of either kind may call it, even one the session made', async (t) => {
  const { key } = (await create({ name: 'all', scopes: ['account:read', 'keys:read', 'keys:create', 'keys:manage'] })).json
  const bearer = { authorization: `Bearer ${key}` }
  t.ok(isError(await call(stack, 'GET', '/v1/management-keys', { headers: bearer }), 403, 'access_denied'))
  t.ok(isError(await create({ name: 'x', scopes: ['keys:read'] }, bearer), 403, 'access_denied'))
  t.ok(isError(await create({ name: 'x', scopes: ['keys:read'] }, { ...headers, ...bearer }), 403, 'access_denied'), 'not even beside a session cookie')
  t.ok(isError(await call(stack, 'GET', '/v1/management-keys', { headers: stack.auth }), 403, 'access_denied'))
})

t.test('the operator CLI view (the store) sees keys made in the console', async (t) => {
  const { key_id } = (await create({ name: 'seen-by-cli', scopes: ['keys:read'] })).json
  const all = await stack.router.store.keys.listMgmtKeys()
  t.ok(all.some((k) => k.id === key_id && k.name === 'seen-by-cli'))
})
