/**
 * The leased account window (src/coordination/rate-lease.ts) on a real Redis: limiters as replicas hold them
 * never admit past the limit, and short of it by at most (replicas - 1) x lease size; a request on a warm
 * lease sends Redis nothing (counted by Redis itself: INFO commandstats); what a lease admitted is in the
 * window once it is returned; a lease whose replica vanished expires and its slots come back.
 */
import t from 'tap'
import { LeasedRateLimiter } from '../../src/coordination/rate-lease.js'
import { SharedRateLimiter } from '../../src/coordination/rate-window.js'
import { RedisLink } from '../../src/coordination/redis.js'
import { startRedis } from '../helpers/redis.js'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

const LEASE_MS = 400

async function replicas(t: Test, url: string, n: number, limit: number, leaseSize: number, prefix = `svc:test:${Math.random()}:`) {
  const out: { link: RedisLink; limiter: LeasedRateLimiter }[] = []
  for (let i = 0; i < n; i++) {
    const link = new RedisLink(url, { commandTimeoutMs: 300 })
    t.teardown(() => link.close())
    await link.ready(5_000)
    const limiter = new LeasedRateLimiter(link, limit, { leaseSize, leaseMs: LEASE_MS, replicas: () => n, prefix })
    t.teardown(() => limiter.close())
    out.push({ link, limiter })
  }
  return out
}

/** A leasing replica and an exact one (rate_lease_size 0) on one Redis and one account window. */
async function mixed(t: Test, url: string, limit: number, leaseSize: number) {
  const prefix = `svc:test:${Math.random()}:`
  const [leasing] = await replicas(t, url, 1, limit, leaseSize, prefix)
  const link = new RedisLink(url, { commandTimeoutMs: 300 })
  t.teardown(() => link.close())
  await link.ready(5_000)
  const exact = new SharedRateLimiter(link, limit, { replicas: () => 2, prefix })
  return { prefix, leasing: leasing!, link, exact }
}

/** Commands Redis ran, by name (INFO commandstats), as seen from a client of the test's own. */
async function commands(link: RedisLink): Promise<Map<string, number>> {
  const info = await link.client.info('commandstats')
  const out = new Map<string, number>()
  for (const line of info.split('\n')) {
    const m = /^cmdstat_([a-z|]+):calls=(\d+)/.exec(line.trim())
    if (m !== null) out.set(m[1]!, Number(m[2]))
  }
  return out
}

const scripts = (c: Map<string, number>): number => (c.get('evalsha') ?? 0) + (c.get('eval') ?? 0)

t.test('three replicas never admit past the limit, and fall short by at most (replicas - 1) x lease size', async (t) => {
  const redis = await startRedis(t)
  const S = 4
  const prefix = `svc:test:${Math.random()}:`
  const rs = await replicas(t, redis.url, 3, 60, S, prefix)
  // Arrivals spread over several turns, as a load balancer would spread them.
  const decisions = []
  for (let round = 0; round < 10; round++) {
    decisions.push(...(await Promise.all(Array.from({ length: 15 }, (_, i) => rs[i % 3]!.limiter.take('0xacc', Date.now())))))
  }
  const admitted = decisions.filter((d) => d.allowed).length
  t.ok(admitted <= 60, `never past the limit (${admitted})`)
  t.ok(admitted >= 60 - 2 * S, `short of it by at most (3 - 1) x ${S} (${admitted})`)
  t.ok(rs.some((r) => r.limiter.leasedAdmissions > 0), 'some admitted out of leases')
  const refused = decisions.filter((d) => !d.allowed)
  t.ok(refused.every((d) => d.remaining === 0 && d.retryAfter >= 1 && d.retryAfter <= 60), 'refusals carry a Retry-After within the window')
  t.ok(decisions.every((d) => d.limit === 60))
  // Once every lease is back, the window holds exactly what was admitted, each at its time.
  await Promise.all(rs.map((r) => r.limiter.close()))
  t.equal(await rs[0]!.link.client.zcard(prefix + '{0xacc}'), admitted, 'every admission is in the window once the leases are back')
  t.equal(rs.reduce((n, r) => n + r.limiter.fallbacks, 0), 0, 'no decision fell back')
})

