/**
 * Keys over their life, through the real router: revoke-then-use, rotation, updates that take effect on the
 * next request, allow-lists, and changes made by another process (the operator CLI) reaching the server.
 */
import t from 'tap'
import { Credentials } from '../../src/auth/credentials.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { addr, startStack } from '../helpers/stack.js'
import { call, chat, isError, MODEL } from './http.js'

const A = addr('a')
const B = addr('b')
const OTHER_MODEL = 'm-other'

const stack = await startStack(t, [
  { address: A, models: [{ id: MODEL }, { id: OTHER_MODEL }] },
  { address: B, models: [{ id: MODEL }] },
])

t.test('revoke then use: the very next request is refused', async (t) => {
  const key = await stack.newApiKey()
  for (let i = 0; i < 3; i++) t.equal((await chat(stack, key.auth)).status, 200, 'warm in the cache')
  const revoke = await call(stack, 'DELETE', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth })
  t.strictSame(revoke.json, { message: 'API key revoked', key_id: key.id })
  const after = await chat(stack, key.auth)
  t.ok(isError(after, 401, 'invalid_api_key'))
})

t.test('revoke while requests keep coming: nothing is served after the DELETE answered', async (t) => {
  const key = await stack.newApiKey()
  let revokedAt = Infinity
  const results: { status: number; at: number }[] = []
  const traffic = (async () => {
    for (let i = 0; i < 40; i++) {
      const start = performance.now()
      const answer = await chat(stack, key.auth)
      results.push({ status: answer.status, at: start })
    }
  })()
  await new Promise((r) => setTimeout(r, 30))
  await call(stack, 'DELETE', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth })
  revokedAt = performance.now()
  await traffic
  const servedAfter = results.filter((r) => r.at > revokedAt && r.status === 200)
  t.equal(servedAfter.length, 0, 'no request sent after the revoke was served')
  t.ok(results.some((r) => r.status === 401), 'the key was refused')
})

t.test('rotation: two keys overlap, the old one is revoked, the new one keeps working', async (t) => {
  const old = await stack.newApiKey({ trustMode: 'standard' })
  t.equal((await chat(stack, old.auth)).status, 200)
  const created = await call(stack, 'POST', '/v1/api-keys', { headers: stack.mgmtAuth, body: { name: 'prod-v2', trust_mode: 'standard' } })
  t.equal(created.status, 201)
  const fresh = { authorization: `Bearer ${created.json.key}` }
  // Overlap: both work.
  t.equal((await chat(stack, old.auth)).status, 200)
  t.equal((await chat(stack, fresh)).status, 200)
  t.equal((await call(stack, 'DELETE', `/v1/api-keys/${old.id}`, { headers: stack.mgmtAuth })).status, 200)
  t.ok(isError(await chat(stack, old.auth), 401, 'invalid_api_key'))
  for (let i = 0; i < 3; i++) t.equal((await chat(stack, fresh)).status, 200, 'the new key keeps working')
})

t.test('allowed_models: a model outside the list is 403 model_not_allowed', async (t) => {
  const key = await stack.newApiKey({ allowedModels: [MODEL] })
  t.equal((await chat(stack, key.auth, MODEL)).status, 200)
  t.ok(isError(await chat(stack, key.auth, OTHER_MODEL), 403, 'model_not_allowed'))
  await call(stack, 'PATCH', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth, body: { allowed_models: null } })
  t.equal((await chat(stack, key.auth, OTHER_MODEL)).status, 200, 'cleared on the next request')
})

t.test('allowed_providers: routing stays inside the list; nothing allowed left is 403 provider_not_allowed', async (t) => {
  const key = await stack.newApiKey({ allowedProviders: [B] })
  for (let i = 0; i < 6; i++) {
    const answer = await chat(stack, key.auth, MODEL)
    t.equal(answer.json.x_svc_trace.provider, B)
  }
  t.ok(isError(await chat(stack, key.auth, OTHER_MODEL), 403, 'provider_not_allowed'), 'only A serves the other model')
  const pinned = await call(stack, 'POST', '/v1/chat/completions', {
    headers: { ...key.auth, 'x-svc-provider-address': A },
    body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] },
  })
  t.ok(isError(pinned, 403, 'provider_not_allowed'), 'pinning a provider outside the list')
})

t.test('expires_at set by PATCH is enforced', async (t) => {
  const key = await stack.newApiKey()
  t.equal((await chat(stack, key.auth)).status, 200)
  // Far enough ahead that the PATCH and a chat always land before it on a slow machine; then waited past.
  const expiry = Date.now() + 2000
  const expiresAt = new Date(expiry).toISOString()
  t.equal((await call(stack, 'PATCH', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth, body: { expires_at: expiresAt } })).status, 200)
  t.equal((await chat(stack, key.auth)).status, 200)
  await new Promise((r) => setTimeout(r, Math.max(0, expiry - Date.now()) + 50))
  t.ok(isError(await chat(stack, key.auth), 401, 'invalid_api_key'))
  const listed = await call(stack, 'GET', '/v1/api-keys', { headers: stack.mgmtAuth })
  t.equal(listed.json.data.find((k: { key_id: string }) => k.key_id === key.id).status, 'expired')
})

t.test('a management key revoked by another process (the CLI) stops working within a poll', async (t) => {
  const mk = await stack.newMgmtKey()
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: mk.auth })).status, 200, 'warm in the cache')
  const cli = await openSqliteStore({ path: `${stack.dir}/svc.db` })
  await new Credentials(cli, null).revokeMgmtKey(mk.id)
  await cli.close()
  const deadline = Date.now() + 3000
  let answer = await call(stack, 'GET', '/v1/api-keys', { headers: mk.auth })
  while (answer.status === 200 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50))
    answer = await call(stack, 'GET', '/v1/api-keys', { headers: mk.auth })
  }
  t.ok(isError(answer, 401, 'invalid_api_key'))
})

t.test('management key audit over HTTP: last use and source recorded once, not rewritten within the minute', async (t) => {
  const mk = await stack.newMgmtKey()
  const record = async () => (await stack.router.store.keys.listMgmtKeys(stack.account)).find((k) => k.id === mk.id)!
  t.equal((await record()).lastUsedAt, null, 'never used')
  const before = Date.now()
  t.equal((await call(stack, 'GET', '/v1/account/balance', { headers: mk.auth })).status, 200)
  const first = await record()
  t.ok(first.lastUsedAt !== null && first.lastUsedAt >= before && first.lastUsedAt <= Date.now())
  t.equal(first.lastSourceIp, '127.0.0.1')
  await new Promise((r) => setTimeout(r, 20))
  for (let i = 0; i < 5; i++) await call(stack, 'GET', '/v1/api-keys', { headers: mk.auth })
  t.equal((await record()).lastUsedAt, first.lastUsedAt, 'coalesced: at most one write per 60 s')
})
