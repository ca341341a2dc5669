/**
 * A batch of charges on PostgreSQL is one statement (store/postgres/charge-batch.ts): counted on the wire, as
 * the statements the store sends and the ReadyForQuery answers it reads per batch; and what a chain provider
 * was served is kept per replica, so two replicas' batches for one busy provider do not queue on one row, and
 * stays exact when a replica leaves (its rows folded into the provider's books).
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { ChargeWriter } from '../../src/billing/charge-writer.js'
import { parseUsd } from '../../src/billing/money.js'
import type { Charge } from '../../src/store/store.js'
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/postgres-store.js'
import { PgLeaseStore } from '../../src/store/postgres/leases.js'
import { startPostgres } from '../helpers/postgres.js'
import { eventually } from '../helpers/wait.js'
import { newApiKey, registeredReplica } from '../helpers/store-fixtures.js'

const A = '0x' + 'a'.repeat(40)
const B = '0x' + 'b'.repeat(40)
const usd = (text: string): bigint => parseUsd(text)!
const REPLICA = { heartbeatMs: 100, fenceMs: 600, deadAfterMs: 1_000 }

const server = await startPostgres(t)

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

async function replica(t: Test, url: string, id: string, queryTimeoutMs = 5_000): Promise<PostgresStore> {
  const store = await openPostgresStore({ url, changeHeartbeatMs: 100, replicaId: id, replica: REPLICA, queryTimeoutMs })
  t.teardown(() => store.close())
  return store
}

function charge(accountId: string, keyId: string, extra: Partial<Charge> = {}): Charge {
  return {
    requestId: randomUUID(), accountId, keyId, model: 'm', provider: 'p', at: Date.now(), promptTokens: 1, completionTokens: 1,
    images: 0, audioMs: 0, cost: usd('0.01'), ...extra,
  }
}

/** Replica r1's store (test/helpers/store-fixtures.ts), closed with the test, and its lease store. */
async function leasingReplica(t: Test, url: string): Promise<{ one: PostgresStore; leases: PgLeaseStore }> {
  const { store, leases } = await registeredReplica(url)
  t.teardown(() => store.close())
  return { one: store, leases }
}

/** Counts, on every pooled connection of `store`, the statements sent and the ReadyForQuery answers read. */
function wireCounter(store: PostgresStore): { statements: number; answers: number } {
  const counts = { statements: 0, answers: 0 }
  const seen = new WeakSet<object>()
  store.connection.pool.on('acquire', (client: pg.PoolClient) => {
    if (seen.has(client)) return
    seen.add(client)
    const query = client.query.bind(client) as (...args: unknown[]) => unknown
    ;(client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      counts.statements++
      return query(...args)
    }
    ;(client as unknown as { connection: { on(e: string, f: () => void): void } }).connection.on('readyForQuery', () => counts.answers++)
  })
  return counts
}

t.test('a batch of charges, leased ones among them, is one statement and one answer from PostgreSQL', async (t) => {
  const { one, leases } = await leasingReplica(t, await server.newDatabase())
  await one.ledger.addFunds(A, 'deposit', usd('10'), '', Date.now())
  await one.ledger.addFunds(B, 'deposit', usd('10'), '', Date.now())
  const [ka, kb] = [await one.keys.createApiKey(newApiKey(A)), await one.keys.createApiKey(newApiKey(B))]
  t.equal((await leases.acquire({ accountId: A, keyId: ka.id, periodStart: 0, min: usd('1'), want: usd('1') })).granted, usd('1'))
  const counts = wireCounter(one)
  const batch = [
    charge(A, ka.id, { leased: true, periodStart: 0, provider: 'chain', neuron: 7n }),
    charge(A, ka.id, { leased: true, periodStart: 0 }),
    charge(B, kb.id, { provider: 'chain', neuron: 5n }),
    charge(B, kb.id),
  ]
  const out = await one.ledger.recordCharges(batch)
  t.ok(out.every((o) => !(o instanceof Error)), 'every charge billed')
  t.strictSame(counts, { statements: 1, answers: 1 }, 'one statement, one round trip: no BEGIN, no COMMIT, no lock statement of its own')
  const plain = await one.ledger.recordCharges([charge(A, ka.id), charge(B, kb.id)])
  t.ok(plain.every((o) => !(o instanceof Error)))
  t.strictSame(counts, { statements: 2, answers: 2 }, 'a batch without leases too')
  t.equal((await one.ledger.totals(A)).spent, usd('0.03'))
  t.equal((await one.ledger.totalsWithLeases(A)).leased, usd('0.98'), 'the leased charges came out of the lease in the same statement')
  t.equal((await one.settlement.rows()).find((r) => r.provider === 'chain')?.served, 12n)
})

