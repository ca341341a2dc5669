import t from 'tap'
import { RateLimiter, ResetClock } from '../../src/auth/rate-limit.js'

t.test('admits exactly the limit within the window, then refuses until the oldest request leaves it', async (t) => {
  const rl = new RateLimiter(3, 60_000)
  const seen = [0, 1000, 2000].map((at) => ({ ...rl.take('a', at) }))
  t.same(seen.map((d) => [d.allowed, d.remaining]), [[true, 2], [true, 1], [true, 0]])
  t.equal(seen[0]!.resetAt, 60_000, 'reset = when the oldest request leaves the window')
  const refused = rl.take('a', 30_000)
  t.equal(refused.allowed, false)
  t.equal(refused.retryAfter, 30, 'whole seconds until the oldest leaves')
  t.equal(rl.take('a', 59_999).allowed, false)
  const again = rl.take('a', 60_000)
  t.equal(again.allowed, true, 'sliding: the first request left the window')
  t.equal(again.remaining, 0)
  t.equal(again.resetAt, 61_000)
})

t.test('accounts are independent; a per-account limit overrides the default', async (t) => {
  const rl = new RateLimiter(1)
  t.equal(rl.take('a', 0).allowed, true)
  t.equal(rl.take('a', 1).allowed, false)
  t.equal(rl.take('b', 1).allowed, true)
  t.equal(rl.take('c', 1, 5).remaining, 4)
})

t.test('the ring grows with the requests in the window, not with the configured limit', async (t) => {
  const rl = new RateLimiter(100_000_000)
  const before = process.memoryUsage().arrayBuffers
  for (let i = 0; i < 1000; i++) rl.take('acct-' + i, i)
  const grown = process.memoryUsage().arrayBuffers - before
  t.ok(grown < 5_000_000, `1,000 accounts under a 100M/min limit hold ${grown} bytes, not 800 MB each`)

  // One account past several doublings keeps every arrival, in order.
  const one = new RateLimiter(1000, 60_000)
  for (let i = 0; i < 1000; i++) t.equal(one.take('x', i).remaining, 999 - i) || t.end()
  t.equal(one.take('x', 1000).allowed, false, 'the 1,001st in the window is refused')
  t.equal(one.take('x', 60_000).allowed, true, 'the first one left the window')
  t.equal(one.take('x', 60_000).allowed, false)
})

t.test('a lowered limit refuses until the window drains below it, and says when that is', async (t) => {
  const rl = new RateLimiter(10)
  for (let i = 0; i < 5; i++) rl.take('a', i)
  const refused = { ...rl.take('a', 10, 3) }
  t.equal(refused.allowed, false)
  // Five in the window under a limit of 3: the third oldest (at 2) leaving brings it to 2, not the oldest.
  t.equal(refused.resetAt, 60_002, 'reset = when the window drops below the new limit')
  t.equal(refused.retryAfter, 60, 'whole seconds until then')
  t.equal(rl.peek('a', 10, 3).resetAt, 60_002, 'peek reports the same time')
  t.equal(rl.take('a', 60_001, 3).allowed, false, 'the oldest two left: still three in the window')
  t.equal(rl.take('a', 60_002, 3).allowed, true, 'admitted at the reset time')
})

t.test('the reset clock formats ISO 8601 and reuses the text while the time is unchanged', async (t) => {
  const clock = new ResetClock()
  const a = clock.iso(0)
  t.equal(a, '1970-01-01T00:00:00.000Z')
  t.equal(clock.iso(0), a)
  t.equal(clock.iso(1500), '1970-01-01T00:00:01.500Z')
})

t.test('peek reports what take would, without counting a request', async (t) => {
  const limiter = new RateLimiter(3, 60_000)
  const fresh = limiter.peek('acct', 1_000)
  t.same({ ...fresh }, { allowed: true, limit: 3, remaining: 3, resetAt: 61_000, retryAfter: 0 }, 'an account never seen: the whole limit')
  limiter.take('acct', 1_000)
  limiter.take('acct', 2_000)
  for (let i = 0; i < 5; i++) t.equal(limiter.peek('acct', 3_000).remaining, 1, 'peeks count nothing')
  t.equal(limiter.peek('acct', 3_000).resetAt, 61_000, 'the oldest request leaves the window then')
  t.equal(limiter.take('acct', 3_000).remaining, 0, 'the third request is still admitted')
  const full = limiter.peek('acct', 4_000)
  t.equal(full.allowed, false)
  t.equal(full.remaining, 0)
  t.equal(limiter.peek('acct', 61_001).remaining, 1, 'the first request left the window')
})