t.test('a request on a warm lease sends Redis no command; half used, the next is asked for while it still admits, and no request waits', async (t) => {
  const redis = await startRedis(t)
  const prefix = `svc:test:${Math.random()}:`
  const [r] = await replicas(t, redis.url, 1, 100, 10, prefix)
  const limiter = r!.limiter
  const first = await limiter.take('0xwarm', Date.now())
  t.equal(first.allowed, true)
  t.equal(first.remaining, 99)
  const before = await commands(r!.link)
  const calls = limiter.calls
  // A lease of 10: four admissions leave six, above half of it.
  const warm = []
  for (let i = 0; i < 4; i++) warm.push(limiter.take('0xwarm', Date.now()))
  t.ok(warm.every((d) => !(d instanceof Promise)), 'decided at once, out of the lease')
  const after = await commands(r!.link)
  t.equal(scripts(after) - scripts(before), 0, 'Redis ran no script for them (INFO commandstats)')
  t.equal(limiter.calls, calls, 'and the limiter sent none')
  t.same(warm.map((d) => (d as { remaining: number }).remaining), [98, 97, 96, 95], 'X-RateLimit-Remaining counts down as one window would')
  // Steady load past many leases' worth: each lease is renewed once half used, in the background.
  const steady = []
  for (let i = 0; i < 40; i++) {
    steady.push(limiter.take('0xwarm', Date.now()))
    await new Promise((resolve) => setTimeout(resolve, 1))
  }
  t.ok(steady.every((d) => !(d instanceof Promise)), 'none waited for Redis: the next lease was there before this one ran out')
  t.same(
    steady.map((d) => (d as { remaining: number }).remaining),
    Array.from({ length: 40 }, (_, i) => 94 - i),
    'the count runs on across renewals (the kept slots are neither lost nor counted twice)',
  )
  const renewals = limiter.calls - calls
  t.ok(renewals >= 6 && renewals <= 9, `one call per half lease (5 admissions): ${renewals} for 40`)
  const leases = await r!.link.client.hgetall(prefix + 'lease:{0xwarm}')
  const held = Object.values(leases).map((v) => Number(v.split(':')[0]))
  t.equal(held.length, 1, 'one lease in Redis')
  t.ok(held[0]! <= 10, `never more than the lease size held (${held[0]})`)
  await limiter.close()
  t.equal(await r!.link.client.zcard(prefix + '{0xwarm}'), 45, 'every admission is an entry of the window once the lease is back')
  t.equal(await r!.link.client.hlen(prefix + 'lease:{0xwarm}'), 0, 'and no lease is left')
})

t.test("a replica that vanishes with a lease: the requests its slots would have admitted wait for the lease to expire, then get them", async (t) => {
  const redis = await startRedis(t)
  const prefix = `svc:test:${Math.random()}:`
  const [gone, other] = await replicas(t, redis.url, 2, 20, 10, prefix)
  t.equal((await gone!.limiter.take('0xacc', Date.now())).allowed, true)
  t.equal(await gone!.link.client.hlen(prefix + 'lease:{0xacc}'), 1, 'it holds a lease')
  // It dies: no return, no report. It took 1 and leased 4 (half of its share of the 19 left, 2 replicas).
  gone!.link.client.disconnect()
  const started = performance.now()
  const order: number[] = []
  const decisions = await Promise.all(Array.from({ length: 20 }, (_, i) => Promise.resolve(other!.limiter.take('0xacc', Date.now())).then((d) => (order.push(i), d))))
  t.ok(performance.now() - started >= LEASE_MS - 50, 'the last ones were decided once its lease had expired')
  t.same(decisions.map((d) => d.allowed), [...Array<boolean>(19).fill(true), false], "all but the vanished replica's one admission, in arrival order")
  t.same(order.slice(0, 15), Array.from({ length: 15 }, (_, i) => i), 'the 15 the window had room for at once were not held back')
  const refused = decisions[19]!
  t.ok(refused.retryAfter >= 58 && refused.retryAfter <= 60, `the one refused after waiting: Retry-After ${refused.retryAfter} s, when the window's oldest leaves`)
  t.equal(await other!.link.client.zcard(prefix + '{0xacc}'), 20, 'the window: its 1 and the 19 of the other, each an entry, no lease left')
})

