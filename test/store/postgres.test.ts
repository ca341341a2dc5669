/**
 * The PostgreSQL store: the Store contract on a real PostgreSQL (a second open in one subtest is a second pool
 * on the same database, as another replica), then what only PostgreSQL has: migrations under a lock with N
 * processes opening at once, money past 64 bits as NUMERIC, the change listener losing its connection and
 * catching up, a frozen server answered by errors within the deadline, and recovery after a restart.
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { parseUsd } from '../../src/billing/money.js'
import { SchemaTooNewError, StoreConflictError, StoreUnavailableError, type StoreChange } from '../../src/store/store.js'
import { openPostgresStore, type PostgresStore, type PostgresStoreOptions } from '../../src/store/postgres/postgres-store.js'
import { migrate, schemaVersion } from '../../src/store/postgres/migrate.js'
import { MIGRATIONS } from '../../src/store/postgres/migrations.js'
import { startPostgres } from '../helpers/postgres.js'
import { MAX_USAGE_COUNT } from '../../src/billing/usage-bound.js'
import { eventually } from '../helpers/wait.js'
import { apiKey, charge, storeContract, type Test } from './contract.js'

const A = '0x' + 'a'.repeat(40)
const B = '0x' + 'b'.repeat(40)
const T0 = Date.UTC(2025, 0, 15, 12)
const usd = (text: string): bigint => parseUsd(text)!

const server = await startPostgres(t)

/** One database per subtest: a second open in the same subtest is a second handle on it. */
const databases = new WeakMap<Test, Promise<string>>()
function databaseOf(t: Test): Promise<string> {
  let url = databases.get(t)
  if (url === undefined) databases.set(t, (url = server.newDatabase()))
  return url
}

async function open(t: Test, options: Partial<PostgresStoreOptions> = {}): Promise<PostgresStore> {
  const store = await openPostgresStore({ url: await databaseOf(t), changeHeartbeatMs: 100, ...options })
  t.teardown(() => store.close())
  return store
}

/** A plain client on `url` for what the test checks behind the store's back. */
async function sql(url: string, text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 })
  client.on('error', () => {})
  await client.connect()
  try {
    return await client.query(text, values)
  } finally {
    await client.end().catch(() => {})
  }
}

const notControllable = server.controllable ? false : 'TEST_PG_URL names an outside server: it cannot be frozen or restarted here'

/** Resolves true once `call` succeeds (the server is back and the pool has reconnected). */
const answers = (call: () => Promise<unknown>) =>
  eventually(
    () =>
      call().then(
        () => true,
        () => false,
      ),
    30_000,
    50,
  )

t.test('roll-up counts saturate at 2^53 - 1: a row at the bigint limit aborts no batch, nor other accounts in it', async (t) => {
  const store = await open(t)
  await store.ledger.addFunds(A, 'deposit', usd('10'), '', T0)
  await store.ledger.addFunds(B, 'deposit', usd('10'), '', T0)
  const ka = await store.keys.createApiKey(apiKey(A))
  const kb = await store.keys.createApiKey(apiKey(B))
  await store.ledger.recordCharge(charge(A, ka.id, { at: T0 }))
  await sql(await databaseOf(t), 'UPDATE usage_daily SET prompt_tokens = 9223372036854775807, requests = 9223372036854775807')
  const out = await store.ledger.recordCharges([
    charge(A, ka.id, { at: T0, promptTokens: MAX_USAGE_COUNT, completionTokens: MAX_USAGE_COUNT }),
    charge(B, kb.id, { at: T0 }),
  ])
  t.notOk(out.some((o) => o instanceof Error), 'both charges written')
  const [row] = await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' })
  t.match(row, { requests: Number.MAX_SAFE_INTEGER, promptTokens: Number.MAX_SAFE_INTEGER, completionTokens: 20 + MAX_USAGE_COUNT })
  t.equal((await store.ledger.usage(B, { fromDay: '2025-01-15', toDay: '2025-01-15' }))[0]?.promptTokens, 10)
})

