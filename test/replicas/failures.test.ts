/**
 * What failures do to a fleet of three replicas on one PostgreSQL and Redis (issue #28 §6–8), with real
 * `serve` processes: a replica SIGKILLed under load (the others carry on, every delivered answer is billed once,
 * its holds come back within dead_after_ms), PostgreSQL stopped or frozen (clear errors in bounded time, the
 * catalog answers, /readyz 503, service resumes by itself with nothing lost or doubled), Redis killed (served
 * on, revocation exact, shared again when it returns).
 */
import t from 'tap'
import pg from 'pg'
import { request } from 'undici'
import { parseUsd } from '../../src/billing/money.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { startPostgres } from '../helpers/postgres.js'
import { startRedis } from '../helpers/redis.js'
import { chat, getJson, provision, sendJson, startFleet } from '../helpers/replicas.js'
import { addr, DEFAULT_PRICE } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'

const WALLET = '0x' + 'e'.repeat(40)
const P = addr('e')


interface Delivered {
  requestId: string
  cost: bigint
}

/** A streamed completion; the trace of a stream delivered whole (ending in [DONE]), else null. */
async function streamed(url: string, key: string): Promise<Delivered | null> {
  const res = await chat(url, key, { stream: true })
  if (res.status !== 200 || !res.text.endsWith('data: [DONE]\n\n')) return null
  const chunk = res.text.split('\n\n').find((e) => e.includes('"x_svc_trace"'))
  if (chunk === undefined) return null
  const trace = (JSON.parse(chunk.slice('data: '.length)) as { x_svc_trace: { request_id: string; billing: { total_cost: string } } }).x_svc_trace
  return { requestId: trace.request_id, cost: parseUsd(trace.billing.total_cost)! }
}

async function charges(url: string): Promise<Map<string, bigint>> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ request_id: string; amount: string }>("SELECT request_id, amount FROM journal WHERE kind = 'charge'")
    return new Map(rows.map((r) => [r.request_id, BigInt(r.amount)]))
  } finally {
    await client.end()
  }
}

// Real processes, a real database: slower than the default per-file budget on a loaded machine.
t.setTimeout(400_000)