t.test("a replica's charge writer keeps two batches at the server: the second waits there on the first's account, both pay their lease once", async (t) => {
  const url = await server.newDatabase()
  const { one, leases } = await leasingReplica(t, url)
  await one.ledger.addFunds(A, 'deposit', usd('10'), '', Date.now())
  const key = await one.keys.createApiKey(newApiKey(A))
  t.equal((await leases.acquire({ accountId: A, keyId: key.id, periodStart: 0, min: usd('1'), want: usd('1') })).granted, usd('1'))
  const writer = new ChargeWriter(one.ledger, { concurrency: 2 })
  t.teardown(() => writer.close())
  // Another session holds the account's row: whatever the writer sends waits at the server for it.
  const blocker = new pg.Client({ connectionString: url })
  await blocker.connect()
  t.teardown(() => blocker.end())
  await blocker.query('BEGIN')
  await blocker.query('SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE', [A])
  const settle = (c: Charge): Promise<unknown> => new Promise((resolve) => writer.enqueue(c, resolve))
  const leased = (): Charge => charge(A, key.id, { leased: true, periodStart: 0 })
  const first = [settle(leased()), settle(leased())]
  await new Promise((r) => setImmediate(r))
  const second = [settle(leased()), settle(leased()), settle(leased())]
  await new Promise((r) => setImmediate(r))
  // Read outside the blocker's transaction: pg_stat_activity is a snapshot for the whole of a transaction.
  const watch = new pg.Client({ connectionString: url })
  await watch.connect()
  t.teardown(() => watch.end())
  const waiting = async (): Promise<number> =>
    (await watch.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0]!.n
  t.ok(await eventually(async () => (await waiting()) === 2), 'both batches wait on the account at the server')
  t.equal(writer.queued, 5, 'five charges in two batches, none committed')
  await blocker.query('COMMIT')
  const outcomes = await Promise.all([...first, ...second])
  t.ok(outcomes.every((o) => !(o instanceof Error)), 'every charge billed')
  t.equal(writer.batches, 2)
  t.equal((await one.ledger.totals(A)).spent, usd('0.05'))
  t.equal((await one.ledger.totalsWithLeases(A)).leased, usd('0.95'), 'each charge paid out of the lease once')
  const [row] = (await one.connection.query<{ amount: string; used: string }>('SELECT amount, (SELECT period_used FROM api_keys WHERE id = $1) AS used FROM budget_leases WHERE key_id = $1', [key.id])).rows
  t.equal(BigInt(row!.amount), usd('0.95'))
  t.equal(BigInt(row!.used), usd('0.05'), "the key's period spend counts each once")
})

t.test("two replicas' batches for one chain provider do not wait on each other; served stays exact when one leaves", async (t) => {
  const url = await server.newDatabase()
  // A short deadline: a batch that queued behind the other replica's would fail rather than wait it out.
  const [one, two] = [await replica(t, url, 'r1', 1_500), await replica(t, url, 'r2', 1_500)]
  await one.ledger.addFunds(A, 'deposit', usd('10'), '', Date.now())
  await one.ledger.addFunds(B, 'deposit', usd('10'), '', Date.now())
  const [ka, kb] = [await one.keys.createApiKey(newApiKey(A)), await one.keys.createApiKey(newApiKey(B))]
  // Replica one's batch is held open after its append, holding every row lock it took, until the test lets go.
  const gate = 4545
  const held = charge(A, ka.id, { provider: 'chain', neuron: 100n })
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  t.teardown(() => admin.end())
  await admin.query(`CREATE FUNCTION hold_batch() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF NEW.request_id = '${held.requestId}' THEN PERFORM pg_advisory_xact_lock(${gate}); END IF; RETURN NULL; END $$`)
  await admin.query('CREATE TRIGGER hold_batch AFTER INSERT ON journal FOR EACH ROW EXECUTE FUNCTION hold_batch()')
  await admin.query('SELECT pg_advisory_lock($1)', [gate])
  const first = one.ledger.recordCharges([held])
  await eventually(async () => (await admin.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows[0].n === 1)
  const second = await two.ledger.recordCharges([charge(B, kb.id, { provider: 'chain', neuron: 1n })])
  t.notOk(second[0] instanceof Error, "the other replica's batch for the same provider commits while the first is still open")
  await admin.query('SELECT pg_advisory_unlock($1)', [gate])
  t.notOk((await first)[0] instanceof Error, 'and the first commits after')
  t.equal((await one.settlement.rows()).find((r) => r.provider === 'chain')?.served, 101n, 'served: both, exactly')
  await admin.query('DROP TRIGGER hold_batch ON journal')
  await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? one : two).ledger.recordCharges([charge(i % 2 === 0 ? A : B, i % 2 === 0 ? ka.id : kb.id, { provider: 'chain', neuron: 2n })])))
  t.equal((await two.settlement.rows()).find((r) => r.provider === 'chain')?.served, 141n, 'concurrent batches of both replicas: every one counted once')
  // Replica two leaves: what it was served moves into the provider's books, counted once.
  await two.close()
  const rows = await admin.query("SELECT replica, served::text FROM provider_served WHERE provider = 'chain' ORDER BY replica")
  t.strictSame(rows.rows, [{ replica: 'r1', served: '120' }], "the departed replica's served row is folded")
  t.equal((await one.settlement.rows()).find((r) => r.provider === 'chain')?.served, 141n, 'and served is unchanged')
  // Flagged for settling more than it was served (200 > 141): clearing takes every replica's served as settled.
  await one.settlement.record('chain', { settled: 200n, lastBalance: null, lastBlock: null, lastPendingRefund: null, flagged: true })
  t.equal(await one.settlement.clearFlag('chain'), true)
  t.equal((await one.settlement.rows()).find((r) => r.provider === 'chain')?.settled, 141n, 'a cleared flag takes every replica\'s served as settled')
})

