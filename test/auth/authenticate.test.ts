/**
 * The auth stage without HTTP: cache behaviour (no store I/O when warm, negative entries, invalidation,
 * the in-flight race), expiry, kinds and scopes, and management-key audit coalescing.
 */
import t from 'tap'
import { createKeyAuthenticators, INVALID_API_KEY, MISSING_AUTHORIZATION, type MgmtPrincipal } from '../../src/auth/authenticate.js'
import { Credentials } from '../../src/auth/credentials.js'
import { KeyCache } from '../../src/auth/key-cache.js'
import { digestToken, newSecret } from '../../src/auth/keys.js'
import type { Principal } from '../../src/auth/principal.js'
import { RouterError } from '../../src/errors.js'
import { countingStore, deferred, fakeHead } from './fixtures.js'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

const A = '0x' + 'a'.repeat(40)
const T0 = Date.UTC(2025, 0, 15)

async function setup(t: Test, options: { negativeTtlMs?: number } = {}) {
  const clock = { now: T0 }
  const now = (): number => clock.now
  const store = await countingStore()
  t.teardown(() => store.close())
  const cache = new KeyCache(store.keys, { defaultRateLimit: 600, now, ...options })
  const auth = createKeyAuthenticators(cache, store.keys, { now })
  const credentials = new Credentials(store, cache, now)
  return { clock, store, cache, auth, credentials }
}

const bearer = (key: string): string => `Bearer ${key}`

t.test('a warm key authenticates synchronously with no store read', async (t) => {
  const { store, auth, credentials } = await setup(t)
  const { secret, record } = await credentials.issueApiKey(A, { name: 'k', trustMode: 'verified', allowedModels: ['m1'] })
  const cold = auth.inference(fakeHead(bearer(secret)))
  t.type(cold, Promise, 'the first request reads the store')
  const principal = (await cold) as Principal
  t.equal(principal.accountId, A)
  t.equal(principal.keyId, record.id)
  t.equal(principal.tier, 1)
  t.strictSame([...principal.allowedModels!], ['m1'])
  t.equal(principal.allowedProviders, null)
  t.equal(principal.rateLimit, 600)
  t.equal(store.calls.findCredential, 1)
  for (let i = 0; i < 100; i++) {
    const warm = auth.inference(fakeHead(bearer(secret)))
    t.equal(warm, principal, 'the very same Principal, synchronously')
  }
  t.equal(store.calls.findCredential, 1, 'no store I/O on a warm key')
})

t.test('no header and malformed tokens are answered without any store read', async (t) => {
  const { store, auth } = await setup(t)
  t.equal(auth.inference(fakeHead('')), MISSING_AUTHORIZATION)
  t.equal(auth.inference(fakeHead('Basic Zm9vOmJhcg==')), INVALID_API_KEY)
  t.equal(auth.inference(fakeHead('Bearer sk-short')), INVALID_API_KEY)
  t.equal(auth.management(fakeHead('Bearer nope'), 'keys:read'), INVALID_API_KEY)
  t.equal(store.calls.findCredential, 0)
})

t.test('an unknown key is remembered as invalid for a while, then looked up again', async (t) => {
  const { store, auth, clock } = await setup(t, { negativeTtlMs: 5000 })
  const head = fakeHead(bearer(newSecret('sk-')))
  t.equal(await auth.inference(head), INVALID_API_KEY)
  for (let i = 0; i < 10; i++) t.equal(auth.inference(head), INVALID_API_KEY, 'synchronously, from the negative cache')
  t.equal(store.calls.findCredential, 1)
  clock.now += 5001
  t.equal(await auth.inference(head), INVALID_API_KEY)
  t.equal(store.calls.findCredential, 2, 'expired negative entry: read again')
})

t.test('concurrent first requests of one key share one store read', async (t) => {
  const { store, auth, credentials } = await setup(t)
  const { secret } = await credentials.issueApiKey(A, { name: 'k' })
  const results = await Promise.all(Array.from({ length: 20 }, () => auth.inference(fakeHead(bearer(secret)))))
  t.equal(store.calls.findCredential, 1)
  t.ok(results.every((r) => r === results[0] && !(r instanceof RouterError)))
})

