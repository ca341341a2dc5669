/**
 * The per-provider cap's bookkeeping (src/upstream/limiter.ts), below the end-to-end checks of
 * test/ops/provider-cap.test.ts: tryAcquire (the failover loop's path when a slot is free, with no callbacks
 * made) and acquire (the queue) share one count of slots, and a free slot never lets a newcomer pass a request
 * already queued.
 */
import t from 'tap'
import { ProviderLimiter } from '../../src/upstream/limiter.js'

const P = '0xprovider'

t.test('tryAcquire takes free slots up to the cap, and a release gives one back', async (t) => {
  const limiter = new ProviderLimiter({ max: 2, queue: 1, queueTimeoutMs: 10_000 })
  t.ok(limiter.tryAcquire(P), 'first slot')
  t.ok(limiter.tryAcquire(P), 'second slot')
  t.notOk(limiter.tryAcquire(P), 'none left: the caller must queue')
  t.same(limiter.load(P), { active: 2, waiting: 0 })
  limiter.release(P)
  t.same(limiter.load(P), { active: 1, waiting: 0 })
  t.ok(limiter.tryAcquire(P), 'the released slot is taken again')
  limiter.release(P)
  limiter.release(P)
  t.same(limiter.load(P), { active: 0, waiting: 0 }, 'every slot back')
})

t.test('a queued request runs before any newcomer, however its slot is taken', async (t) => {
  const limiter = new ProviderLimiter({ max: 1, queue: 2, queueTimeoutMs: 10_000 })
  const ran: string[] = []
  t.ok(limiter.tryAcquire(P), 'the only slot')
  limiter.acquire(P, () => ran.push('queued'), () => ran.push('queued refused'))
  t.same(limiter.load(P), { active: 1, waiting: 1 })
  t.notOk(limiter.tryAcquire(P), 'a newcomer does not pass the queued one')
  limiter.release(P)
  t.same(ran, ['queued'], 'the slot went to the one that waited')
  t.same(limiter.load(P), { active: 1, waiting: 0 }, 'and it holds it now')
  t.notOk(limiter.tryAcquire(P), 'still taken')
  limiter.release(P)
  t.ok(limiter.tryAcquire(P), 'free again once the queued one is done')
  limiter.release(P)
})

t.test('past the queue, or past the wait, the request is refused and holds nothing', async (t) => {
  const limiter = new ProviderLimiter({ max: 1, queue: 1, queueTimeoutMs: 20 })
  const events: string[] = []
  t.ok(limiter.tryAcquire(P))
  limiter.acquire(P, () => events.push('a ran'), () => events.push('a refused'))
  limiter.acquire(P, () => events.push('b ran'), () => events.push('b refused'))
  t.same(events, ['b refused'], 'the queue holds one')
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.same(events, ['b refused', 'a refused'], 'the queued one gave up after queueTimeoutMs')
  t.same(limiter.load(P), { active: 1, waiting: 0 })
  limiter.release(P)
  t.same(limiter.load(P), { active: 0, waiting: 0 })
  t.ok(limiter.tryAcquire(P), 'and the slot is free')
  limiter.release(P)
})

t.test('providers are counted apart', async (t) => {
  const limiter = new ProviderLimiter({ max: 1, queue: 0, queueTimeoutMs: 10_000 })
  t.ok(limiter.tryAcquire('0xa'))
  t.ok(limiter.tryAcquire('0xb'), 'another provider has its own slot')
  t.notOk(limiter.tryAcquire('0xa'))
  limiter.release('0xa')
  limiter.release('0xb')
})

t.test('an idle slot is kept for its provider, and idle slots are dropped once many providers had one', async (t) => {
  const limiter = new ProviderLimiter({ max: 1, queue: 1, queueTimeoutMs: 10_000 })
  t.ok(limiter.tryAcquire(P))
  limiter.release(P)
  t.equal(limiter.providers, 1, 'kept while idle')
  t.ok(limiter.tryAcquire(P), 'and taken again')
  // A busy provider with a waiter must survive the sweep that many idle ones start.
  const ran: string[] = []
  limiter.acquire(P, () => ran.push('waiter'), () => ran.push('refused'))
  for (let i = 0; i < 3000; i++) {
    const p = `0xp${i}`
    if (!limiter.tryAcquire(p)) t.fail(`no slot for ${p}`)
    limiter.release(p)
  }
  t.ok(limiter.providers <= 1025, `bounded: ${limiter.providers} slots kept after 3,000 providers`)
  t.same(limiter.load(P), { active: 1, waiting: 1 }, 'the busy provider keeps its slot and its queue')
  limiter.release(P)
  t.same(ran, ['waiter'], 'its waiter runs on the release')
  limiter.release(P)
  t.same(limiter.load(P), { active: 0, waiting: 0 })
})

t.test('with more providers busy at once than slots are kept, idle ones are still dropped, and every count stays right', async (t) => {
  const limiter = new ProviderLimiter({ max: 1, queue: 0, queueTimeoutMs: 10_000 })
  const busy = Array.from({ length: 1500 }, (_, i) => `0xbusy${i}`)
  for (const p of busy) if (!limiter.tryAcquire(p)) t.fail(`no slot for ${p}`)
  for (let i = 0; i < 5000; i++) {
    const p = `0xidle${i}`
    if (!limiter.tryAcquire(p)) t.fail(`no slot for ${p}`)
    limiter.release(p)
  }
  t.ok(limiter.providers <= 2 * 1500 + 1, `bounded by twice the busy ones: ${limiter.providers}`)
  t.ok(busy.every((p) => limiter.load(p).active === 1), 'every busy provider keeps its slot')
  for (const p of busy) limiter.release(p)
  t.ok(busy.every((p) => limiter.load(p).active === 0))
})