t.test('PostgreSQL killed under two replicas\' batches: every acknowledged charge is in the journal once, and served equals its neuron', { skip: server.controllable ? false : 'an outside server cannot be killed' }, async (t) => {
  const url = await server.newDatabase()
  const [one, two] = [await replica(t, url, 'r1', 2_000), await replica(t, url, 'r2', 2_000)]
  await one.ledger.addFunds(A, 'deposit', usd('100'), '', Date.now())
  await one.ledger.addFunds(B, 'deposit', usd('100'), '', Date.now())
  const [ka, kb] = [await one.keys.createApiKey(newApiKey(A)), await one.keys.createApiKey(newApiKey(B))]
  const acknowledged: Charge[] = []
  const batches = Array.from({ length: 60 }, (_, i) => {
    const store = i % 2 === 0 ? one : two
    const batch = Array.from({ length: 5 }, (_, j) => charge(j % 2 === 0 ? A : B, j % 2 === 0 ? ka.id : kb.id, { provider: 'chain', neuron: BigInt(1 + j) }))
    return new Promise((resolve) => setTimeout(resolve, i)).then(() => store.ledger.recordCharges(batch)).then(
      (out) => out.forEach((o, j) => { if (!(o instanceof Error)) acknowledged.push(batch[j]!) }),
      () => {},
    )
  })
  await new Promise((resolve) => setTimeout(resolve, 25))
  await server.kill()
  await Promise.all(batches)
  // A backend killed mid-statement can hold the shared memory a moment after the postmaster is gone.
  for (let tries = 1; ; tries++) {
    try {
      await server.start()
      break
    } catch (err) {
      if (tries === 20) throw err
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
  }
  const check = new pg.Client({ connectionString: url })
  await check.connect()
  t.teardown(() => check.end())
  const journal = await check.query("SELECT request_id FROM journal WHERE kind = 'charge'")
  const written = new Set(journal.rows.map((r: { request_id: string }) => r.request_id))
  t.equal(written.size, journal.rows.length, 'no request twice')
  t.ok(acknowledged.every((c) => written.has(c.requestId)), `every acknowledged charge survived the crash (${acknowledged.length} of 300)`)
  const sums = await check.query(`SELECT
      (SELECT coalesce(sum(neuron), 0) FROM journal WHERE provider = 'chain')::text AS journal,
      ((SELECT coalesce(sum(served), 0) FROM provider_served WHERE provider = 'chain') +
       (SELECT coalesce(sum(served), 0) FROM provider_settlement WHERE provider = 'chain'))::text AS served,
      (SELECT coalesce(sum(amount), 0) FROM journal WHERE kind = 'charge')::text AS charged,
      (SELECT sum(spent) FROM accounts)::text AS spent`)
  t.equal(sums.rows[0].served, sums.rows[0].journal, "served is exactly the journal's neuron: nothing lost or counted twice")
  t.equal(sums.rows[0].spent, sums.rows[0].charged, 'and spent is exactly its charges')
})
