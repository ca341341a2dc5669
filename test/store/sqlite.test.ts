/**
 * The SQLite store: the Store contract on a file and in memory, then what only SQLite has (migrations, WAL,
 * money as TEXT, the append-only journal, noticing another process's writes, the charge path free of
 * change tracking).
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { Database } from '../../src/store/sqlite/driver.js'
import { parseUsd } from '../../src/billing/money.js'
import { SchemaTooNewError as StoreSchemaTooNewError, type StoreChange } from '../../src/store/store.js'
import { CHARGE_SQL, FOLD_EVERY } from '../../src/store/sqlite/ledger.js'
import { migrate, SchemaTooNewError, schemaVersion } from '../../src/store/sqlite/migrate.js'
import { CHANGES_KEPT, MIGRATIONS } from '../../src/store/sqlite/migrations.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { CHANGE_POLL_MS } from '../../src/store/sqlite/changes.js'
import { Credentials } from '../../src/auth/credentials.js'
import { apiKey, charge, storeContract, type Test } from './contract.js'
import { MAX_USAGE_COUNT } from '../../src/billing/usage-bound.js'

const A = '0x' + 'a'.repeat(40)
const T0 = Date.UTC(2025, 0, 15)

/** One database file per test: a second open in the same test is a second connection to it. */
const files = new WeakMap<Test, string>()
function fileOf(t: Test): string {
  let file = files.get(t)
  if (file === undefined) files.set(t, (file = join(t.testdir(), 'svc.db')))
  return file
}

interface Closable {
  close(): unknown
}

/**
 * `svc.db` (under `dirs`) in a fresh test directory, and `closing(x)`, which closes x at the end of the test (the last
 * given first). That teardown is registered before t.testdir(): what it closes is closed before the directory is
 * removed (test/helpers/stack.ts).
 */
function dbIn(t: Test, ...dirs: string[]): { path: string; closing: <C extends Closable>(c: C) => C } {
  const open: Closable[] = []
  t.teardown(async () => {
    for (const c of open.reverse()) await c.close()
  })
  const closing = <C extends Closable>(c: C): C => {
    open.push(c)
    return c
  }
  return { path: join(t.testdir(), ...dirs, 'svc.db'), closing }
}

t.test('contract: SQLite file', async (t) => {
  storeContract(t, (t: Test) => openSqliteStore({ path: fileOf(t), changePollMs: 10 }), { shared: true })
})

t.test('contract: SQLite :memory:', async (t) => {
  storeContract(t, () => openSqliteStore({ path: ':memory:' }))
})

t.test('opening creates the data directory, WAL mode, and applies every migration once', async (t) => {
  const { path, closing } = dbIn(t, 'nested', 'data')
  const store = await openSqliteStore({ path, now: () => T0 })
  await store.close()
  const db = closing(new Database(path))
  t.equal(db.pragma('journal_mode', { simple: true }), 'wal')
  t.equal(schemaVersion(db), MIGRATIONS.at(-1)!.version)
  t.strictSame(
    db.prepare('SELECT version, name, applied_at FROM schema_migrations').all(),
    MIGRATIONS.map((m) => ({ version: m.version, name: m.name, applied_at: T0 })),
  )
  t.strictSame(migrate(db, T0 + 1), [], 'a second run applies nothing')
})

t.test('reopening keeps the data', async (t) => {
  const { path, closing } = dbIn(t)
  const first = await openSqliteStore({ path })
  await first.ledger.addFunds(A, 'deposit', 5n, '', T0)
  await first.close()
  const second = closing(await openSqliteStore({ path }))
  t.equal((await second.ledger.totals(A)).deposited, 5n)
})

t.test('migrations: a newer schema is refused, a failing migration leaves nothing behind', async (t) => {
  const db = new Database(':memory:')
  t.teardown(() => db.close())
  const plan = [
    { version: 1, name: 'one', sql: 'CREATE TABLE one (x INTEGER)' },
    { version: 2, name: 'two', sql: 'CREATE TABLE two (x INTEGER); CREATE TABLE broken (' },
  ]
  t.throws(() => migrate(db, T0, plan))
  t.equal(schemaVersion(db), 1, 'the first migration stayed, the broken one rolled back')
  t.strictSame(db.prepare("SELECT name FROM sqlite_master WHERE name IN ('one', 'two')").all(), [{ name: 'one' }])
  t.strictSame(migrate(db, T0, plan.slice(0, 1)), [])
  t.throws(() => migrate(db, T0, []), SchemaTooNewError, 'a database newer than the code is refused')
  t.equal(SchemaTooNewError, StoreSchemaTooNewError, 'the one error every store gives for it')
})