t.test('revoke invalidates at once: the next request is refused', async (t) => {
  const { auth, credentials } = await setup(t)
  const { secret, record } = await credentials.issueApiKey(A, { name: 'k' })
  t.notOk((await auth.inference(fakeHead(bearer(secret)))) instanceof RouterError)
  t.notOk(auth.inference(fakeHead(bearer(secret))) instanceof RouterError, 'warm')
  await credentials.revokeApiKey(A, record.id)
  t.equal(await auth.inference(fakeHead(bearer(secret))), INVALID_API_KEY)
  t.equal(auth.inference(fakeHead(bearer(secret))), INVALID_API_KEY, 'and stays refused')
})

t.test('a store read in flight across a revoke does not put the old record back in the cache', async (t) => {
  const { store, auth, credentials } = await setup(t)
  const { secret, record } = await credentials.issueApiKey(A, { name: 'k' })
  const gate = deferred()
  store.gate = gate.promise
  // The read sees the key active, but its answer arrives only after the revoke was written.
  const inFlight = auth.inference(fakeHead(bearer(secret)))
  await new Promise((r) => setImmediate(r))
  store.gate = null
  await credentials.revokeApiKey(A, record.id)
  gate.resolve()
  t.notOk((await inFlight) instanceof RouterError, 'the request that started before the revoke may pass')
  t.equal(await auth.inference(fakeHead(bearer(secret))), INVALID_API_KEY, 'the next request re-reads and is refused')
})

t.test('a write to a key clears a negative entry for its hash', async (t) => {
  const { auth, store, cache, credentials } = await setup(t)
  const { secret, record } = await credentials.issueApiKey(A, { name: 'k' })
  cache.markDead(digestToken(secret))
  t.equal(auth.inference(fakeHead(bearer(secret))), INVALID_API_KEY, 'dead in the cache')
  await credentials.updateApiKey(A, record.id, { name: 'renamed' })
  const p = (await auth.inference(fakeHead(bearer(secret)))) as Principal
  t.equal(p.keyId, record.id, 'the update invalidated the dead entry')
  t.equal(store.calls.findCredential, 1)
})

t.test('expiry is enforced on warm keys', async (t) => {
  const { auth, clock, credentials } = await setup(t)
  const { secret } = await credentials.issueApiKey(A, { name: 'k', expiresAt: T0 + 1000 })
  t.notOk((await auth.inference(fakeHead(bearer(secret)))) instanceof RouterError)
  clock.now = T0 + 999
  t.notOk(auth.inference(fakeHead(bearer(secret))) instanceof RouterError, 'one ms before')
  clock.now = T0 + 1000
  t.equal(auth.inference(fakeHead(bearer(secret))), INVALID_API_KEY, 'at expiry')
})

t.test('kinds and scopes', async (t) => {
  const { auth, credentials } = await setup(t)
  const sk = (await credentials.issueApiKey(A, { name: 'k' })).secret
  const reader = (await credentials.issueMgmtKey(A, 'r', ['keys:read'])).secret
  const mkOnInference = await auth.inference(fakeHead(bearer(reader)))
  t.match(mkOnInference, { code: 'insufficient_scope', status: 403 })
  t.match(await auth.management(fakeHead(bearer(sk)), 'keys:read'), { code: 'insufficient_scope', status: 403 })
  const ok = (await auth.management(fakeHead(bearer(reader)), 'keys:read')) as MgmtPrincipal
  t.equal(ok.accountId, A)
  const lacking = await auth.management(fakeHead(bearer(reader)), 'keys:create')
  t.match(lacking, { code: 'insufficient_scope', message: /keys:create/ })
})

