/**
 * Every row of the spec §7 error table that concerns keys and scopes, each as its own test, through the real
 * router over HTTP. (trust_mode_mismatch: trust-mode.test.ts; rate_limit_exceeded: rate-limit.test.ts.)
 */
import t from 'tap'
import { newSecret } from '../../src/auth/keys.js'
import type { Scope } from '../../src/store/store.js'
import { call, chat, isError, oneProviderStack, type Answer } from './http.js'

const stack = await oneProviderStack(t)

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE'

/** Every account and key endpoint, with the scope it needs and a body that would be valid. */
const SOME_ID = '00000000-0000-4000-8000-000000000000'
const MANAGEMENT: [Method, string, Scope, unknown][] = [
  ['GET', '/v1/account/balance', 'account:read', undefined],
  ['GET', '/v1/account/funds', 'account:read', undefined],
  ['GET', '/v1/account/usage/stats', 'account:read', undefined],
  ['GET', '/v1/api-keys', 'keys:read', undefined],
  ['POST', '/v1/api-keys', 'keys:create', { name: 'x' }],
  ['PATCH', `/v1/api-keys/${SOME_ID}`, 'keys:manage', { name: 'x' }],
  ['DELETE', `/v1/api-keys/${SOME_ID}`, 'keys:manage', undefined],
]

