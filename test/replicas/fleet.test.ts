/**
 * Three replicas on one PostgreSQL and one Redis, as real `serve` processes (issue #28 §1–4): they start
 * together on an empty database, the operator CLI works on it, keys created through one work on all, a
 * revocation or a change answered by one binds the next request on every one, a key's cap holds over the sum
 * of all replicas under a burst, the funds read the same everywhere, and one rate window spans them.
 */
import t from 'tap'
import { parseUsd } from '../../src/billing/money.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { startPostgres } from '../helpers/postgres.js'
import { startRedis } from '../helpers/redis.js'
import { chat, getJson, sendJson, startFleet, type Fleet } from '../helpers/replicas.js'
import { addr, DEFAULT_PRICE } from '../helpers/stack.js'

const WALLET = '0x' + 'f'.repeat(40)
const P = addr('d')

interface Keys {
  mk: string
  sk: string
}

/** Funds the fleet's account and issues an mk- and an sk- key with the operator CLI. */
function provision(fleet: Fleet, wallet = WALLET): Keys {
  fleet.cli('accounts', 'deposit', wallet, '100')
  const mk = /(mk-[A-Za-z0-9_-]{43})/.exec(fleet.cli('mgmt-keys', 'create', wallet, '--scopes', 'all', '--name', 'ops'))![1]!
  const sk = /(sk-[A-Za-z0-9_-]{43})/.exec(fleet.cli('api-keys', 'create', wallet, '--name', 'app'))![1]!
  return { mk, sk }
}

function costOf(text: string): bigint {
  return parseUsd((JSON.parse(text) as { x_svc_trace: { billing: { total_cost: string } } }).x_svc_trace.billing.total_cost)!
}