t.test('audit fields are written at most once per key per 60 s, with the normalised source address', async (t) => {
  const { auth, clock, store, credentials } = await setup(t)
  const { secret, record } = await credentials.issueMgmtKey(A, 'ops', ['account:read'])
  const head = fakeHead(bearer(secret), '::ffff:10.1.2.3')
  const lastUse = async () => {
    const keys = await store.keys.listMgmtKeys(A)
    const k = keys.find((k) => k.id === record.id)!
    return [k.lastUsedAt, k.lastSourceIp]
  }
  await auth.management(head, 'account:read')
  t.strictSame(await lastUse(), [T0, '10.1.2.3'])
  t.equal(store.calls.touchMgmtKey, 1)
  for (let i = 1; i <= 50; i++) {
    clock.now = T0 + i * 1000
    auth.management(fakeHead(bearer(secret), '10.9.9.9'), 'account:read')
  }
  t.equal(store.calls.touchMgmtKey, 1, 'fifty uses within the minute: no further write')
  t.strictSame(await lastUse(), [T0, '10.1.2.3'])
  clock.now = T0 + 60_000
  auth.management(fakeHead(bearer(secret), '10.9.9.9'), 'account:read')
  await new Promise((r) => setImmediate(r))
  t.equal(store.calls.touchMgmtKey, 2)
  t.strictSame(await lastUse(), [T0 + 60_000, '10.9.9.9'])
})

t.test('the audit interval also holds across a cache reload', async (t) => {
  const { auth, clock, store, cache, credentials } = await setup(t)
  const { secret } = await credentials.issueMgmtKey(A, 'ops', ['account:read'])
  await auth.management(fakeHead(bearer(secret)), 'account:read')
  cache.clear()
  clock.now = T0 + 30_000
  await auth.management(fakeHead(bearer(secret)), 'account:read')
  t.equal(store.calls.touchMgmtKey, 1, 'the reloaded entry starts from the stored last_used_at')
})

t.test('a rate-limit override reaches the cached Principal', async (t) => {
  const { auth, credentials } = await setup(t)
  const { secret } = await credentials.issueApiKey(A, { name: 'k' })
  t.equal(((await auth.inference(fakeHead(bearer(secret)))) as Principal).rateLimit, 600)
  await credentials.setRateLimit(A, 5)
  t.equal(((await auth.inference(fakeHead(bearer(secret)))) as Principal).rateLimit, 5)
})

t.test('a verified secret skips its hash; revocation, expiry and store changes still take effect at once', async (t) => {
  const { auth, cache, clock, credentials } = await setup(t)
  const revoked = await credentials.issueApiKey(A, { name: 'revoked' })
  const expiring = await credentials.issueApiKey(A, { name: 'expiring', expiresAt: T0 + 1000 })
  const changed = await credentials.issueApiKey(A, { name: 'changed' })
  for (const k of [revoked, expiring, changed]) t.notOk((await auth.inference(fakeHead(bearer(k.secret)))) instanceof RouterError)
  t.equal(cache.secretHits, 0, 'first uses verify the digest')
  for (const k of [revoked, expiring, changed]) t.equal((auth.inference(fakeHead(bearer(k.secret))) as Principal).keyId, k.record.id)
  t.equal(cache.secretHits, 3, 'then each is known by its secret')

  await credentials.revokeApiKey(A, revoked.record.id)
  t.equal(await auth.inference(fakeHead(bearer(revoked.secret))), INVALID_API_KEY, 'revoked: refused at the next request')
  t.equal(auth.inference(fakeHead(bearer(revoked.secret))), INVALID_API_KEY, 'and stays refused')

  clock.now = T0 + 1000
  t.equal(auth.inference(fakeHead(bearer(expiring.secret))), INVALID_API_KEY, 'expired: refused on the fast path')
  t.equal(auth.inference(fakeHead(bearer(expiring.secret))), INVALID_API_KEY, 'and then from the negative cache')

  cache.applyChange({ kind: 'account', accountId: A })
  const hits = cache.secretHits
  t.type(auth.inference(fakeHead(bearer(changed.secret))), Promise, 'a store change: the key is read again')
  t.equal(cache.secretHits, hits, 'not answered by its secret')
  t.equal(cache.secretHits, 4, 'only the expiring key was answered by its secret since')
})
