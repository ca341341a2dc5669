/**
 * Three replicas on one PostgreSQL and one Redis, as real `serve` processes (issue #28 §1–2): they start
 * together on an empty database, the operator CLI works on it, keys created through one work on all, and a
 * revocation or a change answered by one binds the next request on every one.
 */
import t from 'tap'
import { chat, fleetBackends, provision, sendJson, startFleet } from '../helpers/replicas.js'
import { addr } from '../helpers/stack.js'

const WALLET = '0x' + 'f'.repeat(40)
const P = addr('d')

// Real processes, a real database: slower than the default per-file budget on a loaded machine.
t.setTimeout(400_000)

t.test('replicas on one PostgreSQL and Redis', async (t) => {
  const { pg, redis, providers } = await fleetBackends(t, P)

  t.test('three started at once on an empty database all come up; the CLI works on it; keys work everywhere at once', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers, together: true })
    const { mk, sk } = provision(fleet, WALLET)
    for (const r of fleet.replicas) t.equal((await chat(r.url, sk)).status, 200, `replica ${r.index} serves a key the CLI made`)
    // A key created through replica 0 works on 1 and 2 the moment the create has answered.
    const created = await sendJson(fleet.replicas[0]!.url, 'POST', '/v1/api-keys', mk, { name: 'fresh' })
    t.equal(created.status, 201)
    for (const r of fleet.replicas.slice(1)) t.equal((await chat(r.url, created.body.key)).status, 200, `replica ${r.index} knows it`)
    t.match(fleet.cli('api-keys', 'list', WALLET), /fresh/)
  })
  t.test('revocation answered on one replica is in force on every replica for the very next request', async (t) => {
    // The hammer goes on with each revoked key from one address: far past the failed-authentication throttle,
    // which is not what this test is about.
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers, config: { limits: { auth_failures_per_minute: 0 } } })
    const { mk } = provision(fleet, WALLET)
    for (let round = 0; round < 5; round++) {
      const created = await sendJson(fleet.replicas[round % 3]!.url, 'POST', '/v1/api-keys', mk, { name: `k${round}` })
      const key = created.body.key as string
      // Warm every replica's cache with the key.
      for (const r of fleet.replicas) t.equal((await chat(r.url, key)).status, 200)
      // Keep traffic going on the others while the DELETE runs.
      let stop = false
      const hammer = fleet.replicas.map(async (r) => {
        const seen: number[] = []
        while (!stop) seen.push((await chat(r.url, key)).status)
        return seen
      })
      const revoker = fleet.replicas[(round + 1) % 3]!
      const revoked = await sendJson(revoker.url, 'DELETE', `/v1/api-keys/${created.body.key_id}`, mk)
      t.equal(revoked.status, 200, 'revoked')
      // The very next request, on each replica, after the DELETE answered.
      const after = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
      t.same(after.map((a) => a.status), [401, 401, 401], `round ${round}: 401 everywhere at once`)
      stop = true
      const seen = (await Promise.all(hammer)).flat()
      t.ok(seen.every((s) => s === 200 || s === 401), 'only served or refused, never an error')
    }
  })
  t.test('a PATCH binds the next request everywhere: credit limit, allowed models', async (t) => {
    const fleet = await startFleet(t, { n: 3, pgUrl: await pg.newDatabase(), redisUrl: redis.url, providers })
    const { mk } = provision(fleet, WALLET)
    const created = await sendJson(fleet.replicas[0]!.url, 'POST', '/v1/api-keys', mk, { name: 'p' })
    const key = created.body.key as string
    const id = created.body.key_id
    for (const r of fleet.replicas) t.equal((await chat(r.url, key)).status, 200)
    t.equal((await sendJson(fleet.replicas[1]!.url, 'PATCH', `/v1/api-keys/${id}`, mk, { allowed_models: ['other-model'] })).status, 200)
    const denied = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
    t.same(denied.map((d) => d.status), [403, 403, 403], 'model_not_allowed everywhere')
    t.equal((await sendJson(fleet.replicas[2]!.url, 'PATCH', `/v1/api-keys/${id}`, mk, { allowed_models: null, credit_limit: '0.000000000001' })).status, 200)
    const capped = await Promise.all(fleet.replicas.map((r) => chat(r.url, key)))
    t.same(capped.map((d) => d.status), [402, 402, 402], 'credit_limit_exceeded everywhere')
  })

})
