/**
 * The key cache told of changes made by another process (Store.changes): each kind drops what it made stale
 * and nothing else, so a revoke or a rate limit set from the operator CLI reaches the next request while every
 * other warm key stays warm. The other process is played by Credentials without a cache on the same store.
 */
import t from 'tap'
import { createKeyAuthenticators, INVALID_API_KEY } from '../../src/auth/authenticate.js'
import { Credentials } from '../../src/auth/credentials.js'
import { KeyCache } from '../../src/auth/key-cache.js'
import { hashSecret, newSecret, previewOf } from '../../src/auth/keys.js'
import type { Principal } from '../../src/auth/principal.js'
import { countingStore, deferred, fakeHead } from './fixtures.js'
import { newApiKey } from '../helpers/store-fixtures.js'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

const A = '0x' + 'a'.repeat(40)
const B = '0x' + 'b'.repeat(40)

async function setup(t: Test, max?: number) {
  const store = await countingStore()
  t.teardown(() => store.close())
  const cache = new KeyCache(store.keys, { defaultRateLimit: 600, ...(max !== undefined && { max }) })
  const auth = createKeyAuthenticators(cache, store.keys)
  // Writes as the operator CLI makes them: no cache of this process is told.
  const elsewhere = new Credentials(store, null)
  const reads = (): number => store.calls.findCredential
  const sk = async (secret: string): Promise<Principal | null> => {
    const result = await auth.inference(fakeHead(`Bearer ${secret}`))
    return result === INVALID_API_KEY ? null : (result as Principal)
  }
  /** True when the key is answered from the cache, synchronously (a miss starts the store read). */
  const warm = (secret: string): boolean => !(auth.inference(fakeHead(`Bearer ${secret}`)) instanceof Promise)
  return { store, cache, elsewhere, reads, sk, warm }
}

t.test('a key change drops that key only', async (t) => {
  const { cache, elsewhere, reads, sk, warm } = await setup(t)
  const one = await elsewhere.issueApiKey(A, { name: 'one' })
  const two = await elsewhere.issueApiKey(A, { name: 'two' })
  await sk(one.secret)
  await sk(two.secret)
  await elsewhere.revokeApiKey(A, one.record.id)
  t.ok(warm(one.secret), 'until the change arrives, this process still holds the key')
  cache.applyChange({ kind: 'key', accountId: A, keyId: one.record.id })
  t.equal(await sk(one.secret), null, 'revoked: refused at the next request')
  t.equal(reads(), 3)
  t.ok(warm(two.secret), 'the other key of the account stays warm')
})

t.test('an account change drops the keys of that account only', async (t) => {
  const { cache, elsewhere, reads, sk, warm } = await setup(t)
  const a1 = await elsewhere.issueApiKey(A, { name: 'a1' })
  const a2 = await elsewhere.issueApiKey(A, { name: 'a2' })
  const b1 = await elsewhere.issueApiKey(B, { name: 'b1' })
  for (const k of [a1, a2, b1]) t.equal((await sk(k.secret))?.rateLimit, 600)
  await elsewhere.setRateLimit(A, 5)
  cache.applyChange({ kind: 'account', accountId: A })
  t.equal((await sk(a1.secret))?.rateLimit, 5)
  t.equal((await sk(a2.secret))?.rateLimit, 5)
  t.equal(reads(), 5, 'both keys of the account were read again')
  t.ok(warm(b1.secret), 'another account is untouched')
})

t.test('a funds change drops nothing; an unknown change drops everything', async (t) => {
  const { cache, elsewhere, reads, sk, warm } = await setup(t)
  const a = await elsewhere.issueApiKey(A, { name: 'a' })
  const b = await elsewhere.issueApiKey(B, { name: 'b' })
  const junk = newSecret('sk-')
  await sk(a.secret)
  await sk(b.secret)
  await sk(junk)
  cache.applyChange({ kind: 'funds', accountId: A })
  t.ok(warm(a.secret) && warm(b.secret) && warm(junk), 'funds are the billing ledger\'s business')
  cache.applyChange({ kind: 'unknown' })
  t.notOk(warm(a.secret) || warm(b.secret) || warm(junk), 'nothing is trusted any more')
  await Promise.all([sk(a.secret), sk(b.secret), sk(junk)])
  t.equal(reads(), 6)
})

t.test('a key created elsewhere works once its change arrives, even after its hash was refused', async (t) => {
  const { store, cache, sk } = await setup(t)
  await store.accounts.ensureAccount(A, 0)
  const secret = newSecret('sk-')
  t.equal(await sk(secret), null, 'unknown, and remembered as such')
  const record = await store.keys.createApiKey(
    newApiKey(A, { id: '00000000-0000-4000-8000-00000000000a', hash: hashSecret(secret), preview: previewOf(secret), name: 'late', createdAt: 0 }),
  )
  cache.applyChange({ kind: 'key', accountId: A, keyId: record.id })
  t.equal((await sk(secret))?.keyId, record.id)
})

t.test('a store read in flight across a change does not fill the cache', async (t) => {
  const { store, cache, elsewhere, sk } = await setup(t)
  const key = await elsewhere.issueApiKey(A, { name: 'k' })
  const gate = deferred()
  store.gate = gate.promise
  const inFlight = sk(key.secret)
  await new Promise((r) => setImmediate(r))
  store.gate = null
  await elsewhere.revokeApiKey(A, key.record.id)
  cache.applyChange({ kind: 'key', accountId: A, keyId: key.record.id })
  gate.resolve()
  t.not(await inFlight, null, 'the request that started before the change may pass')
  t.equal(await sk(key.secret), null, 'the next one reads again and is refused')
})

t.test('the key index follows the LRU through evictions', async (t) => {
  const { cache, elsewhere, reads, sk, warm } = await setup(t, 1)
  const one = await elsewhere.issueApiKey(A, { name: 'one' })
  const two = await elsewhere.issueApiKey(B, { name: 'two' })
  await sk(one.secret)
  await sk(two.secret)
  t.notOk(warm(one.secret), 'evicted by the second key')
  await sk(one.secret)
  t.ok(warm(one.secret))
  cache.applyChange({ kind: 'key', accountId: B, keyId: two.record.id })
  t.ok(warm(one.secret), 'a change of an evicted key touches nothing else')
  cache.applyChange({ kind: 'account', accountId: A })
  t.notOk(warm(one.secret), 'the reloaded entry is indexed again')
  t.equal(reads(), 4, 'one, two, one again after its eviction, one again after the change')
})
