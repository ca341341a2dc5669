/**
 * The leased rate window across real `serve` processes on one PostgreSQL and one Redis (issue #45): a request
 * on a warm lease sends Redis no script (INFO commandstats, counted by Redis), the limit holds across three
 * replicas within the stated slack, and a SIGKILLed replica's lease comes back when it expires; /metrics counts
 * where each replica's decisions were made.
 */
import t from 'tap'
import { RedisLink } from '../../src/coordination/redis.js'
import { chat, fleetBackends, provision, startFleet } from '../helpers/replicas.js'
import { addr } from '../helpers/stack.js'

const P = addr('e')
const LEASE_SIZE = 4
const LEASE_MS = 3_000

t.setTimeout(400_000)

/** Scripts Redis ran (EVALSHA and EVAL calls, INFO commandstats): every rate window decision is one. */
async function scripts(link: RedisLink): Promise<number> {
  const info = await link.client.info('commandstats')
  let n = 0
  for (const line of info.split('\n')) {
    const m = /^cmdstat_(evalsha|eval):calls=(\d+)/.exec(line.trim())
    if (m !== null) n += Number(m[2])
  }
  return n
}

t.test('a leased rate window over three replica processes', async (t) => {
  const { pg, redis, providers } = await fleetBackends(t, P)
  const fleet = await startFleet(t, {
    n: 3,
    pgUrl: await pg.newDatabase(),
    redisUrl: redis.url,
    providers,
    config: { redis: { rate_lease_size: LEASE_SIZE, rate_lease_ms: LEASE_MS } },
  })
  const link = new RedisLink(redis.url)
  t.teardown(() => link.close())
  await link.ready(5_000)
  const [r0, r1, r2] = fleet.replicas as [typeof fleet.replicas[0], typeof fleet.replicas[0], typeof fleet.replicas[0]]

  t.test('requests on a warm lease send Redis nothing; the lease is renewed in the background, once half used', async (t) => {
    const wallet = '0x' + '1'.repeat(40)
    const { sk } = provision(fleet, wallet)
    fleet.cli('accounts', 'rate-limit', wallet, '1000')
    await new Promise((r) => setTimeout(r, 500))
    const first = await chat(r0!.url, sk)
    t.equal(first.status, 200)
    const before = await scripts(link)
    // Half a lease: no call yet.
    const warm = []
    for (let i = 0; i < LEASE_SIZE / 2 - 1; i++) warm.push(await chat(r0!.url, sk))
    t.equal((await scripts(link)) - before, 0, `${LEASE_SIZE / 2 - 1} requests, no script run by Redis`)
    for (let i = LEASE_SIZE / 2 - 1; i < 2 * LEASE_SIZE; i++) warm.push(await chat(r0!.url, sk))
    t.ok(warm.every((r) => r.status === 200))
    t.same(
      warm.map((r) => r.headers['x-ratelimit-remaining-requests']),
      Array.from({ length: 2 * LEASE_SIZE }, (_, i) => String(998 - i)),
      'X-RateLimit-Remaining counts down as one window would, across renewals',
    )
    const calls = (await scripts(link)) - before
    t.ok(calls >= 1 && calls <= 4, `two leases' worth of requests, one script per half lease (${calls})`)
    // The replica's own count of the same: /metrics. Every warm request was admitted out of a lease: none waited.
    const text = await (await fetch(r0!.url + '/metrics')).text()
    const kind = (k: string): number => Number(new RegExp(`^svc_rate_window_total\\{kind="${k}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? NaN)
    t.equal(kind('leased'), 2 * LEASE_SIZE, `svc_rate_window_total{kind="leased"}: all ${2 * LEASE_SIZE} out of a lease, none waited for Redis`)
    t.ok(kind('redis_calls') >= 2, `and the script calls (${kind('redis_calls')})`)
    t.equal(kind('alone'), 0, 'nothing decided without Redis')
  })

  t.test('60 a minute over three replicas: never more than 60, at least 60 - (3 - 1) x lease size', async (t) => {
    const wallet = '0x' + '2'.repeat(40)
    const { sk } = provision(fleet, wallet)
    fleet.cli('accounts', 'rate-limit', wallet, '60')
    await new Promise((r) => setTimeout(r, 500))
    const results = []
    for (let round = 0; round < 10; round++) results.push(...(await Promise.all(Array.from({ length: 15 }, (_, i) => chat(fleet.replicas[i % 3]!.url, sk)))))
    const admitted = results.filter((r) => r.status !== 429).length
    t.ok(admitted <= 60, `admitted ${admitted}: never past the limit`)
    t.ok(admitted >= 60 - 2 * LEASE_SIZE, `admitted ${admitted}: at least ${60 - 2 * LEASE_SIZE}`)
    const limited = results.filter((r) => r.status === 429)
    t.ok(limited.every((r) => Number(r.headers['retry-after']) >= 1 && r.headers['x-ratelimit-remaining-requests'] === '0'), '429s carry Retry-After and no remaining')
    t.ok(results.every((r) => r.headers['x-ratelimit-limit-requests'] === '60'), 'the same limit reported by every replica')
  })

  t.test("a SIGKILLed replica's lease expires and its slots come back to the requests that waited for them", async (t) => {
    const wallet = '0x' + '3'.repeat(40)
    const { sk } = provision(fleet, wallet)
    fleet.cli('accounts', 'rate-limit', wallet, '20')
    await new Promise((r) => setTimeout(r, 500))
    t.equal((await chat(r0!.url, sk)).status, 200)
    const leases = await link.client.hlen('svc:rate:lease:{' + wallet + '}')
    t.equal(leases, 1, 'it took a lease with its request')
    // 1 admitted, and a lease of 3: half of its share (19 / 3 replicas) of what is left.
    await r0!.kill()
    // 16 have room at once; the other 4 are refused by the window only for its 3 leased slots: they wait for
    // its lease to expire (at most rate_lease_ms), then 3 are admitted and one is refused.
    const results = await Promise.all(Array.from({ length: 20 }, () => chat(r1!.url, sk)))
    t.equal(results.filter((r) => r.status === 200).length, 19, "all but the killed replica's one admission")
    const refused = results.filter((r) => r.status === 429)
    t.equal(refused.length, 1)
    t.ok(Number(refused[0]!.headers['retry-after']) > LEASE_MS / 1000, `Retry-After ${refused[0]!.headers['retry-after']}: the window's, its lease is gone`)
    t.equal(await link.client.hlen('svc:rate:lease:{' + wallet + '}'), 0, 'no lease of the killed replica is left')
    const more = await Promise.all(Array.from({ length: 5 }, () => chat(r2!.url, sk)))
    t.ok(more.every((r) => r.status === 429), 'and no more anywhere')
  })
})