t.test('redis down with leases out: each replica admits its share alone, nothing hangs; back: leased again', async (t) => {
  const redis = await startRedis(t)
  if (!redis.controllable) return t.pass('skipped: an outside Redis cannot be stopped')
  const rs = await replicas(t, redis.url, 3, 60, 4)
  t.ok((await Promise.all(rs.map((r) => r.limiter.take('0xdown', Date.now())))).every((d) => d.allowed), 'each took a lease')
  await redis.kill()
  const down = await Promise.all(Array.from({ length: 90 }, (_, i) => rs[i % 3]!.limiter.take('0xdown', Date.now())))
  // Until a client notices, its lease in memory may still admit; then each decides alone on ceil(60 / 3).
  t.ok(down.filter((d) => d.allowed).length <= 60 + 3 * 4, 'at most the shares and what the leases held')
  t.ok(rs.every((r) => r.limiter.fallbacks > 0), 'each replica decided alone')
  await redis.start()
  await Promise.all(rs.map((r) => r.link.ready(10_000)))
  const before = rs.map((r) => r.limiter.fallbacks)
  const up = await Promise.all(Array.from({ length: 90 }, (_, i) => rs[i % 3]!.limiter.take('0xup', Date.now())))
  const admitted = up.filter((d) => d.allowed).length
  t.ok(admitted <= 60 && admitted >= 60 - 2 * 4, `shared again (${admitted})`)
  t.same(rs.map((r) => r.limiter.fallbacks), before, 'no fallback once Redis answers')
})

t.test('replicas with leases and without (rate_lease_size 0) share one window: together never past the limit', async (t) => {
  const redis = await startRedis(t)
  const { prefix, leasing, link, exact } = await mixed(t, redis.url, 40, 8)
  // The leasing replica first takes a lease it will not use up: the exact one must count it as held.
  t.ok((await leasing.limiter.take('0xmixed', Date.now())).allowed)
  const decisions = []
  for (let round = 0; round < 8; round++) {
    decisions.push(
      ...(await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? leasing.limiter : exact).take('0xmixed', Date.now())))),
    )
  }
  const admitted = 1 + decisions.filter((d) => d.allowed).length
  t.ok(admitted <= 40, `never past the limit across both kinds of replica (${admitted})`)
  t.ok(admitted >= 40 - 8, `short of it by at most one lease (${admitted})`)
  t.ok(decisions.some((d, i) => (i % 10) % 2 === 1 && d.allowed), 'the exact replica admitted some')
  t.ok(leasing.limiter.leasedAdmissions > 0, 'the leasing one admitted some out of its lease')
  await leasing.limiter.close()
  t.equal(await link.client.zcard(prefix + '{0xmixed}'), admitted, 'both kinds of admission are in the one window')
  t.equal(exact.fallbacks + leasing.limiter.fallbacks, 0)
})

t.test("an exact replica refused for slots another replica leases unused: Retry-After is the lease's end, not the window's", async (t) => {
  const redis = await startRedis(t)
  const { prefix, leasing, link, exact } = await mixed(t, redis.url, 10, 8)
  // One admitted and a lease of 4 (half of the 9 left, one replica): 5 of the 10 are counted.
  t.ok((await leasing.limiter.take('0xheld', Date.now())).allowed)
  const lease = Object.values(await link.client.hgetall(prefix + 'lease:{0xheld}'))
  t.same(lease.map((v) => Number(v.split(':')[0])), [4], 'the leasing replica holds 4 slots it does not use')
  const admitted = await Promise.all(Array.from({ length: 5 }, () => exact.take('0xheld', Date.now())))
  t.ok(admitted.every((d) => d.allowed), 'the exact replica takes the other 5')
  const refused = await exact.take('0xheld', Date.now())
  t.equal(refused.allowed, false)
  t.equal(refused.retryAfter, 1, `Retry-After ${refused.retryAfter} s: when the lease ends (${LEASE_MS} ms), not when the window's oldest leaves (60 s)`)
  t.ok(refused.resetAt - Date.now() <= LEASE_MS + 50, 'X-RateLimit-Reset: the same instant')
})
