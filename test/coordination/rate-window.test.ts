/**
 * The account window shared by replicas (src/coordination/rate-window.ts) on a real Redis: three limiters,
 * as three replicas would hold them, admit exactly the limit between them; Redis down, each admits its share;
 * Redis back, exact again without a restart.
 */
import t from 'tap'
import { rateKeys, SharedRateLimiter } from '../../src/coordination/rate-window.js'
import { RedisLink } from '../../src/coordination/redis.js'
import { startRedis } from '../helpers/redis.js'

async function replicas(url: string, n: number, limit: number, t: { teardown(fn: () => unknown): void }) {
  // One prefix for all: they share the windows.
  const prefix = `svc:test:${Math.random()}:`
  const out: { link: RedisLink; limiter: SharedRateLimiter }[] = []
  for (let i = 0; i < n; i++) {
    const link = new RedisLink(url, { commandTimeoutMs: 300 })
    t.teardown(() => link.close())
    await link.ready(5_000)
    out.push({ link, limiter: new SharedRateLimiter(link, limit, { replicas: () => n, prefix }) })
  }
  return out
}

t.test('three replicas admit exactly the limit between them, however the requests are spread', async (t) => {
  const redis = await startRedis(t)
  const rs = await replicas(redis.url, 3, 60, t)
  const decisions = await Promise.all(Array.from({ length: 150 }, (_, i) => rs[i % 3]!.limiter.take('0xacc', Date.now())))
  const admitted = decisions.filter((d) => d.allowed)
  t.equal(admitted.length, 60, 'exactly the limit')
  const refused = decisions.filter((d) => !d.allowed)
  t.ok(refused.every((d) => d.remaining === 0 && d.retryAfter >= 1 && d.retryAfter <= 60), 'refusals carry a Retry-After within the window')
  t.ok(refused.every((d) => d.limit === 60), 'every answer reports the limit')
  // The headers agree whichever replica answers: the same remaining count from each.
  const peeks = await Promise.all(rs.map((r) => r.limiter.peek('0xacc', Date.now())))
  t.same(peeks.map((p) => p.remaining), [0, 0, 0])
  const resets = peeks.map((p) => p.resetAt)
  t.ok(Math.max(...resets) - Math.min(...resets) < 1_000, 'the same reset time, within clock reading noise')
  t.equal(rs.reduce((n, r) => n + r.limiter.fallbacks, 0), 0, 'no decision fell back')
  // Another account has its own window.
  t.equal((await rs[0]!.limiter.take('0xother', Date.now(), 60)).allowed, true)
})

t.test('the takes of one turn go to Redis as one call per account, decided in arrival order', async (t) => {
  const redis = await startRedis(t)
  const [r] = await replicas(redis.url, 1, 1_000, t)
  const limiter = r!.limiter
  // Limits differ within one batch (keys of one account with their own limits): each request is decided as a
  // call of its own would decide it, after the ones before it were counted.
  const limits = [5, 5, 5, 5, 3, 6, 6]
  const before = limiter.takeCalls
  const decisions = await Promise.all(limits.map((limit) => limiter.take('0xmixed', Date.now(), limit)))
  t.equal(limiter.takeCalls - before, 1, 'one script call for the turn')
  t.same(decisions.map((d) => d.allowed), [true, true, true, true, false, true, true])
  t.same(decisions.map((d) => d.remaining), [4, 3, 2, 1, 0, 1, 0])
  t.same(decisions.map((d) => d.limit), limits)
  t.ok(decisions[4]!.retryAfter >= 1 && decisions[4]!.retryAfter <= 60, 'a refusal in the batch carries its Retry-After')
  t.equal(decisions[0]!.retryAfter, 0)
  // Two accounts in one turn: a call each, neither counting the other's requests.
  const calls = limiter.takeCalls
  const [a, b] = await Promise.all([limiter.take('0xa', Date.now(), 1), limiter.take('0xb', Date.now(), 1)])
  t.equal(limiter.takeCalls - calls, 2)
  t.ok(a!.allowed && b!.allowed)
  // The next turn sees what this one admitted.
  t.equal((await limiter.take('0xmixed', Date.now(), 6)).allowed, false, 'six held, limit six')
  t.equal((await limiter.peek('0xmixed', Date.now(), 7)).remaining, 1, 'peek counts the window without taking')
  t.equal((await limiter.take('0xmixed', Date.now(), 7)).allowed, true)
  t.equal(limiter.fallbacks, 0)
})