function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` }
}

async function everyEndpoint(headers: Record<string, string>): Promise<[string, Answer][]> {
  const out: [string, Answer][] = [['POST /v1/chat/completions', await chat(stack, headers)]]
  for (const [method, path, , body] of MANAGEMENT) out.push([`${method} ${path}`, await call(stack, method, path, { headers, body })])
  return out
}

t.test('401 missing_authorization: no Authorization header, on every authenticated endpoint', async (t) => {
  for (const [name, answer] of await everyEndpoint({})) {
    t.ok(isError(answer, 401, 'missing_authorization'), name)
    t.equal(answer.json.error.type, 'authentication_error', name)
  }
})

t.test('401 invalid_api_key: an unknown key', async (t) => {
  for (const [name, answer] of await everyEndpoint(bearer(newSecret('sk-')))) t.ok(isError(answer, 401, 'invalid_api_key'), name)
  for (const [name, answer] of await everyEndpoint(bearer(newSecret('mk-')))) t.ok(isError(answer, 401, 'invalid_api_key'), name)
})

t.test('401 invalid_api_key: a malformed key or header', async (t) => {
  const malformed = [
    `Bearer xk-${stack.key.slice(3)}`,
    `Bearer ${stack.key.slice(0, -1)}!`,
    `Bearer ${stack.key}${stack.key}`,
    'Bearer ',
    'Bearer sk-',
    `Basic ${Buffer.from(`user:${stack.key}`).toString('base64')}`,
    stack.key,
  ]
  for (const authorization of malformed) {
    t.ok(isError(await chat(stack, { authorization }), 401, 'invalid_api_key'), authorization.slice(0, 12))
    t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: { authorization } }), 401, 'invalid_api_key'))
  }
})

t.test('401 invalid_api_key: a truncated key', async (t) => {
  for (const cut of [1, 5, 40]) {
    t.ok(isError(await chat(stack, bearer(stack.key.slice(0, -cut))), 401, 'invalid_api_key'), `sk- minus ${cut}`)
    t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: bearer(stack.mgmtKey.slice(0, -cut)) }), 401, 'invalid_api_key'))
  }
})

t.test('401 invalid_api_key: a revoked key', async (t) => {
  const key = await stack.newApiKey()
  t.equal((await chat(stack, key.auth)).status, 200, 'works before')
  const revoke = await call(stack, 'DELETE', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth })
  t.equal(revoke.status, 200)
  t.ok(isError(await chat(stack, key.auth), 401, 'invalid_api_key'))

  const mk = await stack.newMgmtKey()
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: mk.auth })).status, 200, 'works before')
  await stack.router.credentials.revokeMgmtKey(mk.id)
  t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: mk.auth }), 401, 'invalid_api_key'))
})

t.test('401 invalid_api_key: an expired key', async (t) => {
  // Far enough ahead that the first chat always lands before it on a slow machine; then waited past.
  const expiresAt = Date.now() + 2000
  const key = await stack.newApiKey({ expiresAt })
  t.equal((await chat(stack, key.auth)).status, 200, 'works before expiry')
  await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now()) + 50))
  t.ok(isError(await chat(stack, key.auth), 401, 'invalid_api_key'))
})

t.test('401 invalid_api_key: one answer whatever the reason', async (t) => {
  const revoked = await stack.newApiKey()
  await stack.router.credentials.revokeApiKey(stack.account, revoked.id)
  const answers = [
    await chat(stack, bearer(newSecret('sk-'))),
    await chat(stack, bearer(stack.key.slice(0, -1))),
    await chat(stack, revoked.auth),
    await chat(stack, { authorization: 'Basic abc' }),
  ]
  t.strictSame(new Set(answers.map((a) => JSON.stringify(a.json.error))).size, 1, 'same code, type and message')
})

t.test('403 insufficient_scope: an sk- key on account endpoints', async (t) => {
  for (const [method, path, , body] of MANAGEMENT.filter(([, path]) => path.startsWith('/v1/account/'))) {
    const answer = await call(stack, method, path, { headers: stack.auth, body })
    t.ok(isError(answer, 403, 'insufficient_scope'), `${method} ${path}`)
    t.equal(answer.json.error.type, 'permission_error')
  }
})

t.test('403 insufficient_scope: an sk- key on key endpoints', async (t) => {
  for (const [method, path, , body] of MANAGEMENT.filter(([, path]) => path.startsWith('/v1/api-keys'))) {
    t.ok(isError(await call(stack, method, path, { headers: stack.auth, body }), 403, 'insufficient_scope'), `${method} ${path}`)
  }
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: stack.mgmtAuth })).json.data.length >= 1, true)
})

t.test('403 insufficient_scope: an mk- key on inference', async (t) => {
  const answer = await chat(stack, stack.mgmtAuth)
  t.ok(isError(answer, 403, 'insufficient_scope'))
  t.match(answer.json.error.message, /sk-/)
})

t.test('403 insufficient_scope: an mk- key without the scope the endpoint needs', async (t) => {
  for (const [method, path, scope, body] of MANAGEMENT) {
    const allBut = (['account:read', 'keys:read', 'keys:create', 'keys:manage'] as Scope[]).filter((s) => s !== scope)
    const mk = await stack.newMgmtKey(allBut)
    const answer = await call(stack, method, path, { headers: mk.auth, body })
    t.ok(isError(answer, 403, 'insufficient_scope'), `${method} ${path} without ${scope}`)
    t.match(answer.json.error.message, scope)
    const holder = await stack.newMgmtKey([scope])
    t.not((await call(stack, method, path, { headers: holder.auth, body })).status, 403, `${method} ${path} with only ${scope}`)
  }
})

t.test('403 access_denied: /v1/management-keys refuses every bearer key; it needs a console session', async (t) => {
  for (const [method, path] of [
    ['GET', '/v1/management-keys'],
    ['POST', '/v1/management-keys'],
    ['DELETE', `/v1/management-keys/${SOME_ID}`],
  ] as const) {
    t.ok(isError(await call(stack, method, path, { headers: stack.mgmtAuth, body: method === 'POST' ? {} : undefined }), 403, 'access_denied'))
    t.ok(isError(await call(stack, method, path, { headers: stack.auth }), 403, 'access_denied'))
    t.ok(isError(await call(stack, method, path), 401, 'missing_authorization'))
    t.ok(isError(await call(stack, method, path, { headers: bearer(newSecret('mk-')) }), 401, 'invalid_api_key'))
  }
})

t.test('404 api_key_not_found: unknown id, an id that is no UUID, a key of another account', async (t) => {
  const other = await stack.newAccount()
  const theirs = await stack.newApiKey({ account: other })
  for (const id of [SOME_ID, 'not-a-uuid', theirs.id]) {
    t.ok(isError(await call(stack, 'PATCH', `/v1/api-keys/${id}`, { headers: stack.mgmtAuth, body: { name: 'x' } }), 404, 'api_key_not_found'), `PATCH ${id}`)
    t.ok(isError(await call(stack, 'DELETE', `/v1/api-keys/${id}`, { headers: stack.mgmtAuth }), 404, 'api_key_not_found'), `DELETE ${id}`)
  }
  t.equal((await chat(stack, theirs.auth)).status, 200, "the other account's key was left alone")
})
