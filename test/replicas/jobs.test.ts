/**
 * Async image jobs across replicas (issue #28 §5), real `serve` processes on one PostgreSQL: a job submitted on
 * one replica is polled on any, runs once and is billed once, stays owner-only; the replica that took it
 * SIGKILLed mid-run, another takes it over once the dead one is removed, and it still runs and bills once.
 */
import t from 'tap'
import pg from 'pg'
import { request } from 'undici'
import { startSimulator } from '../../src/simulator/simulator.js'
import { startPostgres } from '../helpers/postgres.js'
import { startFleet, type Fleet } from '../helpers/replicas.js'
import { addr } from '../helpers/stack.js'

const WALLET = '0x' + 'c'.repeat(40)
const OTHER = '0x' + 'b'.repeat(40)
const P = addr('9')

function keyOf(fleet: Fleet, wallet: string): string {
  fleet.cli('accounts', 'deposit', wallet, '10')
  return /(sk-[A-Za-z0-9_-]{43})/.exec(fleet.cli('api-keys', 'create', wallet, '--name', 'jobs'))![1]!
}

async function call(url: string, key: string, method: 'GET' | 'POST', path: string, body?: object): Promise<{ status: number; json: any }> {
  const res = await request(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.body.text()
  return { status: res.statusCode, json: text === '' ? null : JSON.parse(text) }
}

async function ended(url: () => string, key: string, id: string, ms: number): Promise<any> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    try {
      const res = await call(url(), key, 'GET', `/v1/async/jobs/${id}`)
      if (res.status === 200 && (res.json.status === 'completed' || res.json.status === 'failed')) return res.json
    } catch {
      // the replica polled may be the one just killed: ask again
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`job ${id} did not end in ${ms} ms`)
}

async function chargesOf(url: string, id: string): Promise<number> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query("SELECT count(*)::int AS n FROM journal WHERE kind = 'charge' AND request_id = $1", [id])
    return rows[0].n as number
  } finally {
    await client.end()
  }
}

// Real processes, a real database: slower than the default per-file budget on a loaded machine.
t.setTimeout(400_000)

t.test('async jobs across replicas', async (t) => {
  const postgres = await startPostgres(t)

  t.test('submitted on one, polled on any, billed once, owner-only', async (t) => {
    const sim = await startSimulator({ name: 'jobs', ttftMs: 300 })
    t.teardown(() => sim.close())
    const providers = [{ address: P, url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: 'img', type: 'text-to-image', price: { image: 0.003 } }] }]
    const db = await postgres.newDatabase()
    const fleet = await startFleet(t, { n: 3, pgUrl: db, providers })
    const key = keyOf(fleet, WALLET)
    const other = keyOf(fleet, OTHER)
    const accepted = await call(fleet.replicas[0]!.url, key, 'POST', '/v1/async/images/generations', { model: 'img', prompt: 'a cat', n: 2 })
    t.equal(accepted.status, 202)
    const id = accepted.json.jobId as string
    const early = await call(fleet.replicas[1]!.url, key, 'GET', `/v1/async/jobs/${id}`)
    t.equal(early.status, 200, 'another replica knows the job at once')
    t.equal((await call(fleet.replicas[2]!.url, other, 'GET', `/v1/async/jobs/${id}`)).status, 404, 'another account gets 404')
    const done = await ended(() => fleet.replicas[2]!.url, key, id, 15_000)
    t.equal(done.status, 'completed')
    t.equal(done.data.data.length, 2)
    t.equal(done.x_svc_trace.billing.total_cost, '0.006', 'two images at 0.003')
    t.equal(await chargesOf(db, id), 1, 'billed once')
  })

  t.test('the replica running a job is SIGKILLed: another takes it over, it runs and bills once', async (t) => {
    const sim = await startSimulator({ name: 'slow-jobs', ttftMs: 2_500 })
    t.teardown(() => sim.close())
    const providers = [{ address: P, url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: 'img', type: 'text-to-image', price: { image: 0.003 } }] }]
    const db = await postgres.newDatabase()
    const fleet = await startFleet(t, { n: 2, pgUrl: db, providers })
    const key = keyOf(fleet, WALLET)
    const [victim, survivor] = fleet.replicas as [(typeof fleet.replicas)[0], (typeof fleet.replicas)[0]]
    const accepted = await call(victim!.url, key, 'POST', '/v1/async/images/generations', { model: 'img', prompt: 'a dog' })
    t.equal(accepted.status, 202)
    const id = accepted.json.jobId as string
    await new Promise((r) => setTimeout(r, 300))
    await victim!.kill()
    // dead_after_ms is 3 s in the fleet: removed, then claimed by the survivor's next look (every 2 s).
    const done = await ended(() => survivor!.url, key, id, 30_000)
    t.equal(done.status, 'completed', 'resumed and completed by the survivor')
    t.equal(await chargesOf(db, id), 1, 'billed once')
    const funds = await call(survivor!.url, key, 'GET', `/v1/async/jobs/${id}`)
    t.equal(funds.json.status, 'completed', 'and stays completed')
  })
})
