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
