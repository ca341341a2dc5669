/**
 * The Store contract: every implementation (SQLite now, PostgreSQL later) must pass this suite unchanged.
 * Run it with a factory that opens a fresh, empty store for each subtest (test/store/sqlite.test.ts); where
 * a second call in the same subtest opens a second handle on the same data (`shared`), the change feed is
 * checked as another process would see it.
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { hashSecret, newSecret, previewOf } from '../../src/auth/keys.js'
import { parseUsd } from '../../src/billing/money.js'
import { MAX_USAGE_COUNT } from '../../src/billing/usage-bound.js'
import { newApiKey } from '../helpers/store-fixtures.js'
import { StoreConflictError, type Charge, type JournalEntry, type NewApiKey, type Store, type StoreChange } from '../../src/store/store.js'

export type Test = Parameters<Parameters<typeof t.test>[0]>[0]

/** Opens a fresh, empty store; the suite closes it. */
export type StoreFactory = (t: Test) => Store | Promise<Store>

export interface ContractOptions {
  /**
   * A second call of the factory within one test opens a second handle on the same data, as another process
   * would (a file, a database server). The change-feed tests need that other writer and run only then.
   */
  readonly shared?: boolean
}

const A = '0x' + 'a'.repeat(40)
const B = '0x' + 'b'.repeat(40)
const T0 = Date.UTC(2025, 0, 15, 12, 0, 0)
const DAY = 86_400_000

const usd = (text: string): bigint => parseUsd(text)!

/** A new sk- key of `accountId` as the store takes it, made at T0 (the fixture of this contract and of store-specific tests). */
export function apiKey(accountId: string, overrides: Partial<NewApiKey> = {}): NewApiKey {
  return newApiKey(accountId, { name: 'ci', createdAt: T0, ...overrides })
}

function mgmtKey(accountId: string, createdAt = T0) {
  const secret = newSecret('mk-')
  return {
    id: randomUUID(),
    accountId,
    hash: hashSecret(secret),
    preview: previewOf(secret),
    name: 'ops',
    scopes: ['account:read', 'keys:read'] as const,
    createdAt,
  }
}

/** A charge of `accountId` by `keyId` at T0 (the fixture of this contract and of store-specific tests). */
export function charge(accountId: string, keyId: string, overrides: Partial<Charge> = {}): Charge {
  return {
    requestId: 'req_' + randomUUID(),
    accountId,
    keyId,
    model: 'm1',
    provider: '0x' + '1'.repeat(40),
    at: T0,
    promptTokens: 10,
    completionTokens: 20,
    images: 0,
    audioMs: 0,
    cost: usd('0.000021'),
    ...overrides,
  }
}

/** Resolves once `done()` holds; fails the test if it does not within `ms`. */
async function until(t: Test, done: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms
  while (!done()) {
    if (Date.now() > deadline) {
      t.fail(`timed out waiting for ${what}`)
      return
    }
    await new Promise((r) => setTimeout(r, 5))
  }
}

