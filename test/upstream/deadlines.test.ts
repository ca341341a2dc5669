/**
 * The total timeout of attempts (upstream.total_timeout_ms) on the pools' one shared timer: each attempt is
 * failed once its own deadline passes, in deadline order whatever the order they were watched in, and an
 * attempt that ended first is never failed.
 */
import t from 'tap'
import { type ActiveAttempt, UpstreamPools } from '../../src/upstream/pools.js'

const SETTINGS = {
  connections: 1,
  connectTimeoutMs: 1000,
  keepAliveTimeoutMs: 1000,
  headersTimeoutMs: 1000,
  bodyTimeoutMs: 1000,
  totalTimeoutMs: 1000,
  maxConcurrent: 10,
  queue: 0,
  queueTimeoutMs: 0,
}

t.test('each watched attempt fails at its own deadline, in deadline order; a forgotten one never does', async (t) => {
  const pools = new UpstreamPools(SETTINGS)
  t.teardown(() => pools.close())
  const failed: { name: string; code: unknown; late: boolean }[] = []
  let done: () => void
  const allFailed = new Promise<void>((resolve) => (done = resolve))
  const attempt = (name: string, inMs: number): ActiveAttempt => {
    const deadline = performance.now() + inMs
    return {
      deadline,
      activeSlot: -1,
      fail(err) {
        failed.push({ name, code: (err as { code?: unknown }).code, late: performance.now() >= deadline })
        pools.forget(this)
        if (failed.length === 3) done()
      },
    }
  }
  const late = attempt('late', 120)
  const early = attempt('early', 20)
  const ended = attempt('ended', 40)
  const middle = attempt('middle', 60)
  // The earliest deadline arrives after a later one was armed: the timer must move up for it.
  pools.watch(late)
  pools.watch(early)
  pools.watch(ended)
  pools.watch(middle)
  pools.forget(ended)
  // The shared timer is unref'd (an attempt's socket keeps a router alive): here the test keeps itself alive.
  const alive = setInterval(() => {}, 1000)
  await allFailed
  clearInterval(alive)
  t.same(
    failed.map((f) => f.name),
    ['early', 'middle', 'late'],
  )
  t.ok(failed.every((f) => f.code === 'SVC_TOTAL_TIMEOUT'), 'failed as a total timeout')
  t.ok(failed.every((f) => f.late), 'never before its deadline')
  t.equal(pools.active.size, 0)
})

t.test('the roster of attempts under way keeps exactly those added and not deleted, each knowing its slot', async (t) => {
  const pools = new UpstreamPools(SETTINGS)
  t.teardown(() => pools.close())
  const roster = pools.active
  const made: ActiveAttempt[] = Array.from({ length: 40 }, (_, i) => ({ deadline: 1000 + i, activeSlot: -1, fail() {} }))
  const model = new Set<ActiveAttempt>()
  // A fixed pseudo-random walk of adds and deletes, repeats and deletes of absent ones included.
  let seed = 7
  const next = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n)
  for (let step = 0; step < 2000; step++) {
    const a = made[next(made.length)]!
    if (next(3) === 0) {
      roster.delete(a)
      model.delete(a)
    } else {
      roster.add(a)
      model.add(a)
    }
  }
  const listed = roster.list()
  t.equal(roster.size, model.size)
  t.same(new Set(listed), model, 'the members are those added and not deleted since')
  t.ok(listed.every((a, i) => a.activeSlot === i), 'each member knows its slot')
  t.ok(made.every((a) => model.has(a) || a.activeSlot === -1), 'a non-member has no slot')
  const expired: ActiveAttempt[] = []
  const cut = 1020
  const nextDeadline = roster.due(cut, expired)
  t.same(new Set(expired), new Set(listed.filter((a) => a.deadline <= cut)), 'due: the members past the deadline')
  const later = listed.filter((a) => a.deadline > cut).map((a) => a.deadline)
  t.equal(nextDeadline, later.length === 0 ? Infinity : Math.min(...later), 'due: the earliest deadline still ahead')
  for (const a of listed) roster.delete(a)
  t.equal(roster.size, 0)
  t.ok(made.every((a) => a.activeSlot === -1))
})