t.test('failures of a fleet', async (t) => {
  const postgres = await startPostgres(t)
  const redis = await startRedis(t)
  const sim = await startSimulator({ name: 'failures', ttftMs: 5, tokensPerS: 400, completionTokens: 8 })
  t.teardown(() => sim.close())
  const providers = [{ address: P, url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: 'm-chat', type: 'chatbot', price: DEFAULT_PRICE }] }]

  t.test('a replica SIGKILLed under load: the others carry on, delivered answers billed once, its holds released', async (t) => {
    const db = await postgres.newDatabase()
    const fleet = await startFleet(t, { n: 3, pgUrl: db, redisUrl: redis.url, providers })
    const { mk, sk } = provision(fleet, WALLET)
    const [a, b, victim] = fleet.replicas as [typeof fleet.replicas[0], typeof fleet.replicas[0], typeof fleet.replicas[0]]
    const delivered: Delivered[] = []
    const survivorsFailed: string[] = []
    let stop = false
    const client = async (url: string, survivor: boolean): Promise<void> => {
      while (!stop) {
        try {
          const d = await streamed(url, sk)
          if (d !== null) delivered.push(d)
          else if (survivor) survivorsFailed.push('incomplete stream')
        } catch (err) {
          if (survivor) survivorsFailed.push(String(err))
          else return
        }
      }
    }
    const clients = [
      ...Array.from({ length: 4 }, () => client(a!.url, true)),
      ...Array.from({ length: 4 }, () => client(b!.url, true)),
      ...Array.from({ length: 4 }, () => client(victim!.url, false)),
    ]
    await eventually(() => delivered.length >= 30, 15_000)
    await victim!.kill()
    // The survivors keep serving after the kill.
    const before = delivered.length
    await eventually(() => delivered.length >= before + 30, 15_000)
    stop = true
    await Promise.all(clients)
    t.same(survivorsFailed, [], 'no request on the surviving replicas failed')
    const billed = await charges(db)
    const missing = delivered.filter((d) => billed.get(d.requestId) !== d.cost)
    t.same(missing, [], 'every delivered answer is billed, at the cost its trace shows')
    t.equal(new Set(delivered.map((d) => d.requestId)).size, delivered.length, 'no answer delivered twice')
    // The dead replica's leases come back within dead_after_ms (3 s here) plus a heartbeat.
    t.ok(
      await eventually(async () => (await getJson(a!.url, '/v1/account/funds', mk)).body.reserved === '0', 10_000, 100),
      'reserved returns to 0',
    )
    const funds = (await getJson(b!.url, '/v1/account/funds', mk)).body
    t.equal(parseUsd(funds.available), parseUsd('100')! - parseUsd(funds.spent)!, 'the whole remaining budget is available again')
  })

  t.test('PostgreSQL stopped: enveloped errors in bounded time, catalog and /readyz answer, then service resumes', async (t) => {
    if (!postgres.controllable) return t.pass('skipped: an outside PostgreSQL cannot be stopped')
    const db = await postgres.newDatabase()
    const fleet = await startFleet(t, { n: 2, pgUrl: db, redisUrl: redis.url, providers })
    const { sk } = provision(fleet, WALLET)
    for (const r of fleet.replicas) t.equal((await chat(r.url, sk)).status, 200)
    await postgres.stop()
    try {
      for (const r of fleet.replicas) {
        const started = Date.now()
        const res = await chat(r.url, sk)
        t.ok(res.status >= 500 && res.status < 600, `replica ${r.index}: ${res.status} while PostgreSQL is down`)
        t.ok(Date.now() - started < 12_000, 'answered in bounded time')
        t.match(JSON.parse(res.text), { error: { code: String } }, 'an enveloped error')
        const models = await request(`${r.url}/v1/models`)
        t.equal(models.statusCode, 200, 'the catalog answers')
        await models.body.text()
        const ready = await request(`${r.url}/readyz`)
        t.equal(ready.statusCode, 503, '/readyz says 503')
        t.match(await ready.body.text(), /store/, 'with the reason')
      }
      t.ok(fleet.replicas.every((r) => r.child.exitCode === null), 'no replica exited')
    } finally {
      await postgres.start()
    }
    for (const r of fleet.replicas) {
      t.ok(await eventually(async () => (await chat(r.url, sk)).status === 200, 20_000, 200), `replica ${r.index} serves again by itself`)
    }
    const billed = await charges(db)
    const traces = billed.size
    t.ok(traces >= 4, 'charges before and after are all there')
  })

  t.test('PostgreSQL frozen: requests end with an error within ~10 s, never hang', async (t) => {
    if (!postgres.controllable) return t.pass('skipped: an outside PostgreSQL cannot be frozen')
    const db = await postgres.newDatabase()
    const fleet = await startFleet(t, { n: 1, pgUrl: db, redisUrl: redis.url, providers })
    const { sk } = provision(fleet, WALLET)
    const r = fleet.replicas[0]!
    t.equal((await chat(r.url, sk)).status, 200)
    postgres.pause()
    try {
      const started = Date.now()
      const res = await chat(r.url, sk)
      t.ok(res.status >= 500, `an error (${res.status})`)
      t.ok(Date.now() - started < 12_000, `within bounded time (${Date.now() - started} ms)`)
    } finally {
      postgres.resume()
    }
    t.ok(await eventually(async () => (await chat(r.url, sk)).status === 200, 20_000, 200), 'serves again')
  })

  t.test('Redis killed: requests keep being served, revocation stays exact; back: shared again', async (t) => {
    if (!redis.controllable) return t.pass('skipped: an outside Redis cannot be stopped')
    const db = await postgres.newDatabase()
    const fleet = await startFleet(t, { n: 2, pgUrl: db, redisUrl: redis.url, providers })
    const { mk } = provision(fleet, WALLET)
    const created = await sendJson(fleet.replicas[0]!.url, 'POST', '/v1/api-keys', mk, { name: 'r' })
    const key = created.body.key as string
    await redis.kill()
    try {
      for (const r of fleet.replicas) t.equal((await chat(r.url, key)).status, 200, `replica ${r.index} serves without Redis`)
      t.equal((await sendJson(fleet.replicas[1]!.url, 'DELETE', `/v1/api-keys/${created.body.key_id}`, mk)).status, 200)
      const after = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
      t.same(after.map((x) => x.status), [401, 401], 'revoked everywhere at once without Redis')
    } finally {
      await redis.start()
    }
  })
})