t.test('a frozen server: calls fail with StoreUnavailableError at their deadline, nothing half-written, all works after', { skip: notControllable }, async (t) => {
  const store = await open(t, { queryTimeoutMs: 500, connectTimeoutMs: 500 })
  await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
  const key = await store.keys.createApiKey(apiKey(A))
  const heard: StoreChange[] = []
  t.teardown(store.changes.subscribe((c) => heard.push(c)))
  t.ok(await eventually(() => store.changes.current))

  server.pause()
  t.teardown(() => server.resume())
  const frozen = charge(A, key.id, { cost: 5n })
  await t.rejects(store.ledger.recordCharges([frozen]), StoreUnavailableError, 'a batch of charges')
  await t.rejects(store.accounts.getAccount(A), StoreUnavailableError, 'a read')
  await t.rejects(store.keys.findCredential(key.hash), StoreUnavailableError, 'a credential lookup')
  await t.rejects(store.keys.revokeApiKey(A, key.id, T0), StoreUnavailableError, 'a key write')
  t.ok(await eventually(() => !store.changes.current), 'the change feed is not current while the server does not answer')
  server.resume()

  t.ok(await answers(() => store.accounts.getAccount(A)), 'the same handle answers again')
  // The batch's statements were written before the freeze showed: whether PostgreSQL ran its COMMIT on waking
  // is unknown to the caller. Writing the batch again settles it: billed now, or refused as billed already.
  const [again] = await store.ledger.recordCharges([frozen])
  t.ok(!(again instanceof Error) || again instanceof StoreConflictError, 'the charge written again is billed, or was')
  t.equal((await store.ledger.totals(A)).spent, 5n, 'exactly once')
  t.equal((await store.ledger.journal(A)).filter((e) => e.requestId === frozen.requestId).length, 1)
  t.equal((await store.keys.getApiKey(A, key.id))?.revoked, false, 'the revocation that failed did not happen')
  t.ok(await eventually(() => store.changes.current), 'current again')
  t.ok(heard.some((c) => c.kind === 'unknown'), 'and it reported that it may have missed changes')
})

t.test('a crash and restart of PostgreSQL: what committed is kept, the same handles serve again by themselves', { skip: notControllable }, async (t) => {
  const store = await open(t, { queryTimeoutMs: 1_000, connectTimeoutMs: 1_000 })
  const other = await open(t, { queryTimeoutMs: 1_000, connectTimeoutMs: 1_000 })
  await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
  const key = await store.keys.createApiKey(apiKey(A))
  // The databases made so far are in the WAL (CREATE DATABASE logs whole catalogs): checkpointed first, so the
  // restart replays little more than this test's own commits, the charge among them.
  await sql(await databaseOf(t), 'CHECKPOINT')
  const billed = charge(A, key.id, { cost: 7n })
  await store.ledger.recordCharge(billed)
  const heard: StoreChange[] = []
  t.teardown(store.changes.subscribe((c) => heard.push(c)))
  t.ok(await eventually(() => store.changes.current))

  await server.kill()
  await t.rejects(store.ledger.totals(A), StoreUnavailableError, 'down: a clear error')
  t.ok(await eventually(() => !store.changes.current), 'not current while down')
  await server.start()

  t.ok(await answers(() => store.ledger.totals(A)), 'up again without a new handle')
  t.strictSame(await store.ledger.totals(A), { deposited: usd('1'), credited: 0n, spent: 7n }, 'the committed charge survived the crash')
  await t.rejects(store.ledger.recordCharge(billed), StoreConflictError, 'and is never billed twice')
  t.ok(await eventually(() => store.changes.current), 'the feed is current again')
  t.ok(heard.some((c) => c.kind === 'unknown'), 'after reporting that it may have missed changes')
  heard.length = 0
  await other.keys.revokeApiKey(A, key.id, T0 + 1)
  t.ok(await eventually(() => heard.some((c) => c.kind === 'key')), 'and hears changes one by one again')
})

t.test('migrations: five processes opening an empty database at once all come up on one schema', async (t) => {
  const url = await server.newDatabase()
  const stores = await Promise.all(Array.from({ length: 5 }, () => openPostgresStore({ url })))
  t.teardown(() => Promise.all(stores.map((s) => s.close())))
  const versions = await sql(url, 'SELECT version FROM schema_migrations ORDER BY version')
  t.strictSame(versions.rows.map((r) => r.version), MIGRATIONS.map((m) => m.version), 'each migration applied once')
  await stores[0]!.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
  for (const store of stores) t.equal((await store.ledger.totals(A)).deposited, usd('1'), 'every handle works on it')
})

