/**
 * Budget leases and the replica registry on a real PostgreSQL (store/postgres/leases.ts, replicas.ts): grants
 * never oversubscribe an account or a key whatever the interleaving of replicas; a leased charge is paid out of
 * its lease, or out of free room when the lease is gone, or not at all; a silent replica's leases come back;
 * a key write waits for the replicas that trust their cache, and not for one that went silent.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { parseUsd } from '../../src/billing/money.js'
import { LeaseLostError, type Charge, type NewApiKey } from '../../src/store/store.js'
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/postgres-store.js'
import { startPostgres } from '../helpers/postgres.js'
import { eventually } from '../helpers/wait.js'
import { newApiKey } from '../helpers/store-fixtures.js'

const A = '0x' + 'a'.repeat(40)
const usd = (text: string): bigint => parseUsd(text)!
const REPLICA = { heartbeatMs: 100, fenceMs: 600, deadAfterMs: 1_000 }

const server = await startPostgres(t)

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

async function replica(t: Test, url: string, id: string): Promise<PostgresStore> {
  const store = await openPostgresStore({ url, changeHeartbeatMs: 100, replicaId: id, replica: REPLICA })
  t.teardown(() => store.close())
  return store
}

async function sql(url: string, text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await client.query(text, values)
  } finally {
    await client.end()
  }
}

function apiKey(creditLimit: bigint | null, resetPeriod: NewApiKey['resetPeriod'] = 'never'): NewApiKey {
  return newApiKey(A, { name: 'lease', creditLimit, resetPeriod })
}

function charge(keyId: string, cost: bigint, leased = true): Charge {
  return {
    requestId: randomUUID(),
    accountId: A,
    keyId,
    model: 'm',
    provider: 'p',
    at: Date.now(),
    promptTokens: 1,
    completionTokens: 1,
    images: 0,
    audioMs: 0,
    cost,
    leased,
    periodStart: 0,
  }
}

const ask = (keyId: string, min: bigint, want: bigint) => ({ accountId: A, keyId, periodStart: 0, min, want })

t.test('grants from two replicas at once never pass the key\'s limit or the account\'s funds', async (t) => {
  const url = await server.newDatabase()
  const [one, two] = [await replica(t, url, 'r1'), await replica(t, url, 'r2')]
  await one.ledger.addFunds(A, 'deposit', usd('10'), '', Date.now())
  const capped = await one.keys.createApiKey(apiKey(usd('1')))
  const grants = await Promise.all(
    Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? one : two).leases!.acquire(ask(capped.id, usd('0.03'), usd('0.1')))),
  )
  const granted = grants.reduce((sum, g) => sum + g.granted, 0n)
  t.equal(granted, usd('1'), 'exactly the limit, no more')
  t.ok(grants.every((g) => g.granted === 0n || g.granted >= usd('0.03')), 'each grant at least its minimum, or nothing')
  t.equal((await one.ledger.totalsWithLeases(A)).leased, usd('1'), 'the account counts every lease')
  // The account caps too: a key without a limit gets what the funds leave.
  const free = await one.keys.createApiKey(apiKey(null))
  const rest = await two.leases!.acquire(ask(free.id, 1n, usd('100')))
  t.equal(rest.granted, usd('9'))
  t.equal(rest.accountRoom, usd('9'), 'the figures before the grant')
  const none = await one.leases!.acquire(ask(free.id, 1n, 1n))
  t.equal(none.granted, 0n, 'nothing left')
  t.equal(none.accountRoom, 0n)
})

t.test('a leased charge is paid out of its lease; given back, the rest returns to the account', async (t) => {
  const url = await server.newDatabase()
  const one = await replica(t, url, 'r1')
  await one.ledger.addFunds(A, 'deposit', usd('1'), '', Date.now())
  const key = await one.keys.createApiKey(apiKey(usd('0.5')))
  t.equal((await one.leases!.acquire(ask(key.id, usd('0.2'), usd('0.2')))).granted, usd('0.2'))
  const leasedCharge: Charge = { ...charge(key.id, usd('0.05')), neuron: 98765432109876543210n }
  const [outcome] = await one.ledger.recordCharges([leasedCharge])
  t.notOk(outcome instanceof Error)
  t.equal((await one.ledger.journal(A)).find((e) => e.requestId === leasedCharge.requestId)?.neuron, 98765432109876543210n, "a leased charge records the provider's neuron too")
  t.equal((await one.settlement.rows()).find((r) => r.provider === leasedCharge.provider)?.served, 98765432109876543210n, 'and adds it to what the provider was served')
  const totals = await one.ledger.totalsWithLeases(A)
  t.equal(totals.spent, usd('0.05'))
  t.equal(totals.leased, usd('0.15'), 'the charge came out of the lease')
  const row = await sql(url, "SELECT amount, (SELECT period_used FROM api_keys WHERE id = $1) AS used FROM budget_leases WHERE key_id = $1", [key.id])
  t.equal(BigInt(row.rows[0].amount), usd('0.15'))
  t.equal(BigInt(row.rows[0].used), usd('0.05'), 'counted in the key\'s period spend')
  await one.leases!.giveBack(A, key.id, null)
  t.equal((await one.ledger.totalsWithLeases(A)).leased, 0n)
  t.equal((await sql(url, 'SELECT count(*)::int AS n FROM budget_leases')).rows[0].n, 0)
})

t.test('a leased charge without its lease: paid out of free room, or refused alone (LeaseLostError)', async (t) => {
  const url = await server.newDatabase()
  const one = await replica(t, url, 'r1')
  await one.ledger.addFunds(A, 'deposit', usd('1'), '', Date.now())
  const key = await one.keys.createApiKey(apiKey(usd('0.1')))
  // No lease at all: the key's room is 0.1; a batch of three 0.04 charges fits two.
  const batch = [charge(key.id, usd('0.04')), charge(key.id, usd('0.04')), charge(key.id, usd('0.04'))]
  const outcomes = await one.ledger.recordCharges(batch)
  t.same(outcomes.map((o) => (o instanceof LeaseLostError ? 'lost' : o instanceof Error ? 'error' : 'ok')), ['ok', 'ok', 'lost'])
  t.equal((await one.ledger.totals(A)).spent, usd('0.08'), 'the refused one wrote nothing')
  t.equal((await one.ledger.spendByKey(A, null)).get(key.id), usd('0.08'))
})

t.test('a batch pays each key\'s charges out of its lease whole, and what no lease pays from the room its other charges left', async (t) => {
  const url = await server.newDatabase()
  const one = await replica(t, url, 'r1')
  await one.ledger.addFunds(A, 'deposit', usd('1'), '', Date.now())
  const leasedKey = await one.keys.createApiKey(apiKey(null))
  const otherKey = await one.keys.createApiKey(apiKey(null))
  t.equal((await one.leases!.acquire({ accountId: A, keyId: leasedKey.id, periodStart: 0, min: usd('0.6'), want: usd('0.6') })).granted, usd('0.6'))
  // The lease pays 0.2 + 0.2 + 0.2 whole (0.6 of the account's 1). The other key has no lease: its charges
  // take the account's room, which is 0.4 once the lease-paid ones are counted (the first fits, the second
  // would overspend the deposit), whatever the order of the batch.
  const batch = [
    charge(otherKey.id, usd('0.3')),
    charge(leasedKey.id, usd('0.2')),
    charge(leasedKey.id, usd('0.2')),
    charge(otherKey.id, usd('0.2')),
    charge(leasedKey.id, usd('0.2')),
  ]
  const outcomes = await one.ledger.recordCharges(batch)
  t.same(outcomes.map((o) => (o instanceof LeaseLostError ? 'lost' : o instanceof Error ? 'error' : 'ok')), ['ok', 'ok', 'ok', 'lost', 'ok'])
  const totals = await one.ledger.totals(A)
  t.equal(totals.spent, usd('0.9'), 'never more than the deposit')
  const byKey = await one.ledger.spendByKey(A, null)
  t.equal(byKey.get(leasedKey.id), usd('0.6'))
  t.equal(byKey.get(otherKey.id), usd('0.3'))
  const [row] = (await sql(url, 'SELECT leased FROM accounts WHERE id = $1', [A])).rows as { leased: string }[]
  t.equal(row!.leased, '0', 'the lease is spent and gone')
  t.equal((await sql(url, 'SELECT count(*)::int AS n FROM budget_leases')).rows[0].n, 0)
  // A request billed already is skipped by the lease payment as by the append, and counts nowhere.
  t.equal((await one.leases!.acquire({ accountId: A, keyId: leasedKey.id, periodStart: 0, min: usd('0.05'), want: usd('0.05') })).granted, usd('0.05'))
  const again = await one.ledger.recordCharges([batch[1]!, charge(leasedKey.id, usd('0.05'))])
  t.ok(again[0] instanceof Error && !(again[0] instanceof LeaseLostError), 'billed already')
  t.notOk(again[1] instanceof Error)
  t.equal((await one.ledger.totals(A)).spent, usd('0.95'))
})

t.test('leases with room to spare pay their keys\' charges in the append\'s statement; a key whose period moved goes the long way, exact either way', async (t) => {
  const url = await server.newDatabase()
  const one = await replica(t, url, 'r1')
  await one.ledger.addFunds(A, 'deposit', usd('10'), '', Date.now())
  const daily = await one.keys.createApiKey(apiKey(usd('5'), 'daily'))
  const plain = await one.keys.createApiKey(apiKey(null))
  const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate())
  t.equal((await one.leases!.acquire({ accountId: A, keyId: daily.id, periodStart: today, min: usd('1'), want: usd('1') })).granted, usd('1'))
  t.equal((await one.leases!.acquire({ accountId: A, keyId: plain.id, periodStart: 0, min: usd('2'), want: usd('2') })).granted, usd('2'))
  const state = async () => {
    const { rows } = await sql(url, `SELECT (SELECT spent FROM accounts WHERE id = $1) AS spent, (SELECT leased FROM accounts WHERE id = $1) AS leased,
      (SELECT json_object_agg(key_id, amount) FROM budget_leases) AS leases, (SELECT json_object_agg(id, json_build_array(leased, period_used, period_start)) FROM api_keys) AS keys,
      (SELECT sum(requests) FROM usage_daily) AS requests`, [A])
    return rows[0] as { spent: string; leased: string; leases: Record<string, string | number>; keys: Record<string, [string | number, string | number, string | number]>; requests: string }
  }
  // Both keys covered with room to spare, one request twice in the batch's history: every row once, exactly.
  const first = [{ ...charge(daily.id, usd('0.1')), periodStart: today }, charge(plain.id, usd('0.25')), { ...charge(daily.id, usd('0.15')), periodStart: today }]
  const outcomes = await one.ledger.recordCharges(first)
  t.same(outcomes.map((o) => o instanceof Error), [false, false, false])
  let s = await state()
  t.equal(s.spent, String(usd('0.5')))
  t.equal(s.leased, String(usd('3') - usd('0.5')), 'the account\'s leased went down by what was paid, once')
  t.equal(String(s.leases[daily.id]), String(usd('0.75')))
  t.equal(String(s.leases[plain.id]), String(usd('1.75')))
  t.same(s.keys[daily.id]!.slice(0, 2).map(String), [String(usd('0.75')), String(usd('0.25'))], "the key's leased down, its period spend up")
  t.same(s.keys[plain.id]!.slice(0, 2).map(String), [String(usd('1.75')), String(usd('0.25'))])
  t.equal(s.requests, '3')
  const again = await one.ledger.recordCharges([first[1]!, charge(plain.id, usd('0.5'))])
  t.ok(again[0] instanceof Error && !(again[0] instanceof LeaseLostError), 'billed already: skipped, paid by no lease')
  t.notOk(again[1] instanceof Error)
  s = await state()
  t.equal(s.spent, String(usd('1')))
  t.equal(String(s.leases[plain.id]), String(usd('1.25')))
  // The next day for the daily key: its period restarts from the roll-up (svc_key_period) before the payment.
  const tomorrow = today + 86_400_000
  const [late] = await one.ledger.recordCharges([{ ...charge(daily.id, usd('0.2')), periodStart: tomorrow }])
  t.notOk(late instanceof Error)
  s = await state()
  t.equal(s.spent, String(usd('1.2')))
  t.equal(String(s.leases[daily.id]), String(usd('0.55')))
  t.same(s.keys[daily.id]!.map(String), [String(usd('0.55')), String(usd('0.2')), String(tomorrow)], 'a new period counts only its own charge')
  t.equal(s.leased, String(usd('0.55') + usd('1.25')), 'the account\'s leased is the sum of its leases')
  t.equal((await one.ledger.spendByKey(A, null)).get(daily.id), usd('0.45'))
})

t.test('a key\'s period spend starts again with its period, counted from the roll-up', async (t) => {
  const url = await server.newDatabase()
  const one = await replica(t, url, 'r1')
  await one.ledger.addFunds(A, 'deposit', usd('10'), '', Date.now())
  const key = await one.keys.createApiKey(apiKey(usd('1'), 'daily'))
  const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate())
  t.equal((await one.leases!.acquire({ accountId: A, keyId: key.id, periodStart: today, min: usd('0.6'), want: usd('0.6') })).granted, usd('0.6'))
  const [paid] = await one.ledger.recordCharges([{ ...charge(key.id, usd('0.6')), periodStart: today }])
  t.notOk(paid instanceof Error)
  const more = await one.leases!.acquire({ accountId: A, keyId: key.id, periodStart: today, min: usd('0.5'), want: usd('0.5') })
  t.equal(more.granted, 0n, 'today is spent down to 0.4')
  t.equal(more.keyUsed, usd('0.6'))
  // The next day (a later period start): yesterday's spend no longer counts.
  const next = await one.leases!.acquire({ accountId: A, keyId: key.id, periodStart: today + 86_400_000, min: usd('0.5'), want: usd('1') })
  t.equal(next.granted, usd('1'))
  t.equal(next.keyUsed, 0n)
})

/** A replica in a process of its own that takes a lease on `keyId`, says so, and waits to be killed. */
function leasingProcess(url: string, keyId: string, amount: bigint) {
  const store = new URL('../../src/store/postgres/postgres-store.js', import.meta.url).href
  const script = `
    const { openPostgresStore } = await import(${JSON.stringify(store)})
    const s = await openPostgresStore({ url: ${JSON.stringify(url)}, changeHeartbeatMs: 100, replicaId: 'r2', replica: ${JSON.stringify(REPLICA)} })
    const g = await s.leases.acquire({ accountId: ${JSON.stringify(A)}, keyId: ${JSON.stringify(keyId)}, periodStart: 0, min: ${amount}n, want: ${amount}n })
    console.log('granted ' + g.granted)
    setInterval(() => {}, 1000)`
  return spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
}

