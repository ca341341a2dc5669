/**
 * The half-open trial (issue #13 §1): once an ejection's backoff is over, exactly one try (a request's attempt
 * or a probe) goes to the provider; every other request keeps skipping it until that trial succeeds (healthy
 * again) or fails (ejected again, for twice as long). Also the rolling uptime window (§2).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { request } from 'undici'
import { ProviderHealth, UptimeWindow, type HealthSettings } from '../../src/health/health.js'
import { completionJson } from '../helpers/fake-provider.js'
import { addr, startStack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const A = addr('a')
const B = addr('b')
const COOLDOWN_MS = 200

t.test('half-open: one claim of the trial; other tries neither close nor reopen the breaker meanwhile', async (t) => {
  const s: HealthSettings = { failureThreshold: 1, cooldownMs: 100, ewmaAlpha: 0.2 }
  const h = new ProviderHealth()
  t.equal(h.claimTrial(0), false, 'closed: no trial to claim')
  h.recordFailure(0, s)
  t.equal(h.claimTrial(50), false, 'open: no trial yet')
  t.ok(h.isHealthy(100), 'half-open: routable until the trial is taken')
  t.equal(h.claimTrial(100), true, 'the first claim takes the trial')
  t.equal(h.claimTrial(100), false, 'a second claim does not')
  t.notOk(h.isHealthy(100), 'skipped while the trial is under way')
  h.recordSuccess(101)
  t.notOk(h.isHealthy(101), 'an answer of another try does not close it')
  t.equal(h.recordFailure(101, s), false, 'a failure of another try does not reopen it')
  h.endTrial()
  t.ok(h.isHealthy(102), 'a trial that ended without a verdict (429, client gone) frees the next claim')
  t.equal(h.claimTrial(102), true)
  t.equal(h.recordFailure(103, s, true), true, 'the trial failed: ejected again')
  t.equal(h.unhealthyUntil, 303, 'for twice the backoff')
  t.notOk(h.trialTaken)
  t.equal(h.claimTrial(303), true)
  h.recordSuccess(304, true)
  h.endTrial()
  t.ok(h.isHealthy(304), 'the trial succeeded: closed')
  t.equal(h.ejections, 0, 'and the backoff reset')
})

t.test('uptime is the share over a rolling window, not a lifetime ratio', async (t) => {
  const w = new UptimeWindow(1200)
  t.equal(w.share(0), 100, '100 before anything was recorded')
  for (let i = 0; i < 3; i++) w.record(10, false)
  w.record(20, true)
  t.equal(w.share(20), 25)
  w.record(1500, true)
  t.equal(w.share(1500), 100, 'the failures fell out of the window')
  t.equal(w.share(5000), 100, 'an idle window is 100 again')
  const h = new ProviderHealth(1200)
  h.recordFailure(0, { failureThreshold: 5, cooldownMs: 100, ewmaAlpha: 0.2 })
  h.recordSuccess(0)
  t.equal(h.uptime(0), 50)
  t.equal(h.uptime(2000), 100)
})

/** A provider the test drives: 'fail' answers 500 at once; 'hold' keeps each request until release(). */
async function heldProvider(t: { teardown(fn: () => unknown): void }) {
  let mode: 'fail' | 'hold' = 'fail'
  let received = 0
  const held: ServerResponse[] = []
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume()
    req.on('end', () => {
      received++
      if (mode === 'fail') {
        res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"down"}}')
        return
      }
      held.push(res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const res of held) res.destroy()
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const answer = completionJson('chatcmpl-held', MODEL, 1, 1)
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get received() {
      return received
    },
    get held() {
      return held.length
    },
    setMode(m: 'fail' | 'hold') {
      mode = m
    },
    release(ok: boolean) {
      for (const res of held.splice(0)) {
        if (ok) res.writeHead(200, { 'content-type': 'application/json' }).end(answer)
        else res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"still down"}}')
      }
    },
  }
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await sleep(5)
}

t.test('concurrent requests after the backoff: exactly one trial reaches the provider, the rest skip it', async (t) => {
  const a = await heldProvider(t)
  const stack = await startStack(
    t,
    [
      { address: A, url: a.url, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }] },
      { address: B, models: [{ id: MODEL, price: { prompt: 0.5, completion: 1 } }] },
    ],
    { routing: { failure_threshold: 1, unhealthy_cooldown_ms: COOLDOWN_MS }, health: { probes: false } },
  )
  const health = stack.router.table.provider(A)!.health
  const post = async () => {
    const res = await request(stack.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', ...stack.auth },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
    })
    t.equal(res.statusCode, 200)
    const body = (await res.body.json()) as { x_svc_trace: { provider: string; attempts: { provider: string }[] } }
    return body.x_svc_trace
  }

  t.equal((await post()).provider, B, 'A failed and was ejected; B answered')
  t.equal(health.ejections, 1)

  type Trace = Awaited<ReturnType<typeof post>>
  /** 8 requests at once while A is half-open: 7 settle without A, one is held there as the trial (returned unsettled). */
  const burst = async (label: string) => {
    a.setMode('hold')
    const before = a.received
    const done: Trace[] = []
    const all = Array.from({ length: 8 }, () => post().then((trace) => (done.push(trace), trace)))
    await until(() => done.length === 7 && a.held === 1)
    t.equal(a.received - before, 1, `${label}: exactly one request reached A`)
    t.same(
      done.map((tr) => tr.attempts.map((x) => x.provider)),
      Array.from({ length: 7 }, () => [B]),
      `${label}: the other seven skipped A`,
    )
    return { settled: Promise.all(all) }
  }

  // Round 1: the trial fails.
  await sleep(COOLDOWN_MS + 50)
  const round1 = await burst('round 1')
  // The trial fails after this moment, so A is ejected until at least releasedAt + 2 × COOLDOWN_MS: asked about
  // a moment just before that, the answer does not depend on how long the requests below took to settle.
  const releasedAt = performance.now()
  a.release(false)
  const traces1 = await round1.settled
  const trial1 = traces1.find((tr) => tr.attempts.length === 2)!
  t.same(trial1.attempts.map((x) => x.provider), [A, B], 'the failed trial moved on to B')
  t.equal(health.ejections, 2, 'ejected again, with the backoff doubled')
  t.notOk(health.isHealthy(releasedAt + 2 * COOLDOWN_MS - 1), 'for twice the first backoff')

  // Round 2: after the doubled backoff, the trial succeeds.
  await sleep(2 * COOLDOWN_MS + 50)
  const round2 = await burst('round 2')
  a.release(true)
  const traces2 = await round2.settled
  t.equal(traces2.filter((tr) => tr.provider === A).length, 1, 'the trial was answered by A')
  t.equal(health.ejections, 0, 'the breaker closed')
  a.setMode('hold')
  const next = post()
  await until(() => a.held === 1)
  a.release(true)
  t.equal((await next).provider, A, 'A is routed to again')
})