t.test('money is stored as TEXT integers of atto-USD, never REAL', async (t) => {
  const { path, closing } = dbIn(t)
  const store = await openSqliteStore({ path })
  const amount = parseUsd('12345678.123456789012345678')!
  await store.ledger.addFunds(A, 'deposit', amount, '', T0)
  await store.close()
  const db = closing(new Database(path, { readonly: true }))
  const row = db.prepare('SELECT amount, typeof(amount) AS type FROM journal').get() as { amount: string; type: string }
  t.strictSame(row, { amount: amount.toString(), type: 'text' })
  t.equal((db.prepare('SELECT deposited FROM accounts').get() as { deposited: string }).deposited, '12345678123456789012345678')
})

t.test('roll-up counts saturate at 2^53 - 1, even past a row written at the 64-bit limit behind the store', async (t) => {
  const { path, closing } = dbIn(t)
  const store = closing(await openSqliteStore({ path }))
  await store.ledger.addFunds(A, 'deposit', parseUsd('10')!, '', T0)
  const key = await store.keys.createApiKey(apiKey(A))
  await store.ledger.recordCharge(charge(A, key.id, { at: T0 }))
  t.equal((await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' }))[0]?.promptTokens, 10)
  const db = closing(new Database(path))
  db.pragma('busy_timeout = 5000')
  db.prepare('UPDATE usage_daily SET prompt_tokens = 9223372036854775807, completion_tokens = 9007199254740000').run()
  await store.ledger.recordCharges([charge(A, key.id, { at: T0, promptTokens: MAX_USAGE_COUNT, completionTokens: MAX_USAGE_COUNT })])
  const [row] = await store.ledger.usage(A, { fromDay: '2025-01-15', toDay: '2025-01-15' })
  t.match(row, { requests: 2, promptTokens: Number.MAX_SAFE_INTEGER, completionTokens: Number.MAX_SAFE_INTEGER }, 'capped, not overflowed')
  t.equal((await store.ledger.totals(A)).spent, 2n * charge(A, key.id).cost, 'the money is exact')
})

t.test('the journal is append-only', async (t) => {
  const { path, closing } = dbIn(t)
  const store = await openSqliteStore({ path })
  await store.ledger.addFunds(A, 'deposit', 5n, '', T0)
  await store.close()
  const db = closing(new Database(path))
  t.throws(() => db.prepare("UPDATE journal SET amount = '6'").run(), /append-only/)
  t.throws(() => db.prepare('DELETE FROM journal').run(), /append-only/)
  t.throws(() => db.prepare("INSERT INTO journal (account_id, kind, amount, created_at) VALUES (?, 'deposit', '1.5', 0)").run(A), /CHECK/)
  t.throws(
    () => db.prepare("INSERT INTO journal (account_id, kind, amount, created_at) VALUES (?, 'charge', '1', 0)").run(A),
    /CHECK/,
    'a charge must name its request',
  )
})

t.test('changes are reported for another connection commits, not for our own', async (t) => {
  const { path, closing } = dbIn(t)
  const store = closing(await openSqliteStore({ path, changePollMs: 10 }))
  let calls = 0
  const stop = store.changes.subscribe(() => calls++)
  await store.ledger.addFunds(A, 'deposit', 1n, 'ours', T0)
  await new Promise((r) => setTimeout(r, 60))
  t.equal(calls, 0, 'our own writes are not external')

  const other = await openSqliteStore({ path })
  await other.ledger.addFunds(A, 'deposit', 1n, 'theirs', T0)
  await other.close()
  const deadline = Date.now() + 10_000
  while (calls === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  // Exactly one: the poll that reported their write had read past ours too, whenever it ran.
  t.equal(calls, 1, 'another process wrote')

  // A second listener hears the next write: once it has, the poll has run past it, so the unsubscribed one
  // had its chance to be called, however late the poll ran.
  let heardByWitness = 0
  const stopWitness = store.changes.subscribe(() => heardByWitness++)
  stop()
  const third = await openSqliteStore({ path })
  await third.ledger.addFunds(A, 'deposit', 1n, 'again', T0)
  await third.close()
  const witnessDeadline = Date.now() + 10_000
  while (heardByWitness === 0 && Date.now() < witnessDeadline) await new Promise((r) => setTimeout(r, 10))
  stopWitness()
  t.equal(heardByWitness, 1, 'the write was polled')
  t.equal(calls, 1, 'an unsubscribed listener is not called')
})

t.test('running totals stay exact when two connections to one file take turns writing', async (t) => {
  const { path, closing } = dbIn(t)
  const one = closing(await openSqliteStore({ path }))
  const two = closing(await openSqliteStore({ path }))
  const writes = []
  for (let i = 0; i < 50; i++) writes.push(one.ledger.addFunds(A, 'deposit', 1n, '', T0), two.ledger.addFunds(A, 'deposit', 2n, '', T0))
  await Promise.all(writes)
  t.equal((await one.ledger.totals(A)).deposited, 150n)
  t.equal((await one.ledger.journal(A)).length, 100)
})

t.test('a database of schema 1 is migrated to change tracking with its data, and reports changes from then on', async (t) => {
  const { path, closing } = dbIn(t)
  const old = new Database(path)
  old.pragma('journal_mode = WAL')
  migrate(old, T0, MIGRATIONS.slice(0, 1))
  old.prepare("INSERT INTO accounts (id, deposited, created_at) VALUES (?, '7', ?)").run(A, T0)
  old.close()
  const store = closing(await openSqliteStore({ path, changePollMs: 10 }))
  t.equal((await store.ledger.totals(A)).deposited, 7n)
  const heard: StoreChange[] = []
  store.changes.subscribe((c) => heard.push(c))
  const other = await openSqliteStore({ path })
  await other.ledger.addFunds(A, 'credit', 1n, '', T0)
  await other.close()
  const deadline = Date.now() + 10_000
  while (heard.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  t.strictSame(heard, [{ kind: 'funds', accountId: A }])
})

t.test('a reader further behind than the kept window hears one unknown change; the table stays bounded', async (t) => {
  const { path, closing } = dbIn(t)
  const store = closing(await openSqliteStore({ path, changePollMs: 10 }))
  await store.ledger.addFunds(A, 'deposit', 1n, '', T0)
  const key = await store.keys.createApiKey({
    id: randomUUID(), accountId: A, hash: 'h', preview: 'sk-x', name: 'k', trustMode: null, creditLimit: null,
    resetPeriod: 'never', expiresAt: null, allowedModels: null, allowedProviders: null, createdAt: T0,
  })
  const heard: StoreChange[] = []
  store.changes.subscribe((c) => heard.push(c))
  // Another process renames the key more times than the table keeps, all in one commit: between two polls.
  const other = new Database(path)
  const rename = other.prepare('UPDATE api_keys SET name = ? WHERE id = ?')
  other.transaction(() => {
    for (let i = 0; i <= CHANGES_KEPT; i++) rename.run(`k${i}`, key.id)
  })()
  t.equal((other.prepare('SELECT count(*) AS n FROM store_changes').get() as { n: number }).n, CHANGES_KEPT, 'only the newest rows are kept')
  const deadline = Date.now() + 10_000
  while (heard.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  t.strictSame(heard, [{ kind: 'unknown' }], 'rows were lost: drop everything, once')

  heard.length = 0
  rename.run('again', key.id)
  other.close()
  const again = Date.now() + 10_000
  while (heard.length === 0 && Date.now() < again) await new Promise((r) => setTimeout(r, 10))
  t.strictSame(heard, [{ kind: 'key', accountId: A, keyId: key.id }], 'then back to exact changes')
})

t.test('no trigger runs on the charge path; deposits and key writes do run one', async (t) => {
  const { path, closing } = dbIn(t)
  const store = await openSqliteStore({ path })
  await store.close()
  const db = closing(new Database(path))
  // A statement that fires a trigger calls its program (the Program opcode) in its plan.
  const firesTrigger = (sql: string): boolean => {
    const params = new Array<null>(sql.split('?').length - 1).fill(null)
    return (db.prepare('EXPLAIN ' + sql).all(...params) as { opcode: string }[]).some((op) => op.opcode === 'Program')
  }
  for (const [name, sql] of Object.entries(CHARGE_SQL)) t.notOk(firesTrigger(sql), `charge path: ${name}`)
  t.ok(firesTrigger('UPDATE accounts SET deposited = ?, credited = ? WHERE id = ?'), 'funds')
  t.ok(firesTrigger('UPDATE api_keys SET revoked_at = ? WHERE id = ?'), 'keys')
  t.notOk(firesTrigger('UPDATE mgmt_keys SET last_used_at = ?, last_source_ip = ? WHERE id = ?'), 'the audit write')
})

t.test('a database of schema 2 is migrated to lean charges: every charge, usage row and total kept exactly', async (t) => {
  const { path, closing } = dbIn(t)
  const old = new Database(path)
  old.pragma('journal_mode = WAL')
  migrate(old, T0, MIGRATIONS.slice(0, 2))
  const day = new Date(T0).toISOString().slice(0, 10)
  old.prepare("INSERT INTO accounts (id, deposited, spent, created_at) VALUES (?, '1000', '30', ?)").run(A, T0)
  old.prepare("INSERT INTO journal (account_id, kind, amount, created_at) VALUES (?, 'deposit', '1000', ?)").run(A, T0)
  for (const [req, cost] of [['r1', '10'], ['r2', '20']] as const) {
    old.prepare("INSERT INTO journal (account_id, kind, amount, request_id, key_id, created_at) VALUES (?, 'charge', ?, ?, 'k', ?)").run(A, cost, req, T0)
    old.prepare(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, day, created_at, prompt_tokens,
      completion_tokens, images, audio_ms, cost) VALUES (?, ?, 'k', 'm', 'p', ?, ?, 5, 7, 0, 0, ?)`).run(req, A, day, T0, cost)
  }
  old.prepare(`INSERT INTO usage_daily (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens, images,
    audio_ms, cost) VALUES (?, ?, 'm', 'k', 2, 10, 14, 0, 0, '30')`).run(A, day)
  old.close()

  const store = closing(await openSqliteStore({ path }))
  t.strictSame(await store.ledger.totals(A), { deposited: 1000n, credited: 0n, spent: 30n }, 'totals are not folded twice')
  t.same((await store.ledger.journal(A)).map((e) => [e.kind, e.amount, e.requestId]), [['deposit', 1000n, null], ['charge', 10n, 'r1'], ['charge', 20n, 'r2']])
  const raw = closing(new Database(path, { readonly: true }))
  t.same(raw.prepare("SELECT request_id, model, provider, prompt_tokens, completion_tokens FROM journal WHERE kind = 'charge' ORDER BY seq").all(), [
    { request_id: 'r1', model: 'm', provider: 'p', prompt_tokens: 5, completion_tokens: 7 },
    { request_id: 'r2', model: 'm', provider: 'p', prompt_tokens: 5, completion_tokens: 7 },
  ], 'the usage of each charge moved onto its journal row')
  await t.rejects(store.ledger.recordCharge({ requestId: 'r1', accountId: A, keyId: 'k', model: 'm', provider: 'p', at: T0, promptTokens: 1, completionTokens: 1, images: 0, audioMs: 0, cost: 1n }), { name: 'StoreConflictError' }, 'a request billed before the migration cannot be billed again')
  const [row] = await store.ledger.usage(A, { fromDay: day, toDay: day })
  t.equal(row?.requests, 2)
  t.equal(row?.cost, 30n)
})

t.test('charges a crash left unfolded are in the totals and the roll-up of the next open, exactly once', async (t) => {
  const { path, closing } = dbIn(t)
  const day = new Date(T0).toISOString().slice(0, 10)
  const store = await openSqliteStore({ path })
  await store.ledger.addFunds(A, 'deposit', 10n ** 18n, '', T0)
  const charge = (i: number) => ({ requestId: `req_${i}`, accountId: A, keyId: `k${i % 2}`, model: 'm', provider: 'p', at: T0, promptTokens: 3, completionTokens: 4, images: 0, audioMs: 0, cost: BigInt(i + 1) })
  // More than one fold's worth, in batches; the upkeep thread folds them behind the writes (at least once before
  // the crash); then a few the writer does not fold yet.
  const folding = Math.ceil((FOLD_EVERY + 1) / 100) * 100
  const n = folding + 100
  const batch = (from: number) => store.ledger.recordCharges(Array.from({ length: 100 }, (_, j) => charge(from + j)))
  for (let i = 0; i < folding; i += 100) await batch(i)
  const raw = new Database(path, { readonly: true })
  const watermark = raw.prepare('SELECT folded_seq FROM ledger_fold').pluck()
  while (watermark.get() === 0) await new Promise((resolve) => setTimeout(resolve, 5))
  await batch(folding)
  // A crash: the process dies without closing (and so without the fold that close() does). A second
  // connection reads the file as the next process would see it.
  const folded = watermark.get() as number
  const last = raw.prepare('SELECT max(seq) FROM journal').pluck().get() as number
  raw.close()
  t.ok(folded > 0 && folded < last, `some charges are folded (to ${folded}) and some are not (up to ${last})`)

  const next = closing(await openSqliteStore({ path }))
  const expected = BigInt((n * (n + 1)) / 2)
  t.equal((await next.ledger.totals(A)).spent, expected, 'spent is every charge once')
  const byKey = await next.ledger.spendByKey(A, null)
  t.equal((byKey.get('k0') ?? 0n) + (byKey.get('k1') ?? 0n), expected)
  const rows = await next.ledger.usage(A, { fromDay: day, toDay: day })
  t.equal(rows.reduce((s, r) => s + r.requests, 0), n)
  t.equal(rows.reduce((s, r) => s + r.promptTokens, 0), 3 * n)
  // Folding again (the first process coming back to life, or a second reader) adds nothing.
  t.equal((await store.ledger.totals(A)).spent, expected, 'a second fold by another connection adds nothing')
  await store.close()
  t.equal((await next.ledger.totals(A)).spent, expected)
})

t.test('a fold that fails after a batch committed does not fail the batch; the next read folds it', async (t) => {
  const { path, closing } = dbIn(t)
  const store = closing(await openSqliteStore({ path }))
  await store.ledger.addFunds(A, 'deposit', 10n ** 18n, '', T0)
  // Another process makes the fold fail (here: its watermark table is gone for a moment).
  const other = closing(new Database(path))
  other.exec('ALTER TABLE ledger_fold RENAME TO ledger_fold_away')
  const charges = Array.from({ length: 300 }, (_, i) => ({
    requestId: `req_f${i}`, accountId: A, keyId: 'k', model: 'm', provider: 'p', at: T0, promptTokens: 1, completionTokens: 1, images: 0, audioMs: 0, cost: 2n,
  }))
  const outcomes = await store.ledger.recordCharges(charges)
  t.equal(outcomes.filter((o) => o instanceof Error).length, 0, 'every charge of the batch is reported billed: it was committed')
  other.exec('ALTER TABLE ledger_fold_away RENAME TO ledger_fold')
  t.equal((await store.ledger.totals(A)).spent, 600n, 'the next read folds them, once')
  t.equal((await store.ledger.totals(A)).spent, 600n)
})

t.test('a key written beside the server (the operator CLI) is answered once the server has heard it', async (t) => {
  const { path, closing } = dbIn(t)
  // The server, polling at its default interval, and the CLI's store beside it.
  const server = closing(await openSqliteStore({ path }))
  const heard: StoreChange[] = []
  server.changes.subscribe((change) => heard.push(change))
  const cli = closing(await openSqliteStore({ path, besideServer: true }))
  const credentials = new Credentials(cli, null)
  const { record } = await credentials.issueApiKey(A, { name: 'job' })
  heard.length = 0
  const started = Date.now()
  await credentials.revokeApiKey(A, record.id)
  t.ok(
    heard.some((c) => c.kind === 'key' && c.keyId === record.id),
    `when the revocation is answered (${Date.now() - started} ms), the server has heard it`,
  )
  // The server's own writes wait for nothing: its caches hear them at once.
  const own = new Credentials(server, null)
  const before = Date.now()
  await own.revokeApiKey(A, (await own.issueApiKey(A, { name: 'own' })).record.id)
  t.ok(Date.now() - before < CHANGE_POLL_MS, "the server's own key writes do not wait for a poll")
})