export function storeContract(t: Test, factory: StoreFactory, options: ContractOptions = {}): void {
  async function open(t: Test): Promise<Store> {
    let store: Store | null = null
    // Registered before the factory runs, which may call t.testdir(): the store is closed before that directory is
    // removed (test/helpers/stack.ts).
    t.teardown(async () => {
      await store?.close()
    })
    store = await factory(t)
    return store
  }

  t.test('accounts', async (t) => {
    const store = await open(t)
    t.equal(await store.accounts.countAccounts(), 0)
    t.equal(await store.accounts.getAccount(A), null)
    const created = await store.accounts.ensureAccount(A, T0)
    t.strictSame(created, { id: A, rateLimit: null, createdAt: T0 })
    t.strictSame(await store.accounts.ensureAccount(A, T0 + 1000), created, 'ensureAccount keeps an existing account as it is')
    t.equal(await store.accounts.countAccounts(), 1)
    t.strictSame(await store.accounts.getAccount(A), created)
  })

  t.test('account rate-limit override: set, clear, unknown account', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    t.equal((await store.accounts.setAccountRateLimit(A, 5))?.rateLimit, 5)
    t.equal((await store.accounts.getAccount(A))?.rateLimit, 5)
    t.equal((await store.accounts.setAccountRateLimit(A, null))?.rateLimit, null)
    t.equal(await store.accounts.setAccountRateLimit(B, 5), null)
    await t.rejects(store.accounts.setAccountRateLimit(A, 0), RangeError)
    await t.rejects(store.accounts.setAccountRateLimit(A, 1.5), RangeError)
  })

  t.test('api key: every field round-trips, money beyond 64 bits exactly', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    const input = apiKey(A, {
      trustMode: 'private',
      // 123456.789 USD is ~1.2e23 atto: far past a 64-bit integer.
      creditLimit: usd('123456.789000000000000001'),
      resetPeriod: 'monthly',
      expiresAt: T0 + DAY,
      allowedModels: ['m1', 'm2'],
      allowedProviders: ['0x' + 'c'.repeat(40)],
    })
    const record = await store.keys.createApiKey(input)
    t.strictSame(record, { ...input, revoked: false, revokedAt: null })
    t.strictSame(await store.keys.getApiKey(A, input.id), record)
  })

  t.test('api key defaults: no tier, no limit, never resets or expires, unrestricted', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    const record = await store.keys.createApiKey(apiKey(A))
    t.equal(record.trustMode, null)
    t.equal(record.creditLimit, null)
    t.equal(record.resetPeriod, 'never')
    t.equal(record.expiresAt, null)
    t.equal(record.allowedModels, null)
    t.equal(record.allowedProviders, null)
    t.equal(record.revoked, false)
  })

  t.test('an api key needs an existing account', async (t) => {
    const store = await open(t)
    await t.rejects(store.keys.createApiKey(apiKey(A)))
  })

  t.test('keys of another account are invisible: get, update, revoke', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    await store.accounts.ensureAccount(B, T0)
    const key = await store.keys.createApiKey(apiKey(A))
    t.equal(await store.keys.getApiKey(B, key.id), null)
    t.equal(await store.keys.updateApiKey(B, key.id, { name: 'stolen' }), null)
    t.equal(await store.keys.revokeApiKey(B, key.id, T0), null)
    t.strictSame(await store.keys.listApiKeys(B), [])
    t.strictSame(await store.keys.getApiKey(A, key.id), key, 'unchanged')
  })

  t.test('list: the account keys, oldest first, revoked ones included', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    const k1 = await store.keys.createApiKey(apiKey(A, { createdAt: T0 }))
    const k2 = await store.keys.createApiKey(apiKey(A, { createdAt: T0 + 1 }))
    const k3 = await store.keys.createApiKey(apiKey(A, { createdAt: T0 + 2 }))
    await store.keys.revokeApiKey(A, k2.id, T0 + 5)
    t.strictSame(
      (await store.keys.listApiKeys(A)).map((k) => [k.id, k.revoked]),
      [
        [k1.id, false],
        [k2.id, true],
        [k3.id, false],
      ],
    )
  })

  t.test('update: sent fields change, absent fields stay, null clears', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    const key = await store.keys.createApiKey(
      apiKey(A, { trustMode: 'verified', creditLimit: usd('5'), expiresAt: T0 + DAY, allowedModels: ['m1'], allowedProviders: ['0x' + 'c'.repeat(40)] }),
    )
    const renamed = await store.keys.updateApiKey(A, key.id, { name: 'prod' })
    t.strictSame(renamed, { ...key, name: 'prod' })
    const cleared = await store.keys.updateApiKey(A, key.id, {
      trustMode: null,
      creditLimit: null,
      expiresAt: null,
      allowedModels: null,
      allowedProviders: null,
    })
    t.strictSame(cleared, { ...key, name: 'prod', trustMode: null, creditLimit: null, expiresAt: null, allowedModels: null, allowedProviders: null })
    const set = await store.keys.updateApiKey(A, key.id, { trustMode: 'private', creditLimit: usd('0.5'), resetPeriod: 'daily', allowedModels: ['m2', 'm3'] })
    t.equal(set?.trustMode, 'private')
    t.equal(set?.creditLimit, usd('0.5'))
    t.equal(set?.resetPeriod, 'daily')
    t.strictSame(set?.allowedModels, ['m2', 'm3'])
    t.equal(set?.hash, key.hash, 'the secret never changes')
    t.equal(await store.keys.updateApiKey(A, randomUUID(), { name: 'x' }), null)
  })

  t.test('revoke: marks the key once; a second revoke keeps the first time', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    const key = await store.keys.createApiKey(apiKey(A))
    const revoked = await store.keys.revokeApiKey(A, key.id, T0 + 10)
    t.equal(revoked?.revoked, true)
    t.equal(revoked?.revokedAt, T0 + 10)
    t.equal((await store.keys.revokeApiKey(A, key.id, T0 + 20))?.revokedAt, T0 + 10)
    t.equal(await store.keys.revokeApiKey(A, randomUUID(), T0), null)
  })

  t.test('findCredential: either kind by hash, with its account; revoked keys too; unknown is null', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    await store.accounts.setAccountRateLimit(A, 7)
    const api = await store.keys.createApiKey(apiKey(A))
    const mk = await store.keys.createMgmtKey(mgmtKey(A))
    const foundApi = await store.keys.findCredential(api.hash)
    t.equal(foundApi?.kind, 'api')
    t.strictSame(foundApi?.key, api)
    t.strictSame(foundApi?.account, { id: A, rateLimit: 7, createdAt: T0 })
    const foundMk = await store.keys.findCredential(mk.hash)
    t.equal(foundMk?.kind, 'mgmt')
    t.strictSame(foundMk?.key, mk)
    await store.keys.revokeApiKey(A, api.id, T0 + 1)
    t.equal((await store.keys.findCredential(api.hash))?.key.revoked, true)
    t.equal(await store.keys.findCredential(hashSecret(newSecret('sk-'))), null)
  })

  t.test('management keys: create, list all or per account, revoke', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    await store.accounts.ensureAccount(B, T0)
    const a1 = await store.keys.createMgmtKey(mgmtKey(A, T0))
    const b1 = await store.keys.createMgmtKey(mgmtKey(B, T0 + 1))
    t.strictSame(a1.scopes, ['account:read', 'keys:read'])
    t.equal(a1.lastUsedAt, null)
    t.equal(a1.lastSourceIp, null)
    t.equal(a1.revoked, false)
    t.strictSame((await store.keys.listMgmtKeys()).map((k) => k.id), [a1.id, b1.id])
    t.strictSame((await store.keys.listMgmtKeys(B)).map((k) => k.id), [b1.id])
    const revoked = await store.keys.revokeMgmtKey(a1.id, T0 + 5)
    t.equal(revoked?.revoked, true)
    t.equal(revoked?.revokedAt, T0 + 5)
    t.equal(await store.keys.revokeMgmtKey(randomUUID(), T0), null)
  })

  t.test('management keys: get and update within their account only (rename, scopes)', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    await store.accounts.ensureAccount(B, T0)
    const a1 = await store.keys.createMgmtKey(mgmtKey(A))
    t.equal((await store.keys.getMgmtKey(A, a1.id))?.name, 'ops')
    t.equal(await store.keys.getMgmtKey(B, a1.id), null, "another account's key is unknown")
    t.equal(await store.keys.getMgmtKey(A, randomUUID()), null)
    const renamed = await store.keys.updateMgmtKey(A, a1.id, { name: 'deploy' })
    t.equal(renamed?.name, 'deploy')
    t.strictSame(renamed?.scopes, ['account:read', 'keys:read'], 'absent fields are left alone')
    const rescoped = await store.keys.updateMgmtKey(A, a1.id, { scopes: ['keys:manage', 'keys:manage', 'keys:create'] })
    t.strictSame(rescoped?.scopes, ['keys:manage', 'keys:create'], 'duplicates dropped, order kept')
    t.equal(rescoped?.name, 'deploy')
    t.equal(rescoped?.hash, a1.hash, 'the secret is unchanged')
    const found = await store.keys.findCredential(a1.hash)
    t.strictSame(found?.kind === 'mgmt' && found.key.scopes, ['keys:manage', 'keys:create'], 'authentication reads the new scopes')
    t.equal(await store.keys.updateMgmtKey(B, a1.id, { name: 'theirs' }), null, "another account cannot update it")
    t.equal((await store.keys.getMgmtKey(A, a1.id))?.name, 'deploy')
    t.equal(await store.keys.updateMgmtKey(A, randomUUID(), { name: 'x' }), null)
  })

  t.test('touchMgmtKey writes at most once per interval, never on a revoked key', async (t) => {
    const store = await open(t)
    await store.accounts.ensureAccount(A, T0)
    const mk = await store.keys.createMgmtKey(mgmtKey(A))
    t.equal(await store.keys.touchMgmtKey(mk.id, T0, '10.0.0.1', 60_000), true)
    t.equal(await store.keys.touchMgmtKey(mk.id, T0 + 59_999, '10.0.0.2', 60_000), false, 'inside the interval')
    let found = await store.keys.findCredential(mk.hash)
    t.equal(found?.kind === 'mgmt' && found.key.lastUsedAt, T0)
    t.equal(found?.kind === 'mgmt' && found.key.lastSourceIp, '10.0.0.1')
    t.equal(await store.keys.touchMgmtKey(mk.id, T0 + 60_000, '10.0.0.3', 60_000), true, 'a full interval later')
    found = await store.keys.findCredential(mk.hash)
    t.equal(found?.kind === 'mgmt' && found.key.lastSourceIp, '10.0.0.3')
    await store.keys.revokeMgmtKey(mk.id, T0 + 61_000)
    t.equal(await store.keys.touchMgmtKey(mk.id, T0 + 200_000, '10.0.0.4', 60_000), false)
  })

  t.test('funds: deposits and credits append to the journal and add up exactly', async (t) => {
    const store = await open(t)
    const d1 = await store.ledger.addFunds(A, 'deposit', usd('10'), 'first', T0)
    t.strictSame(await store.accounts.getAccount(A), { id: A, rateLimit: null, createdAt: T0 }, 'the account is created')
    const d2 = await store.ledger.addFunds(A, 'deposit', usd('0.000000000000000001'), '', T0 + 1)
    const c1 = await store.ledger.addFunds(A, 'credit', usd('99999999.999999999999999999'), 'promo', T0 + 2)
    t.ok(d1.seq < d2.seq && d2.seq < c1.seq, 'sequence grows')
    t.strictSame(d1, { seq: d1.seq, accountId: A, kind: 'deposit', amount: usd('10'), requestId: null, keyId: null, memo: 'first', createdAt: T0 })
    t.strictSame(await store.ledger.totals(A), {
      deposited: usd('10.000000000000000001'),
      credited: usd('99999999.999999999999999999'),
      spent: 0n,
    })
    t.strictSame((await store.ledger.journal(A)).map((e) => [e.kind, e.amount]), [
      ['deposit', usd('10')],
      ['deposit', 1n],
      ['credit', usd('99999999.999999999999999999')],
    ])
    t.strictSame(await store.ledger.totals(B), { deposited: 0n, credited: 0n, spent: 0n }, 'an unknown account has nothing')
    await t.rejects(store.ledger.addFunds(A, 'deposit', 0n, '', T0), RangeError)
    await t.rejects(store.ledger.addFunds(A, 'deposit', -1n, '', T0), RangeError)
  })

  t.test('charges: usage record, journal, roll-up and totals together', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    const c = charge(A, key.id, { cost: usd('0.000000000000000007') })
    const entry = await store.ledger.recordCharge(c)
    t.equal(entry.kind, 'charge')
    t.equal(entry.requestId, c.requestId)
    t.equal(entry.keyId, key.id)
    t.equal(entry.amount, usd('0.000000000000000007'))
    await store.ledger.recordCharge(charge(A, key.id, { cost: usd('1.5'), promptTokens: 1, completionTokens: 2 }))
    t.strictSame(await store.ledger.totals(A), { deposited: usd('10'), credited: 0n, spent: usd('1.500000000000000007') })
    t.strictSame(await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' }), [
      {
        day: '2025-01-15',
        model: 'm1',
        keyId: key.id,
        requests: 2,
        promptTokens: 11,
        completionTokens: 22,
        images: 0,
        audioMs: 0,
        cost: usd('1.500000000000000007'),
      },
    ])
  })

  t.test('a request is billed at most once', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    const c = charge(A, key.id)
    await store.ledger.recordCharge(c)
    await t.rejects(store.ledger.recordCharge({ ...c, cost: usd('5') }), StoreConflictError)
    t.strictSame(await store.ledger.totals(A), { deposited: usd('10'), credited: 0n, spent: c.cost }, 'nothing changed')
    t.equal((await store.ledger.journal(A)).length, 2)
    t.equal((await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-12-31' }))[0]?.requests, 1)
  })

  t.test('recordCharges: one batch, each charge as recordCharge would bill it', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    await store.ledger.addFunds(B, 'deposit', usd('10'), '', T0)
    const ka = await store.keys.createApiKey(apiKey(A))
    const kb = await store.keys.createApiKey(apiKey(B))
    const first = charge(A, ka.id, { cost: usd('0.000000000000000001') })
    const batch = [
      first,
      charge(A, ka.id, { cost: usd('2'), promptTokens: 1, completionTokens: 1 }),
      charge(B, kb.id, { cost: usd('3'), at: T0 + DAY }),
      charge(A, ka.id, { model: 'm2', cost: usd('0.5') }),
    ]
    const out = await store.ledger.recordCharges(batch)
    t.equal(out.length, 4)
    for (let i = 0; i < out.length; i++) {
      const entry = out[i]
      if (entry instanceof Error) {
        t.fail(`charge ${i} failed: ${entry.message}`)
        continue
      }
      t.equal(entry.kind, 'charge')
      t.equal(entry.requestId, batch[i]!.requestId)
      t.equal(entry.amount, batch[i]!.cost)
      t.equal(entry.keyId, batch[i]!.keyId)
    }
    t.strictSame(await store.ledger.totals(A), { deposited: usd('10'), credited: 0n, spent: usd('2.500000000000000001') })
    t.strictSame(await store.ledger.totals(B), { deposited: usd('10'), credited: 0n, spent: usd('3') })
    const rows = await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' })
    t.strictSame(
      rows.map((r) => [r.model, r.requests, r.promptTokens, r.completionTokens, r.cost]),
      [
        ['m1', 2, 11, 21, usd('2.000000000000000001')],
        ['m2', 1, 10, 20, usd('0.5')],
      ],
    )
    t.strictSame((await store.ledger.journal(A)).filter((e) => e.kind === 'charge').map((e) => e.requestId), [batch[0]!.requestId, batch[1]!.requestId, batch[3]!.requestId], 'journal in batch order')
    t.strictSame(await store.ledger.recordCharges([]), [], 'an empty batch writes nothing')
  })

  t.test('recordCharges: text of any characters round-trips exactly (quotes, backslashes, commas, braces, NULL)', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const ka = await store.keys.createApiKey(apiKey(A))
    const odd = ['m "quoted"', 'back\\slash\\', 'a,b', '{braced}', 'NULL', ' spaced ', '', 'ünï "\\,{}']
    const batch = odd.map((model, i) => charge(A, ka.id, { model, requestId: `req ${i} "${model}"`, cost: usd('0.25') }))
    const out = await store.ledger.recordCharges(batch)
    t.ok(out.every((e) => !(e instanceof Error)), 'every charge billed')
    t.strictSame(out.map((e) => (e as { requestId: string }).requestId), batch.map((c) => c.requestId), 'each answer names its request')
    t.strictSame((await store.ledger.journal(A)).filter((e) => e.kind === 'charge').map((e) => e.requestId), batch.map((c) => c.requestId), 'the journal holds each request id as sent')
    const rows = await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' })
    t.strictSame(rows.map((r) => r.model).sort(), [...odd].sort(), 'the roll-up holds each model as sent')
    t.strictSame(await store.ledger.totals(A), { deposited: usd('10'), credited: 0n, spent: usd('2') })
  })

  t.test("a charge records a chain provider's price in neuron beside the USD, exactly; none for other providers", async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    // Past 2^64 and 2^53: a float or a bigint column would round it.
    const big = 123456789012345678901234567890n
    const chain = charge(A, key.id, { neuron: big })
    const file = charge(A, key.id)
    const none = charge(A, key.id, { neuron: null })
    const zero = charge(A, key.id, { neuron: 0n })
    const out = await store.ledger.recordCharges([chain, file, none, zero, charge(A, key.id, { neuron: -1n })])
    t.equal((out[0] as JournalEntry).neuron, big, 'the written entry carries it')
    t.notOk('neuron' in (out[1] as JournalEntry), 'a provider without chain prices has none')
    t.ok(out[4] instanceof RangeError, 'a negative price in neuron is refused alone')
    const byRequest = new Map((await store.ledger.journal(A)).map((e) => [e.requestId, e]))
    t.equal(byRequest.get(chain.requestId)?.neuron, big, 'read back exactly')
    t.equal(byRequest.get(zero.requestId)?.neuron, 0n)
    t.notOk('neuron' in byRequest.get(file.requestId)!)
    t.notOk('neuron' in byRequest.get(none.requestId)!)
    t.notOk('neuron' in byRequest.get(null)!, 'a deposit has none')
    t.equal(byRequest.get(chain.requestId)?.amount, chain.cost, 'beside the USD billed')
  })

  t.test("what a chain provider was served is in the books with its charges' commit: billed once, never lost", async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    const P = '0x' + 'c'.repeat(40)
    const Q = '0x' + 'd'.repeat(40)
    const first = charge(A, key.id, { provider: P, neuron: 18446744073709551617n })
    await store.ledger.recordCharges([first, charge(A, key.id, { provider: Q, neuron: 5n }), charge(A, key.id, { provider: P, neuron: 3n }), charge(A, key.id)])
    const served = async () => new Map((await store.settlement.rows()).map((r) => [r.provider, r.served]))
    t.strictSame(await served(), new Map([[P, 18446744073709551620n], [Q, 5n]]), 'per provider, exactly, as soon as the charges are acknowledged (no round needed)')
    const out = await store.ledger.recordCharges([
      { ...first, neuron: 1000n },
      charge(A, key.id, { provider: P, neuron: -1n }),
      charge(B, key.id, { provider: P, neuron: 1000n }),
      charge(A, key.id, { provider: P, neuron: 0n }),
      charge(A, key.id, { provider: Q, neuron: 2n }),
    ])
    t.ok(out[0] instanceof StoreConflictError && out[1] instanceof RangeError && out[2] instanceof Error, 'a charge not billed...')
    t.strictSame(await served(), new Map([[P, 18446744073709551620n], [Q, 7n]]), '...is not served either')
    await store.settlement.record(Q, { settled: 4n, lastBalance: 10n, lastPendingRefund: 100000000000000000000000000001n, lastBlock: 9_007_199_254_740_993n, flagged: false })
    await store.ledger.recordCharge(charge(A, key.id, { provider: Q, neuron: 1n }))
    const q = (await store.settlement.rows()).find((r) => r.provider === Q)!
    t.strictSame(
      [q.served, q.settled, q.lastBalance, q.lastPendingRefund, q.lastBlock, q.flagged],
      [8n, 4n, 10n, 100000000000000000000000000001n, 9_007_199_254_740_993n, false],
      'what was settled is kept beside it, with the pending refund and the block it was read at',
    )
    await store.settlement.record(Q, { settled: 5n, lastBalance: null, lastPendingRefund: null, lastBlock: null, flagged: true })
    const again = (await store.settlement.rows()).find((r) => r.provider === Q)!
    t.strictSame([again.served, again.settled, again.lastBalance, again.lastPendingRefund, again.lastBlock, again.flagged], [8n, 5n, null, null, null, true], 'rewritten together')
    await store.settlement.record(P, { settled: 7n, lastBalance: 1n, lastPendingRefund: 0n, lastBlock: 2n, flagged: false })
    t.equal(await store.settlement.clearFlag(P), false, 'an unflagged provider has no flag to clear...')
    t.equal((await store.settlement.rows()).find((r) => r.provider === P)?.settled, 7n, '...and what it is still owed is kept (settled not raised to served)')
    t.equal(await store.settlement.clearFlag(Q), true, 'a flagged one is cleared')
    const cleared = (await store.settlement.rows()).find((r) => r.provider === Q)!
    t.strictSame([cleared.settled, cleared.flagged], [8n, false], 'what it took beyond what it served is accepted')
  })

  t.test('recordCharges: a duplicate, a bad charge or an unknown account fails alone, the rest is billed', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    const billed = charge(A, key.id, { cost: usd('1') })
    await store.ledger.recordCharge(billed)
    const again = charge(A, key.id, { cost: usd('2') })
    const out = await store.ledger.recordCharges([
      { ...billed, cost: usd('5') },
      again,
      { ...again, cost: usd('7') },
      charge(A, key.id, { cost: -1n }),
      charge(B, randomUUID(), { cost: usd('1') }),
      charge(A, key.id, { cost: usd('0.25') }),
    ])
    t.type(out[0], StoreConflictError, 'already billed before the batch')
    t.notOk(out[1] instanceof Error)
    t.type(out[2], StoreConflictError, 'billed earlier in the same batch')
    t.type(out[3], RangeError)
    t.ok(out[4] instanceof Error && !(out[4] instanceof StoreConflictError), 'unknown account')
    t.notOk(out[5] instanceof Error)
    t.strictSame(await store.ledger.totals(A), { deposited: usd('10'), credited: 0n, spent: usd('3.25') })
    const charges = (await store.ledger.journal(A)).filter((e) => e.kind === 'charge')
    t.strictSame(charges.map((e) => e.amount), [usd('1'), usd('2'), usd('0.25')])
    t.equal((await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-12-31' }))[0]?.requests, 3)
    t.equal(await store.accounts.countAccounts(), 1, 'the unknown account was not created')
  })

  t.test('a charge whose counts pass the usage bound (10^9) is refused alone; one at the bound is billed', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    const out = await store.ledger.recordCharges([
      charge(A, key.id, { promptTokens: MAX_USAGE_COUNT + 1 }),
      charge(A, key.id, { completionTokens: Number.MAX_SAFE_INTEGER }),
      charge(A, key.id, { audioMs: 1.5 }),
      charge(A, key.id, { promptTokens: MAX_USAGE_COUNT, completionTokens: MAX_USAGE_COUNT, cost: usd('1') }),
    ])
    t.type(out[0], RangeError)
    t.type(out[1], RangeError)
    t.type(out[2], RangeError)
    t.notOk(out[3] instanceof Error)
    t.strictSame(await store.ledger.totals(A), { deposited: usd('10'), credited: 0n, spent: usd('1') })
    t.match(await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' }), [{ requests: 1, promptTokens: MAX_USAGE_COUNT, completionTokens: MAX_USAGE_COUNT }])
  })

  t.test('a charge to an unknown account is refused and changes nothing', async (t) => {
    const store = await open(t)
    await t.rejects(store.ledger.recordCharge(charge(B, randomUUID())))
    t.equal(await store.accounts.countAccounts(), 0)
  })

  t.test('usage: grouped by day, model and key; filtered by days, key, model', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('100'), '', T0)
    await store.ledger.addFunds(B, 'deposit', usd('100'), '', T0)
    const k1 = await store.keys.createApiKey(apiKey(A))
    const k2 = await store.keys.createApiKey(apiKey(A))
    const kb = await store.keys.createApiKey(apiKey(B))
    await store.ledger.recordCharge(charge(A, k1.id, { at: T0, model: 'm1', cost: usd('1') }))
    await store.ledger.recordCharge(charge(A, k1.id, { at: T0 + DAY, model: 'm1', cost: usd('2') }))
    await store.ledger.recordCharge(charge(A, k2.id, { at: T0 + DAY, model: 'm2', images: 3, audioMs: 1500, promptTokens: 0, completionTokens: 0, cost: usd('4') }))
    await store.ledger.recordCharge(charge(B, kb.id, { at: T0, cost: usd('8') }))

    const all = await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-01-31' })
    t.strictSame(
      all.map((r) => [r.day, r.model, r.keyId, r.cost]),
      [
        ['2025-01-15', 'm1', k1.id, usd('1')],
        ['2025-01-16', 'm1', k1.id, usd('2')],
        ['2025-01-16', 'm2', k2.id, usd('4')],
      ],
    )
    t.equal(all.find((r) => r.model === 'm2')?.images, 3)
    t.equal(all.find((r) => r.model === 'm2')?.audioMs, 1500)
    t.strictSame((await store.ledger.usage(A, { fromDay: '2025-01-16', toDay: '2025-01-16' })).map((r) => r.cost), [usd('2'), usd('4')])
    t.strictSame((await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-01-31', keyId: k2.id })).map((r) => r.cost), [usd('4')])
    t.strictSame((await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-01-31', model: 'm1' })).map((r) => r.cost), [usd('1'), usd('2')])
    t.strictSame(await store.ledger.usage(A, { fromDay: '2025-02-01', toDay: '2025-02-28' }), [])
  })

  t.test('spendByKey: per key, from a day on or all time', async (t) => {
    const store = await open(t)
    await store.ledger.addFunds(A, 'deposit', usd('100'), '', T0)
    const k1 = await store.keys.createApiKey(apiKey(A))
    const k2 = await store.keys.createApiKey(apiKey(A))
    await store.ledger.recordCharge(charge(A, k1.id, { at: T0 - DAY, cost: usd('1') }))
    await store.ledger.recordCharge(charge(A, k1.id, { at: T0, cost: usd('2') }))
    await store.ledger.recordCharge(charge(A, k1.id, { at: T0, model: 'm2', cost: usd('0.25') }))
    await store.ledger.recordCharge(charge(A, k2.id, { at: T0 - DAY, cost: usd('4') }))
    t.strictSame(await store.ledger.spendByKey(A, null), new Map([[k1.id, usd('3.25')], [k2.id, usd('4')]]))
    t.strictSame(await store.ledger.spendByKey(A, '2025-01-15'), new Map([[k1.id, usd('2.25')]]))
    t.strictSame(await store.ledger.spendByKey(B, null), new Map())
  })

  t.test('jobs: created pending, processing, ended once; unfinished ones listed; charged by id; ended ones removed after', async (t) => {
    const store = await open(t)
    const job = (id: string, createdAt: number) => ({
      id,
      accountId: A,
      keyId: null,
      surface: 'images',
      model: 'img',
      providerAddress: B,
      params: '{"n":1}',
      body: Buffer.from('{"prompt":"x"}'),
      bodyPath: null,
      createdAt,
    })
    const one = randomUUID()
    const two = randomUUID()
    await store.jobs.createJob(job(one, T0))
    await store.jobs.createJob(job(two, T0 + 1))
    await t.rejects(store.jobs.createJob(job(one, T0)), 'an id is never reused')
    const fresh = await store.jobs.getJob(one)
    t.equal(fresh?.status, 'pending')
    t.equal(fresh?.updatedAt, T0)
    t.same(fresh?.body, Buffer.from('{"prompt":"x"}'))
    t.equal(await store.jobs.getJob(randomUUID()), null)
    await store.jobs.markProcessing(one, T0 + 5)
    t.equal((await store.jobs.getJob(one))?.status, 'processing')
    t.same((await store.jobs.unfinishedJobs()).map((j) => j.id), [one, two], 'oldest first')
    const done = { status: 'completed' as const, provider: B, result: '{"data":[]}', trace: '{"provider":"b"}', error: null, resKey: 'img-1', at: T0 + 10 }
    t.equal(await store.jobs.finishJob(one, done), true)
    t.equal(await store.jobs.finishJob(one, { ...done, status: 'failed', error: 'late', at: T0 + 11 }), false, 'ended once')
    const ended = await store.jobs.getJob(one)
    t.match(ended, { status: 'completed', result: '{"data":[]}', trace: '{"provider":"b"}', resKey: 'img-1', updatedAt: T0 + 10, error: null, body: null })
    await store.jobs.markProcessing(one, T0 + 20)
    t.equal((await store.jobs.getJob(one))?.status, 'completed', 'an ended job never goes back')
    t.same((await store.jobs.unfinishedJobs()).map((j) => j.id), [two])

    t.equal(await store.jobs.jobCharged(two), false)
    await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
    const k = await store.keys.createApiKey(apiKey(A))
    await store.ledger.recordCharge(charge(A, k.id, { requestId: two }))
    t.equal(await store.jobs.jobCharged(two), true)

    t.same(await store.jobs.removeEndedJobs(T0 + 10), [], 'ended at T0+10 is not before T0+10')
    t.same((await store.jobs.removeEndedJobs(T0 + 11)).map((j) => j.id), [one])
    t.equal(await store.jobs.getJob(one), null)
    t.equal((await store.jobs.getJob(two))?.status, 'pending', 'unfinished jobs are never removed')
  })

  t.test('responses: stored whole, read by owner only, never once expired or deleted; an id is never reused', async (t) => {
    const store = await open(t)
    const response = (id: string, accountId: string, createdAt: number, items: { id: string; item: string }[] = []) => ({
      id,
      accountId,
      model: 'm1',
      createdAt,
      expiresAt: createdAt + DAY,
      input: '[{"type":"message","role":"user","content":"hi ☃"}]',
      output: JSON.stringify(items.map((i) => JSON.parse(i.item))),
      response: '{"id":"' + id + '","object":"response"}',
      items,
    })
    const msg = { id: 'msg_1', item: '{"id":"msg_1","type":"message","content":[]}' }
    const fc = { id: 'fc_1', item: '{"id":"fc_1","type":"function_call","call_id":"c1"}' }
    const one = response('resp_one', A, T0, [msg, fc])
    await store.responses.putResponse(one)
    await t.rejects(store.responses.putResponse({ ...one, accountId: B }), StoreConflictError, 'an id is never reused, whatever the account')
    const got = await store.responses.getResponse(A, 'resp_one', T0 + 1)
    t.match(got, { id: 'resp_one', accountId: A, model: 'm1', createdAt: T0, expiresAt: T0 + DAY, input: one.input, output: one.output, response: one.response })
    t.equal(await store.responses.getResponse(B, 'resp_one', T0 + 1), null, "another account's response is unknown to it")
    t.equal(await store.responses.getResponse(A, 'resp_none', T0 + 1), null)
    t.equal(await store.responses.getResponse(A, 'resp_one', T0 + DAY), null, 'expired at expiresAt')

    t.same(await store.responses.getItems(A, ['fc_1', 'msg_1', 'nope', 'fc_1'], T0 + 1), new Map([['msg_1', msg.item], ['fc_1', fc.item]]))
    t.same(await store.responses.getItems(B, ['fc_1'], T0 + 1), new Map(), "another account's items are unknown to it")
    t.same(await store.responses.getItems(A, ['fc_1'], T0 + DAY), new Map(), 'items expire with their response')
    t.same(await store.responses.getItems(A, [], T0 + 1), new Map())
    const many = Array.from({ length: 1200 }, (_, i) => `x_${i}`)
    t.same(await store.responses.getItems(A, [...many, 'msg_1'], T0 + 1), new Map([['msg_1', msg.item]]), 'a long list of ids')

    // A provider that reuses an item id: the newest response's item is the one a reference names.
    const again = { id: 'msg_1', item: '{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"2"}]}' }
    await store.responses.putResponse(response('resp_two', A, T0 + 5, [again]))
    t.equal((await store.responses.getItems(A, ['msg_1'], T0 + 6)).get('msg_1'), again.item)
    await store.responses.putResponse(response('resp_b', B, T0, [msg]))
    t.equal((await store.responses.getItems(B, ['msg_1'], T0 + 1)).get('msg_1'), msg.item, 'item ids are per account')

    t.equal(await store.responses.deleteResponse(B, 'resp_one', T0 + 1), false, "another account cannot delete it")
    t.equal(await store.responses.deleteResponse(A, 'resp_one', T0 + 1), true)
    t.equal(await store.responses.deleteResponse(A, 'resp_one', T0 + 1), false, 'deleted once')
    t.equal(await store.responses.getResponse(A, 'resp_one', T0 + 1), null)
    t.same(await store.responses.getItems(A, ['fc_1'], T0 + 1), new Map(), 'its items go with it')
    t.ok(await store.responses.getResponse(A, 'resp_two', T0 + 6), 'the others stay')

    t.equal(await store.responses.removeExpiredResponses(T0 + DAY - 1), 0)
    t.equal(await store.responses.removeExpiredResponses(T0 + DAY), 1, 'resp_b expired (resp_two has 5 ms left)')
    t.equal(await store.responses.removeExpiredResponses(T0 + DAY + 5), 1)
    t.equal(await store.responses.getResponse(A, 'resp_two', T0), null, 'removed, whatever time is asked')
    t.equal(await store.responses.deleteResponse(A, 'resp_two', T0), false)
  })

  t.test('a closed store refuses calls', async (t) => {
    const store = await factory(t)
    await store.close()
    await store.close()
    await t.rejects(store.accounts.countAccounts())
  })

  t.test('changes: a store hears nothing of its own writes; unsubscribing twice is harmless', async (t) => {
    const store = await open(t)
    const heard: StoreChange[] = []
    const stop = store.changes.subscribe((c) => heard.push(c))
    await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
    const key = await store.keys.createApiKey(apiKey(A))
    await store.keys.revokeApiKey(A, key.id, T0)
    await store.accounts.setAccountRateLimit(A, 3)
    await new Promise((r) => setTimeout(r, 100))
    t.strictSame(heard, [])
    stop()
    stop()
  })

  if (!options.shared) return

  t.test('changes: each write by another handle is reported with its kind; charges and audit writes are not', async (t) => {
    const store = await open(t)
    const other = await open(t)
    const heard: StoreChange[] = []
    t.teardown(store.changes.subscribe((c) => heard.push(c)))
    await store.changes.ready?.()
    // A marker after each write: every change committed before it is reported before it.
    const M = '0x' + '5'.repeat(40)
    const isMarker = (c: StoreChange): boolean => c.kind === 'account' && c.accountId === M
    let marks = 0
    await other.accounts.ensureAccount(M, T0)
    await until(t, () => heard.some(isMarker), 'the first change')
    async function reported(write: () => Promise<unknown>): Promise<StoreChange[]> {
      heard.length = 0
      await write()
      await other.accounts.setAccountRateLimit(M, ++marks)
      await until(t, () => heard.some(isMarker), 'the marker')
      return heard.filter((c) => !isMarker(c))
    }

    t.strictSame(await reported(() => other.accounts.ensureAccount(A, T0)), [{ kind: 'account', accountId: A }], 'an account created')
    t.strictSame(await reported(() => other.accounts.ensureAccount(A, T0)), [], 'ensureAccount of an existing account changes nothing')
    t.strictSame(await reported(() => other.accounts.setAccountRateLimit(A, 7)), [{ kind: 'account', accountId: A }], 'a rate limit')
    t.strictSame(await reported(() => other.ledger.addFunds(A, 'deposit', usd('5'), '', T0)), [{ kind: 'funds', accountId: A }], 'a deposit')
    t.strictSame(await reported(() => other.ledger.addFunds(A, 'credit', usd('1'), '', T0)), [{ kind: 'funds', accountId: A }], 'a credit')
    t.strictSame(
      await reported(() => other.ledger.addFunds(B, 'deposit', usd('5'), '', T0)),
      [
        { kind: 'account', accountId: B },
        { kind: 'funds', accountId: B },
      ],
      'a deposit that creates its account',
    )

    const key = apiKey(A)
    const keyChange = { kind: 'key', accountId: A, keyId: key.id }
    t.strictSame(await reported(() => other.keys.createApiKey(key)), [keyChange], 'an api key created')
    t.strictSame(await reported(() => other.keys.updateApiKey(A, key.id, { name: 'renamed' })), [keyChange], 'an api key updated')
    t.strictSame(await reported(() => other.keys.revokeApiKey(A, key.id, T0 + 1)), [keyChange], 'an api key revoked')
    const mk = mgmtKey(A)
    const mkChange = { kind: 'key', accountId: A, keyId: mk.id }
    t.strictSame(await reported(() => other.keys.createMgmtKey(mk)), [mkChange], 'a management key created')
    t.strictSame(await reported(() => other.keys.touchMgmtKey(mk.id, T0, '10.0.0.1', 60_000)), [], 'an audit write is not a change')
    t.strictSame(await reported(() => other.keys.updateMgmtKey(A, mk.id, { scopes: ['keys:read'] })), [mkChange], 'a management key re-scoped')
    t.strictSame(await reported(() => other.keys.revokeMgmtKey(mk.id, T0 + 1)), [mkChange], 'a management key revoked')

    const live = apiKey(A)
    t.strictSame(await reported(() => other.keys.createApiKey(live)), [{ kind: 'key', accountId: A, keyId: live.id }])
    t.strictSame(await reported(() => other.ledger.recordCharge(charge(A, live.id))), [], 'a charge is not a change')
    t.strictSame(
      await reported(() => other.ledger.recordCharges([charge(A, live.id), charge(B, live.id), charge(A, live.id, { cost: usd('2') })])),
      [],
      'nor is a batch of them',
    )
    t.equal((await store.ledger.totals(A)).spent, usd('2.000042'), 'the charges were written')
  })

  t.test('changes: only this handle\'s own writes are left out; an unsubscribed listener hears nothing', async (t) => {
    const store = await open(t)
    const other = await open(t)
    const heard: StoreChange[] = []
    const gone: StoreChange[] = []
    t.teardown(store.changes.subscribe((c) => heard.push(c)))
    store.changes.subscribe((c) => gone.push(c))()
    await store.changes.ready?.()
    // Ours and theirs interleaved between two reads of the feed.
    await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
    await other.ledger.addFunds(B, 'deposit', usd('1'), '', T0)
    const ours = await store.keys.createApiKey(apiKey(A))
    await store.keys.revokeApiKey(A, ours.id, T0)
    const theirs = await other.keys.createApiKey(apiKey(B))
    await until(t, () => heard.some((c) => c.kind === 'key'), 'their key')
    t.strictSame(heard, [
      { kind: 'account', accountId: B },
      { kind: 'funds', accountId: B },
      { kind: 'key', accountId: B, keyId: theirs.id },
    ])
    t.strictSame(gone, [])
  })
}
