/**
 * The operator CLI (`accounts`, `mgmt-keys`, `api-keys`) as an operator runs it, on a PostgreSQL store: a
 * separate process per command, on the database a router (here: a store handle of this process, subscribed to
 * its changes as a replica is) uses at the same time.
 */
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { parseUsd } from '../../src/billing/money.js'
import { MIGRATIONS } from '../../src/store/postgres/migrations.js'
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js'
import type { StoreChange } from '../../src/store/store.js'
import { startPostgres } from '../helpers/postgres.js'
import { eventually } from '../helpers/wait.js'
import { runCli } from '../helpers/child.js'

const WALLET = '0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed'

const server = await startPostgres(t)

t.test('accounts, api-keys and mgmt-keys on PostgreSQL, heard at once by a running store', async (t) => {
  const url = await server.newDatabase()
  const config = join(t.testdir(), 'cli.yaml')
  writeFileSync(config, stringify({ store: { kind: 'postgres', url }, log: { level: 'error' } }))

  const deposit = await runCli(['accounts', 'deposit', WALLET, '12.000000000000000001', '--memo', 'wire #1'], config)
  t.equal(deposit.status, 0, deposit.stderr)
  t.match(deposit.stderr, `store: ${url}`, 'which store was used, on stderr')
  t.match(deposit.stdout, `deposit of 12.000000000000000001 USD recorded for ${WALLET}`)

  // The router side: a second handle on the same database, listening for what the CLI changes.
  const router = await openPostgresStore({ url, changeHeartbeatMs: 100 })
  t.teardown(() => router.close())
  const heard: StoreChange[] = []
  t.teardown(router.changes.subscribe((c) => heard.push(c)))
  t.ok(await eventually(() => router.changes.current))

  t.equal((await runCli(['accounts', 'credit', WALLET, '0.5'], config)).status, 0)
  const show = await runCli(['accounts', 'show', WALLET], config)
  t.equal(show.status, 0, show.stderr)
  t.match(show.stdout, /deposited\s+12\.000000000000000001 USD/)
  t.match(show.stdout, /available\s+12\.500000000000000001 USD/)
  t.strictSame(await router.ledger.totals(WALLET), { deposited: parseUsd('12.000000000000000001')!, credited: parseUsd('0.5')!, spent: 0n })
  t.ok(await eventually(() => heard.some((c) => c.kind === 'funds')), 'the router heard the credit')
  t.equal((await runCli(['accounts', 'rate-limit', WALLET, '42'], config)).status, 0)
  t.equal((await router.accounts.getAccount(WALLET))?.rateLimit, 42)

  const created = await runCli(['api-keys', 'create', WALLET, '--name', 'batch job', '--credit-limit', '2.5', '--reset-period', 'daily'], config)
  t.equal(created.status, 0, created.stderr)
  const keyId = /API key ([0-9a-f-]{36}) created/.exec(created.stdout)?.[1]
  const secret = /^(sk-[A-Za-z0-9_-]{43})$/m.exec(created.stdout)?.[1]
  t.ok(keyId && secret, 'the key and its secret, printed once')
  t.ok(await eventually(() => heard.some((c) => c.kind === 'key' && c.keyId === keyId)), 'the router heard the new key')
  const listed = await runCli(['api-keys', 'list', WALLET], config)
  t.match(listed.stdout, /batch job\s+active/)
  t.match(listed.stdout, /2\.5\s+daily/)
  heard.length = 0
  t.equal((await runCli(['api-keys', 'revoke', WALLET, keyId!], config)).status, 0)
  t.ok(await eventually(() => heard.some((c) => c.kind === 'key' && c.keyId === keyId)), 'the router heard the revocation')
  t.equal((await router.keys.getApiKey(WALLET, keyId!))?.revoked, true)
  t.equal((await runCli(['api-keys', 'revoke', WALLET, '00000000-0000-4000-8000-000000000000'], config)).status, 1, 'an unknown key')

  const mk = await runCli(['mgmt-keys', 'create', WALLET, '--scopes', 'account:read,keys:read', '--name', 'ops'], config)
  t.equal(mk.status, 0, mk.stderr)
  const mkId = /([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/.exec(mk.stdout)?.[1]
  t.ok(mkId)
  t.equal((await runCli(['mgmt-keys', 'update', mkId!, '--scopes', 'all'], config)).status, 0)
  t.strictSame((await router.keys.getMgmtKey(WALLET, mkId!))?.scopes, ['account:read', 'keys:read', 'keys:create', 'keys:manage'])
  const mks = await runCli(['mgmt-keys', 'list', WALLET], config)
  t.match(mks.stdout, mkId!)
  t.equal((await runCli(['mgmt-keys', 'revoke', mkId!], config)).status, 0)
  t.equal((await router.keys.getMgmtKey(WALLET, mkId!))?.revoked, true)
})

t.test('five CLI processes started at once on an empty database: one migration, every command done', async (t) => {
  const url = await server.newDatabase()
  const config = join(t.testdir(), 'cli.yaml')
  writeFileSync(config, stringify({ store: { kind: 'postgres', url }, log: { level: 'error' } }))
  const runs = await Promise.all(Array.from({ length: 5 }, () => runCli(['accounts', 'deposit', WALLET, '1'], config)))
  for (const run of runs) t.equal(run.status, 0, run.stderr)
  const store = await openPostgresStore({ url })
  t.teardown(() => store.close())
  t.equal((await store.ledger.totals(WALLET)).deposited, parseUsd('5')!, 'five deposits')
  t.equal((await store.ledger.journal(WALLET)).length, 5)
  const applied = await store.connection.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')
  t.strictSame(applied.rows.map((r) => r.version), MIGRATIONS.map((m) => m.version), 'each migration applied once')
})

t.test('a PostgreSQL store that cannot be reached: the CLI says so and exits non-zero, without hanging', async (t) => {
  const config = join(t.testdir(), 'cli.yaml')
  // A port nothing listens on (the test server's, on a database that does not exist, would answer).
  writeFileSync(config, stringify({ store: { kind: 'postgres', url: 'postgres://svc:secret@127.0.0.1:9/svc', connect_timeout_ms: 1000 }, log: { level: 'error' } }))
  const res = await runCli(['accounts', 'show', WALLET], config)
  t.not(res.status, 0)
  t.match(res.stderr, 'store: postgres://svc:***@127.0.0.1:9/svc', 'the password is never printed')
  t.notMatch(res.stderr, 'secret')
  t.match(res.stderr, /unavailable|ECONNREFUSED/)
})