t.test('replicas on one PostgreSQL and Redis', async (t) => {
  const pg = await startPostgres(t)
  const redis = await startRedis(t)
  const sim = await startSimulator({ name: 'fleet', ttftMs: 2, tokensPerS: 2_000, completionTokens: 8 })
  t.teardown(() => sim.close())
  const providers = [{ address: P, url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: 'm-chat', type: 'chatbot', price: DEFAULT_PRICE }] }]

  t.test('three started at once on an empty database all come up; the CLI works on it; keys work everywhere at once', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers, together: true })
    const { mk, sk } = provision(fleet)
    for (const r of fleet.replicas) t.equal((await chat(r.url, sk)).status, 200, `replica ${r.index} serves a key the CLI made`)
    // A key created through replica 0 works on 1 and 2 the moment the create has answered.
    const created = await sendJson(fleet.replicas[0]!.url, 'POST', '/v1/api-keys', mk, { name: 'fresh' })
    t.equal(created.status, 201)
    for (const r of fleet.replicas.slice(1)) t.equal((await chat(r.url, created.body.key)).status, 200, `replica ${r.index} knows it`)
    t.match(fleet.cli('api-keys', 'list', WALLET), /fresh/)
  })

  t.test('revocation answered on one replica is in force on every replica for the very next request', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers })
    const { mk } = provision(fleet)
    for (let round = 0; round < 5; round++) {
      const created = await sendJson(fleet.replicas[round % 3]!.url, 'POST', '/v1/api-keys', mk, { name: `k${round}` })
      const key = created.body.key as string
      // Warm every replica's cache with the key.
      for (const r of fleet.replicas) t.equal((await chat(r.url, key)).status, 200)
      // Keep traffic going on the others while the DELETE runs.
      let stop = false
      const hammer = fleet.replicas.map(async (r) => {
        const seen: number[] = []
        while (!stop) seen.push((await chat(r.url, key)).status)
        return seen
      })
      const revoker = fleet.replicas[(round + 1) % 3]!
      const revoked = await sendJson(revoker.url, 'DELETE', `/v1/api-keys/${created.body.key_id}`, mk)
      t.equal(revoked.status, 200, 'revoked')
      // The very next request, on each replica, after the DELETE answered.
      const after = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
      t.same(after.map((a) => a.status), [401, 401, 401], `round ${round}: 401 everywhere at once`)
      stop = true
      const seen = (await Promise.all(hammer)).flat()
      t.ok(seen.every((s) => s === 200 || s === 401), 'only served or refused, never an error')
    }
  })

  t.test('a PATCH binds the next request everywhere: credit limit, allowed models', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers })
    const { mk } = provision(fleet)
    const created = await sendJson(fleet.replicas[0]!.url, 'POST', '/v1/api-keys', mk, { name: 'p' })
    const key = created.body.key as string
    const id = created.body.key_id
    for (const r of fleet.replicas) t.equal((await chat(r.url, key)).status, 200)
    t.equal((await sendJson(fleet.replicas[1]!.url, 'PATCH', `/v1/api-keys/${id}`, mk, { allowed_models: ['other-model'] })).status, 200)
    const denied = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
    t.same(denied.map((d) => d.status), [403, 403, 403], 'model_not_allowed everywhere')
    t.equal((await sendJson(fleet.replicas[2]!.url, 'PATCH', `/v1/api-keys/${id}`, mk, { allowed_models: null, credit_limit: '0.000000000001' })).status, 200)
    const capped = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
    t.same(capped.map((d) => d.status), [402, 402, 402], 'credit_limit_exceeded everywhere')
  })

  t.test('a key capped at 50 requests\' worth, 300 concurrent requests over 3 replicas: at least 35 served, never 51', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers })
    const { mk, sk } = provision(fleet)
    const one = await chat(fleet.replicas[0]!.url, sk)
    t.equal(one.status, 200)
    const cost = costOf(one.text)
    const created = await sendJson(fleet.replicas[0]!.url, 'POST', '/v1/api-keys', mk, { name: 'capped', credit_limit: formatAtto(cost * 50n) })
    t.equal(created.status, 201)
    const key = created.body.key as string
    const results = await Promise.all(Array.from({ length: 300 }, (_, i) => chat(fleet.replicas[i % 3]!.url, key)))
    const served = results.filter((r) => r.status === 200)
    const refused = results.filter((r) => r.status === 402)
    t.ok(served.length >= 35, `served ${served.length} (at least 35)`)
    t.ok(served.length <= 50, `served ${served.length} (never more than 50)`)
    t.equal(served.length + refused.length, 300, 'every other request got a 402')
    const billed = served.reduce((sum, r) => sum + costOf(r.text), 0n)
    t.ok(billed <= cost * 50n, 'the sum billed is within the cap')
    // The same figures from every replica, once the leases went back.
    await new Promise((r) => setTimeout(r, 500))
    const funds = await Promise.all(fleet.replicas.map((r) => getJson(r.url, '/v1/account/funds', mk)))
    t.same(new Set(funds.map((f) => JSON.stringify(f.body))).size, 1, 'funds read the same on every replica')
    t.equal(funds[0]!.body.reserved, '0', 'nothing stays reserved')
    const keys = await Promise.all(fleet.replicas.map((r) => getJson(r.url, '/v1/api-keys', mk)))
    const used = keys.map((k) => (k.body.data as { name: string; used: string }[]).find((x) => x.name === 'capped')!.used)
    t.same(new Set(used).size, 1, '`used` is the same on every replica')
    t.equal(parseUsd(used[0]!), billed, '`used` is what the traces billed')
  })

  t.test('one rate window per account across replicas: 60/min admits at most 60, at least 55', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers })
    // An account of its own: Redis keeps every account's window for a minute, across the subtests.
    const wallet = '0x' + '6'.repeat(40)
    const { sk } = provision(fleet, wallet)
    fleet.cli('accounts', 'rate-limit', wallet, '60')
    // The CLI's change reaches the replicas' caches (their keys carry the account's limit).
    await new Promise((r) => setTimeout(r, 500))
    const results = await Promise.all(Array.from({ length: 90 }, (_, i) => chat(fleet.replicas[i % 3]!.url, sk)))
    const admitted = results.filter((r) => r.status !== 429)
    t.ok(admitted.length <= 60 && admitted.length >= 55, `admitted ${admitted.length}`)
    const limited = results.filter((r) => r.status === 429)
    t.ok(limited.every((r) => Number(r.headers['retry-after']) >= 1), '429s carry Retry-After')
    t.ok(results.every((r) => r.headers['x-ratelimit-limit-requests'] === '60'), 'the same limit reported by every replica')
  })
})

/** atto-USD as the decimal text the API takes. */
function formatAtto(atto: bigint): string {
  const s = atto.toString().padStart(19, '0')
  return `${s.slice(0, -18)}.${s.slice(-18)}`.replace(/\.?0+$/, '')
}