t.test('migrations: a schema newer than the code is refused, and the database is left as it is', async (t) => {
  const url = await server.newDatabase()
  await (await openPostgresStore({ url })).close()
  await sql(url, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'from the future', 0)")
  await t.rejects(openPostgresStore({ url }), SchemaTooNewError)
  t.equal((await sql(url, 'SELECT count(*)::int AS n FROM schema_migrations')).rows[0].n, MIGRATIONS.length + 1)
})

t.test('migrations: a failing migration leaves nothing of itself behind, and the lock is free after', async (t) => {
  const url = await server.newDatabase()
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end())
  const good = { version: 1, name: 'one', sql: 'CREATE TABLE one (n int)' }
  const bad = { version: 2, name: 'two', sql: 'CREATE TABLE two (n int); SELECT no_such_function()' }
  await t.rejects(migrate(client, T0, [good, bad]), /no_such_function/)
  t.equal(await schemaVersion(client), 1, 'the good one stays applied')
  t.equal((await client.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 'two'")).rows[0].n, 0, 'nothing of the bad one')
  t.strictSame(await migrate(client, T0, [good, { ...bad, sql: 'CREATE TABLE two (n int)' }]), [2], 'fixed, it applies')
})

t.test("migration 12: the account's and the key's settings are refused as their CHECK constraints refused them, by a trigger a charge's counters do not fire", async (t) => {
  const store = await open(t)
  const url = await databaseOf(t)
  await store.ledger.addFunds(A, 'deposit', usd('5'), '', T0)
  const key = await store.keys.createApiKey(apiKey(A))
  // What a batch writes no longer carries these checks: they are triggers that fire on their own columns only.
  const { rows: left } = await sql(url, `SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid::regclass::text IN ('accounts', 'api_keys') ORDER BY conname`)
  t.strictSame(left.map((r: { conname: string }) => r.conname), ['accounts_leased_check', 'accounts_spent_check', 'api_keys_leased_check'], 'only the counters keep constraints')
  const { rows: triggers } = await sql(url, `SELECT tgname, pg_get_triggerdef(oid) AS def FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE '%settings_check' ORDER BY tgname`)
  t.strictSame(triggers.map((r: { tgname: string }) => r.tgname), ['accounts_settings_check', 'api_keys_settings_check'])
  for (const r of triggers as { def: string }[]) t.notMatch(r.def, /\b(spent|leased|period_used|period_start)\b/, 'no counter among the columns that fire it')
  const refused = async (text: string, values: unknown[], constraint: string): Promise<void> => {
    const err = (await sql(url, text, values).then(() => null, (e: unknown) => e)) as { code?: string; constraint?: string; message?: string } | null
    t.equal(err?.code, '23514', `${constraint}: check_violation`)
    t.equal(err?.constraint, constraint, `${constraint}: named`)
    t.match(err?.message, `violates check constraint "${constraint}"`)
  }
  await refused("INSERT INTO accounts (id, created_at) VALUES ('0xABC', 0)", [], 'accounts_id_check')
  await refused('UPDATE accounts SET rate_limit = 0 WHERE id = $1', [A], 'accounts_rate_limit_check')
  await refused('UPDATE accounts SET deposited = deposited - 6 * 10::numeric ^ 18 WHERE id = $1', [A], 'accounts_deposited_check')
  await refused('UPDATE accounts SET credited = -1 WHERE id = $1', [A], 'accounts_credited_check')
  await refused("UPDATE api_keys SET trust_mode = 'any' WHERE id = $1", [key.id], 'api_keys_trust_mode_check')
  await refused('UPDATE api_keys SET credit_limit = -1 WHERE id = $1', [key.id], 'api_keys_credit_limit_check')
  await refused("UPDATE api_keys SET reset_period = 'hourly' WHERE id = $1", [key.id], 'api_keys_reset_period_check')
  await refused("UPDATE api_keys SET allowed_models = '{}' WHERE id = $1", [key.id], 'api_keys_allowed_models_check')
  await refused("UPDATE api_keys SET allowed_providers = '{}' WHERE id = $1", [key.id], 'api_keys_allowed_providers_check')
  // As with a CHECK, a rule that is NULL passes: no limit, no trust mode, no restriction.
  await sql(url, 'UPDATE accounts SET rate_limit = NULL WHERE id = $1', [A])
  await sql(url, 'UPDATE api_keys SET trust_mode = NULL, credit_limit = NULL, allowed_models = NULL, allowed_providers = NULL WHERE id = $1', [key.id])
  const stored = await store.keys.getApiKey(A, key.id)
  t.ok(stored !== null, 'the key is still there')
  t.strictSame([stored?.trustMode, stored?.creditLimit, stored?.allowedModels, stored?.allowedProviders], [null, null, null, null], 'the NULLs were written')
  t.equal((await store.ledger.totals(A)).deposited, usd('5'), 'no refused write changed the account')
})

t.test("a URL's own session options (a schema of its own) are kept, and commits stay synchronous", async (t) => {
  const url = await server.newDatabase()
  await sql(url, 'CREATE SCHEMA svc')
  const withSchema = new URL(url)
  withSchema.searchParams.set('options', '-c search_path=svc -c synchronous_commit=off')
  const store = await openPostgresStore({ url: withSchema.toString() })
  t.teardown(() => store.close())
  await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
  t.equal((await sql(url, 'SELECT count(*)::int AS n FROM svc.accounts')).rows[0].n, 1, 'the tables are in the schema')
  const settings = await store.connection.query<{ s: string; p: string }>("SELECT current_setting('synchronous_commit') AS s, current_setting('search_path') AS p")
  t.strictSame(settings.rows[0], { s: 'on', p: 'svc' }, 'synchronous_commit is on whatever the URL says')
})

t.test('money: NUMERIC columns only, sums past 64 bits exact, never a float column', async (t) => {
  const store = await open(t)
  const url = await databaseOf(t)
  const floats = await sql(url, "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' AND data_type IN ('real', 'double precision')")
  t.strictSame(floats.rows, [], 'no floating-point column')
  const money = await sql(url, "SELECT table_name || '.' || column_name AS c, data_type, numeric_scale FROM information_schema.columns WHERE table_schema = 'public' AND column_name IN ('deposited', 'credited', 'spent', 'amount', 'cost', 'credit_limit') ORDER BY 1")
  for (const row of money.rows) t.same([row.data_type, row.numeric_scale], ['numeric', 0], `${row.c} is an exact integer`)

  // ~1.2e29 atto-USD: far past 2^64 (1.8e19) and past a double's 2^53 exactness.
  const big = usd('123456789012.000000000000000001')
  await store.ledger.addFunds(A, 'deposit', big, '', T0)
  await store.ledger.addFunds(A, 'deposit', big, '', T0)
  const key = await store.keys.createApiKey(apiKey(A, { creditLimit: big * 3n + 7n }))
  const batch = Array.from({ length: 3 }, () => charge(A, key.id, { cost: big / 2n + 1n }))
  for (const outcome of await store.ledger.recordCharges(batch)) t.notOk(outcome instanceof Error)
  t.strictSame(await store.ledger.totals(A), { deposited: big * 2n, credited: 0n, spent: (big / 2n + 1n) * 3n })
  t.equal((await store.keys.getApiKey(A, key.id))?.creditLimit, big * 3n + 7n)
  t.strictSame(await store.ledger.spendByKey(A, null), new Map([[key.id, (big / 2n + 1n) * 3n]]))
  t.equal((await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' }))[0]?.cost, (big / 2n + 1n) * 3n)
})

t.test('the journal is append-only, and a charge writes no change row', async (t) => {
  const store = await open(t)
  const url = await databaseOf(t)
  await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
  const key = await store.keys.createApiKey(apiKey(A))
  const changesBefore = (await sql(url, 'SELECT count(*)::int AS n FROM changes')).rows[0].n
  await store.ledger.recordCharges([charge(A, key.id), charge(A, key.id)])
  t.equal((await sql(url, 'SELECT count(*)::int AS n FROM changes')).rows[0].n, changesBefore, 'charges are not changes')
  await t.rejects(sql(url, 'UPDATE journal SET amount = 0'), /append-only/)
  await t.rejects(sql(url, 'DELETE FROM journal'), /append-only/)
  await t.rejects(sql(url, 'TRUNCATE journal'), /append-only/)
})

t.test('group commit from two replicas at once over the same accounts: no deadlock, no lost update, billed once', async (t) => {
  const one = await open(t)
  const two = await open(t)
  await one.ledger.addFunds(A, 'deposit', usd('100'), '', T0)
  await one.ledger.addFunds(B, 'deposit', usd('100'), '', T0)
  const ka = await one.keys.createApiKey(apiKey(A))
  const kb = await one.keys.createApiKey(apiKey(B))
  // Each batch bills both accounts, in opposite orders on the two replicas; some request ids go to both.
  const shared = Array.from({ length: 20 }, () => 'req_' + randomUUID())
  const batches = (first: string, firstKey: string, second: string, secondKey: string) =>
    Array.from({ length: 20 }, (_, i) => [
      charge(first, firstKey, { cost: 1n }),
      charge(second, secondKey, { cost: 2n }),
      charge(A, ka.id, { requestId: shared[i]!, cost: 4n }),
    ])
  const results = await Promise.all([
    ...batches(A, ka.id, B, kb.id).map((b) => one.ledger.recordCharges(b)),
    ...batches(B, kb.id, A, ka.id).map((b) => two.ledger.recordCharges(b)),
  ])
  const outcomes = results.flat()
  const conflicts = outcomes.filter((o) => o instanceof StoreConflictError).length
  t.equal(outcomes.filter((o) => o instanceof Error && !(o instanceof StoreConflictError)).length, 0, 'no other failure')
  t.equal(conflicts, 20, 'each shared request billed by exactly one replica')
  // A: 20 × 1 + 20 × 2 from the two sides, plus 20 shared × 4; B: 20 × 2 + 20 × 1.
  t.equal((await two.ledger.totals(A)).spent, 20n + 40n + 80n)
  t.equal((await two.ledger.totals(B)).spent, 40n + 20n)
  const usage = await one.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' })
  t.equal(usage[0]?.requests, 60, 'the roll-up counts each billed request once')
  t.equal(usage[0]?.cost, 140n)
})

t.test('jobs: a replica owns the jobs it creates; another takes over only those with no live owner, each once', async (t) => {
  const r1 = await open(t, { replicaId: 'r1' })
  const r2 = await open(t, { replicaId: 'r2' })
  const r3 = await open(t, { replicaId: 'r3' })
  const job = (createdAt: number) => ({
    id: randomUUID(),
    accountId: A,
    keyId: null,
    surface: 'images',
    model: 'img',
    providerAddress: B,
    params: '{}',
    body: null,
    bodyPath: null,
    createdAt,
  })
  const jobs = [job(T0 + 2), job(T0), job(T0 + 1)]
  for (const j of jobs) await r1.jobs.createJob(j)
  t.equal((await r2.jobs.getJob(jobs[0]!.id))?.owner, 'r1')
  t.strictSame(await r2.jobs.claimUnfinished('r2', ['r1', 'r2']), [], 'a live owner keeps its jobs')
  const ended = jobs[2]!
  await r1.jobs.finishJob(ended.id, { status: 'completed', provider: B, result: '{}', trace: null, error: null, resKey: '', at: T0 + 5 })
  const taken = await r2.jobs.claimUnfinished('r2', ['r2'])
  t.strictSame(taken.map((j) => [j.id, j.owner]), [[jobs[1]!.id, 'r2'], [jobs[0]!.id, 'r2']], "r1's unfinished jobs, oldest first")
  t.equal((await r1.jobs.getJob(ended.id))?.owner, 'r1', 'an ended job is never taken')

  // Two replicas claiming at once split the orphans between them: each exactly once.
  const orphans = Array.from({ length: 30 }, (_, i) => job(T0 + 10 + i))
  for (const j of orphans) await r1.jobs.createJob(j)
  const [byTwo, byThree] = await Promise.all([r2.jobs.claimUnfinished('r2', ['r2', 'r3']), r3.jobs.claimUnfinished('r3', ['r2', 'r3'])])
  const ids = [...byTwo!, ...byThree!].map((j) => j.id).sort()
  t.strictSame(ids, orphans.map((j) => j.id).sort(), 'every orphan taken once, by one of them')
})

/** The backend pid of the store's change listener, found by its application name. */
async function listenerPids(url: string): Promise<number[]> {
  const db = new URL(url).pathname.slice(1)
  const { rows } = await sql(url, "SELECT pid FROM pg_stat_activity WHERE application_name = 'svc-router changes' AND datname = $1", [db])
  return rows.map((r) => r.pid as number)
}

t.test('changes: a listener that loses its connection goes not current, reconnects, catches up and reports unknown', async (t) => {
  const store = await open(t)
  const other = await open(t)
  const url = await databaseOf(t)
  const heard: StoreChange[] = []
  t.teardown(store.changes.subscribe((c) => heard.push(c)))
  t.equal(store.changes.current, false, 'not current before it has connected')
  t.ok(await eventually(() => store.changes.current), 'current once connected')
  const key = apiKey(A)
  await other.accounts.ensureAccount(A, T0)
  await other.keys.createApiKey(key)
  t.ok(await eventually(() => heard.some((c) => c.kind === 'key')), 'a change heard while connected')
  t.ok(store.changes.lastSeq >= other.changes.ownSeq && other.changes.ownSeq > 0, 'lastSeq reached the writer\'s ownSeq')
  t.equal(store.changes.ownSeq, 0, 'this handle wrote nothing')

  // Watch `current` on every turn of the loop: the gap between the drop and the reconnect is short.
  let wentStale = false
  const watch = setInterval(() => {
    if (!store.changes.current) wentStale = true
  }, 1)
  t.teardown(() => clearInterval(watch))
  heard.length = 0
  const [pid] = await listenerPids(url)
  t.ok(pid, 'the listener has its own connection')
  await sql(url, 'SELECT pg_terminate_backend($1)', [pid])
  t.ok(await eventually(() => wentStale), 'not current once its connection is gone')
  // Written while (or around when) the listener was away: whatever it caught up on, it reports `unknown`.
  await other.keys.revokeApiKey(A, key.id, T0 + 1)
  t.ok(await eventually(() => heard.some((c) => c.kind === 'unknown')), 'one unknown change once caught up')
  t.ok(await eventually(() => store.changes.current), 'current again')
  t.ok(await eventually(() => store.changes.lastSeq >= other.changes.ownSeq), 'caught up past the revocation')
  t.not((await listenerPids(url))[0], pid, 'on a new connection')
  clearInterval(watch)

  heard.length = 0
  await other.accounts.setAccountRateLimit(A, 9)
  t.ok(await eventually(() => heard.some((c) => c.kind === 'account')), 'changes are reported one by one again')
  t.strictSame(heard, [{ kind: 'account', accountId: A }])
})

t.test('changes: concurrent writers on two handles, every change heard by a third, none skipped', async (t) => {
  const one = await open(t)
  const two = await open(t)
  const reader = await open(t)
  const heard = new Set<string>()
  t.teardown(reader.changes.subscribe((c) => c.kind === 'key' && heard.add(c.keyId)))
  t.ok(await eventually(() => reader.changes.current))
  await one.accounts.ensureAccount(A, T0)
  // Seqs are taken in one order and commits land in another unless the trigger serialises them: a reader that
  // moved its mark past a later seq would then never see an earlier one committed after it.
  const keys = Array.from({ length: 60 }, () => apiKey(A))
  await Promise.all(keys.map((k, i) => (i % 2 === 0 ? one : two).keys.createApiKey(k)))
  t.ok(await eventually(() => heard.size === keys.length), `all ${keys.length} heard (${heard.size})`)
  t.equal(reader.changes.lastSeq, Math.max(one.changes.ownSeq, two.changes.ownSeq), 'its mark is the last seq written')
})

t.test('changes: catchUp() reports what another handle just committed before it resolves, without its notification', async (t) => {
  const store = await open(t, { changeHeartbeatMs: 60_000 })
  const other = await open(t)
  const heard: StoreChange[] = []
  await t.rejects(store.changes.catchUp(), StoreUnavailableError, 'not before the listener is connected')
  t.teardown(store.changes.subscribe((c) => heard.push(c)))
  t.ok(await eventually(() => store.changes.current))
  for (let i = 0; i < 20; i++) {
    const account = '0x' + i.toString(16).padStart(40, '0')
    await other.accounts.ensureAccount(account, T0)
    const seq = await store.changes.catchUp()
    t.ok(seq >= other.changes.ownSeq, 'caught up to the write')
    if (!heard.some((c) => c.kind === 'account' && c.accountId === account)) t.fail(`change ${i} not reported when catchUp resolved`)
  }
})

t.test('changes: a reader further behind than the kept window hears one unknown change; the table stays bounded', async (t) => {
  const store = await open(t)
  const url = await databaseOf(t)
  const heard: StoreChange[] = []
  t.teardown(store.changes.subscribe((c) => heard.push(c)))
  t.ok(await eventually(() => store.changes.current))
  // One transaction of more changes than are kept: the rows before the last CHANGES_KEPT are gone when it commits.
  await sql(url, "INSERT INTO changes (kind, account_id) SELECT 'account', '0x' || lpad(to_hex(n), 40, '0') FROM generate_series(1, 10050) n")
  t.ok(await eventually(() => heard.length > 0))
  t.strictSame(heard, [{ kind: 'unknown' }], 'one unknown, not a partial list')
  t.equal((await sql(url, 'SELECT count(*)::int AS n FROM changes')).rows[0].n, 10_000, 'CHANGES_KEPT rows kept')
})

t.test('ensureAccount from many handles at once: one account, one change, the same record everywhere', async (t) => {
  const stores = [await open(t), await open(t), await open(t)]
  const url = await databaseOf(t)
  const records = await Promise.all(Array.from({ length: 30 }, (_, i) => stores[i % 3]!.accounts.ensureAccount(A, T0 + i)))
  t.equal(new Set(records.map((r) => r.createdAt)).size, 1, 'every caller got the one account')
  t.equal((await sql(url, "SELECT count(*)::int AS n FROM changes WHERE kind = 'account'")).rows[0].n, 1, 'created once')
})

t.test('key updates of different fields from two handles at once both land', async (t) => {
  const one = await open(t)
  const two = await open(t)
  await one.accounts.ensureAccount(A, T0)
  const key = await one.keys.createApiKey(apiKey(A))
  for (let i = 0; i < 10; i++) {
    await Promise.all([
      one.keys.updateApiKey(A, key.id, { name: `name ${i}` }),
      two.keys.updateApiKey(A, key.id, { creditLimit: BigInt(i + 1) }),
    ])
    const now = await one.keys.getApiKey(A, key.id)
    t.strictSame([now?.name, now?.creditLimit], [`name ${i}`, BigInt(i + 1)])
  }
})

t.test('a batch of 2,000 charges is one transaction, billed exactly', async (t) => {
  const store = await open(t)
  await store.ledger.addFunds(A, 'deposit', usd('1000'), '', T0)
  await store.ledger.addFunds(B, 'deposit', usd('1000'), '', T0)
  const ka = await store.keys.createApiKey(apiKey(A))
  const kb = await store.keys.createApiKey(apiKey(B))
  const batch = Array.from({ length: 2000 }, (_, i) => (i % 3 === 0 ? charge(B, kb.id, { cost: 3n, at: T0 + (i % 2) * 86_400_000 }) : charge(A, ka.id, { cost: 2n, model: `m${i % 4}` })))
  const out = await store.ledger.recordCharges(batch)
  t.equal(out.filter((o) => o instanceof Error).length, 0)
  const seqs = out.map((o) => (o as { seq: number }).seq)
  t.ok(seqs.every((s, i) => i === 0 || s > seqs[i - 1]!), 'seqs follow the batch order')
  const nB = batch.filter((c) => c.accountId === B).length
  t.equal((await store.ledger.totals(A)).spent, BigInt(2000 - nB) * 2n)
  t.equal((await store.ledger.totals(B)).spent, BigInt(nB) * 3n)
  const usage = await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-12-31' })
  t.equal(usage.reduce((n, r) => n + r.requests, 0), 2000 - nB)
  t.strictSame(usage.map((r) => r.model), ['m1', 'm2', 'm3', 'm0'].sort())
})

t.test('a batch that waits past the deadline on an account another transaction holds fails whole, writing nothing', async (t) => {
  const store = await open(t, { queryTimeoutMs: 300 })
  const url = await databaseOf(t)
  await store.ledger.addFunds(A, 'deposit', usd('1'), '', T0)
  const key = await store.keys.createApiKey(apiKey(A))
  const holder = new pg.Client({ connectionString: url })
  holder.on('error', () => {})
  await holder.connect()
  t.teardown(() => holder.end().catch(() => {}))
  await holder.query('BEGIN')
  await holder.query('SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE', [A])
  const stuck = charge(A, key.id, { cost: 9n })
  await t.rejects(store.ledger.recordCharges([stuck]), StoreUnavailableError)
  await holder.query('ROLLBACK')
  t.equal((await store.ledger.totals(A)).spent, 0n, 'nothing of it was written')
  t.notOk((await store.ledger.recordCharges([stuck]))[0] instanceof Error, 'and it can be billed once the lock is free')
})

// Last: its thirty-odd databases fill the WAL that a crash-restart above would have to replay.
t.test('contract: PostgreSQL', async (t) => {
  storeContract(t, (t: Test) => open(t), { shared: true })
})
