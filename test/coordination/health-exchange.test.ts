/**
 * Health shared between replicas over a real Redis (src/coordination/health-exchange.ts): an ejection made by
 * one replica's book reaches the other's at once; latencies one observed are blended into the other's.
 */
import t from 'tap'
import { HealthExchange } from '../../src/coordination/health-exchange.js'
import { RedisLink } from '../../src/coordination/redis.js'
import { HealthBook } from '../../src/health/health.js'
import { startRedis } from '../helpers/redis.js'

const settings = { failureThreshold: 2, cooldownMs: 5_000, ewmaAlpha: 0.3 }
const P = '0x' + '1'.repeat(40)

async function until(check: () => boolean, ms = 5_000): Promise<boolean> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (check()) return true
    await new Promise((r) => setTimeout(r, 10))
  }
  return check()
}

t.test('an ejection and latencies observed by one replica reach the other', async (t) => {
  const redis = await startRedis(t)
  const books = [new HealthBook(), new HealthBook()]
  const exchanges = await Promise.all(
    books.map(async (book, i) => {
      const link = new RedisLink(redis.url)
      await link.ready(5_000)
      const x = new HealthExchange(link, book, { replicaId: 'r' + i, ewmaAlpha: 0.3, latencyEveryMs: 50 })
      t.teardown(() => {
        x.close()
        return link.close()
      })
      return x
    }),
  )
  // Let both subscriptions settle.
  await new Promise((r) => setTimeout(r, 200))
  const now = performance.now()
  t.equal(books[1]!.provider(P).isHealthy(now), true)
  books[0]!.provider(P).recordFailure(now, settings)
  t.equal(books[0]!.provider(P).recordFailure(now, settings), true, 'ejected on replica 0')
  t.ok(await until(() => !books[1]!.provider(P).isHealthy(performance.now())), 'replica 1 skips it too')
  t.equal(books[1]!.provider(P).consecutiveFailures, 0, 'without counting failures of its own')
  t.ok(books[1]!.provider(P).unhealthyUntil <= performance.now() + 5_000 + 50, 'for the backoff replica 0 chose')

  books[0]!.offer(P, 'm').observeTtfb(120, 0.3)
  t.ok(await until(() => books[1]!.offer(P, 'm').samples > 0), 'the latency arrives')
  t.ok(Math.abs(books[1]!.offer(P, 'm').ewmaTtfbMs - 120) < 1e-6, 'a first observation is taken as it is')
  t.ok(exchanges[1]!.heard > 0)
})