t.test('a turn with more takes than one batch holds splits them, and stays exact', async (t) => {
  const redis = await startRedis(t)
  const [r] = await replicas(redis.url, 1, 500, t)
  const before = r!.limiter.takeCalls
  const decisions = await Promise.all(Array.from({ length: 600 }, () => r!.limiter.take('0xbig', Date.now())))
  t.equal(decisions.filter((d) => d.allowed).length, 500)
  t.ok(decisions.slice(0, 500).every((d) => d.allowed), 'the first 500 in arrival order are the admitted ones')
  t.same(decisions.slice(0, 3).map((d) => d.remaining), [499, 498, 497])
  t.equal(r!.limiter.takeCalls - before, 3, '256 + 256 + 88')
})

t.test('a per-account limit override is honoured across replicas', async (t) => {
  const redis = await startRedis(t)
  const rs = await replicas(redis.url, 2, 600, t)
  const decisions = await Promise.all(Array.from({ length: 20 }, (_, i) => rs[i % 2]!.limiter.take('0xacc', Date.now(), 7)))
  t.equal(decisions.filter((d) => d.allowed).length, 7)
})

t.test('redis down: each replica admits its share; back: exact again', async (t) => {
  const redis = await startRedis(t)
  if (!redis.controllable) return t.pass('skipped: an outside Redis cannot be stopped')
  const rs = await replicas(redis.url, 3, 60, t)
  await redis.kill()
  // Until the clients notice, a command fails fast (no offline queue) and falls back too.
  const down = await Promise.all(Array.from({ length: 90 }, (_, i) => rs[i % 3]!.limiter.take('0xdown', Date.now())))
  t.equal(down.filter((d) => d.allowed).length, 60, 'three shares of ceil(60 / 3)')
  t.ok(rs.every((r) => r.limiter.fallbacks > 0), 'each replica decided alone')
  await redis.start()
  await Promise.all(rs.map((r) => r.link.ready(10_000)))
  t.ok(rs.every((r) => r.link.up), 'reconnected by themselves')
  const before = rs.map((r) => r.limiter.fallbacks)
  const up = await Promise.all(Array.from({ length: 90 }, (_, i) => rs[i % 3]!.limiter.take('0xup', Date.now())))
  t.equal(up.filter((d) => d.allowed).length, 60, 'exact again')
  t.same(rs.map((r) => r.limiter.fallbacks), before, 'no fallback once Redis answers')
})

t.test('redis frozen: a decision falls back within the command timeout', async (t) => {
  const redis = await startRedis(t)
  if (!redis.controllable) return t.pass('skipped: an outside Redis cannot be frozen')
  const rs = await replicas(redis.url, 1, 60, t)
  redis.pause()
  t.teardown(() => redis.resume())
  const started = Date.now()
  const d = await rs[0]!.limiter.take('0xfrozen', Date.now())
  t.equal(d.allowed, true, 'served by the fallback')
  t.ok(Date.now() - started < 5_000, 'not a hang')
  redis.resume()
})

t.test('a window holding more than a lowered limit says when it admits again, not when its oldest leaves', async (t) => {
  const redis = await startRedis(t)
  const link = new RedisLink(redis.url, { commandTimeoutMs: 300 })
  t.teardown(() => link.close())
  await link.ready(5_000)
  const prefix = `svc:test:${Math.random()}:`
  const limiter = new SharedRateLimiter(link, 10, { replicas: () => 1, prefix })
  // Five requests admitted under the old limit, 50 s to 10 s ago by Redis's clock.
  const now = Number((await link.client.time())[0]) * 1000
  await link.client.zadd(rateKeys(prefix, '0xlowered')[0], now - 50_000, 'a', now - 40_000, 'b', now - 30_000, 'c', now - 20_000, 'd', now - 10_000, 'e')
  const refused = await limiter.take('0xlowered', Date.now(), 3)
  t.equal(refused.allowed, false)
  // Under a limit of 3 the window admits once the third oldest (30 s ago) leaves: in about 30 s, not 10.
  t.ok(refused.retryAfter >= 29 && refused.retryAfter <= 31, `Retry-After ${refused.retryAfter} s: when the count drops below the limit`)
  const peek = await limiter.peek('0xlowered', Date.now(), 3)
  t.ok(Math.abs(peek.resetAt - refused.resetAt) < 1_000, 'peek reports the same reset time')
  const admitted = await limiter.take('0xlowered', Date.now(), 10)
  t.equal(admitted.allowed, true, 'under the old limit it is admitted')
  t.ok(Math.abs(admitted.resetAt - (Date.now() + 10_000)) < 2_000, 'an admitted request: reset when the oldest leaves')
  t.equal(limiter.fallbacks, 0)
})
