/**
 * Money and rate across three replicas on one PostgreSQL and one Redis, as real `serve` processes (issue #28
 * §3–4): a key's cap holds over the sum of all replicas under a burst and stays usable, funds and `used` read
 * the same everywhere, and one rate window spans the fleet.
 */
import t from 'tap'
import { parseUsd } from '../../src/billing/money.js'
import { chat, fleetBackends, getJson, provision, sendJson, startFleet } from '../helpers/replicas.js'
import { addr } from '../helpers/stack.js'

const WALLET = '0x' + 'f'.repeat(40)
const P = addr('d')

function costOf(text: string): bigint {
  return parseUsd((JSON.parse(text) as { x_svc_trace: { billing: { total_cost: string } } }).x_svc_trace.billing.total_cost)!
}

// Real processes, a real database: slower than the default per-file budget on a loaded machine.
t.setTimeout(400_000)

t.test('replicas on one PostgreSQL and Redis', async (t) => {
  const { pg, redis, providers } = await fleetBackends(t, P)

  t.test('a key capped at 50 requests\' worth, 300 concurrent requests over 3 replicas: at least 35 served, never 51', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers })
    const { mk, sk } = provision(fleet, WALLET)
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