t.test('a key write waits for a trusting replica; a SIGKILLed one is removed, its leases released, and not waited for', async (t) => {
  const url = await server.newDatabase()
  const one = await replica(t, url, 'r1')
  await one.ledger.addFunds(A, 'deposit', usd('1'), '', Date.now())
  const key = await one.keys.createApiKey(apiKey(null))
  const other = leasingProcess(url, key.id, usd('0.7'))
  t.teardown(() => other.kill('SIGKILL'))
  const said = await new Promise<string>((resolve, reject) => {
    other.stdout!.once('data', (b: Buffer) => resolve(b.toString()))
    other.once('exit', (code) => reject(new Error(`the leasing process exited with ${code}`)))
  })
  t.match(said, /granted 700000000000000000/)
  t.equal((await one.leases!.acquire(ask(key.id, usd('0.5'), usd('0.5')))).granted, 0n, 'held by the other replica')
  await eventually(async () => (await sql(url, "SELECT trusting FROM replicas WHERE id = 'r2'")).rows[0]?.trusting === true, 5_000, 20)
  // r2 trusts its cache: the revocation's writer waits until r2 applied it.
  await one.keys.revokeApiKey(A, key.id, Date.now())
  const seq = one.changes.ownSeq
  await one.changes.settled()
  const acked = (await sql(url, "SELECT applied_seq FROM replicas WHERE id = 'r2'")).rows[0].applied_seq
  t.ok(Number(acked) >= seq, 'settled only once r2 acknowledged the change')
  other.kill('SIGKILL')
  await new Promise((resolve) => other.once('exit', resolve))
  // A write right after the kill waits at most the fence for the silent replica.
  const key2 = await one.keys.createApiKey(apiKey(null))
  await one.keys.revokeApiKey(A, key2.id, Date.now())
  const started = Date.now()
  await one.changes.settled()
  t.ok(Date.now() - started <= REPLICA.fenceMs + 1_000, `not waited for past the fence (${Date.now() - started} ms)`)
  t.ok(await eventually(async () => (await one.ledger.totalsWithLeases(A)).leased === 0n, 5_000, 50), 'its lease released within dead_after_ms')
  t.equal((await sql(url, "SELECT count(*)::int AS n FROM replicas WHERE id = 'r2'")).rows[0].n, 0, 'removed from the registry')
})
