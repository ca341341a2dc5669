/**
 * The test servers themselves (test/helpers/postgres.ts, redis.ts): the failure tests of the PostgreSQL store
 * and of the replicas lean on them, so what they promise is checked here: fresh databases, a commit that
 * survives SIGKILL of every server process (real fsync), a frozen server that answers again once resumed, the
 * same port after a restart, and nothing left running.
 */
import t from 'tap'
import pg from 'pg'
import { Redis } from 'ioredis'
import { startPostgres } from './postgres.js'
import { startRedis } from './redis.js'

async function query(url: string, sql: string, params: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 })
  client.on('error', () => {})
  await client.connect()
  try {
    return await client.query(sql, params)
  } finally {
    await client.end().catch(() => {})
  }
}

t.test('postgres: fresh databases, a commit survives SIGKILL, a frozen server answers again', async (t) => {
  const server = await startPostgres(t)
  const other = await server.newDatabase()
  t.not(other, server.url, 'newDatabase gives another database')
  await query(server.url, 'CREATE TABLE kept (n int)')
  const tables = await query(other, "SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 'kept'")
  t.equal(tables.rows[0].n, 0, 'the new database is empty')
  const settings = await query(server.url, "SELECT current_setting('fsync') AS f, current_setting('synchronous_commit') AS s")
  t.same(settings.rows[0], { f: 'on', s: 'on' }, 'durable by default')

  if (!server.controllable) return t.end()
  await query(server.url, 'INSERT INTO kept VALUES (42)')
  await server.kill()
  await t.rejects(query(server.url, 'SELECT 1'), 'a killed server refuses connections')
  await server.start()
  const kept = await query(server.url, 'SELECT n FROM kept')
  t.same(kept.rows, [{ n: 42 }], 'the committed row survived the crash, on the same port')

  const client = new pg.Client({ connectionString: server.url, query_timeout: 300 })
  client.on('error', () => {})
  await client.connect()
  server.pause()
  await t.rejects(client.query('SELECT 1'), /timeout/i, 'a frozen server does not answer')
  server.resume()
  await client.end().catch(() => {})
  t.same((await query(server.url, 'SELECT 1 AS one')).rows, [{ one: 1 }], 'it answers again once resumed')

  await server.stop()
  await server.start()
  t.same((await query(server.url, 'SELECT n FROM kept')).rows, [{ n: 42 }], 'a clean stop and start keeps data')
})

t.test('redis: answers, restarts empty on the same port, a frozen server does not answer', async (t) => {
  const server = await startRedis(t)
  const redis = new Redis(server.url, { maxRetriesPerRequest: 1, lazyConnect: true })
  t.teardown(() => redis.disconnect())
  await redis.connect()
  await redis.set('svc:test', '1')
  t.equal(await redis.get('svc:test'), '1')
  if (!server.controllable) return t.end()
  await server.kill()
  await server.start()
  const fresh = new Redis(server.url, { maxRetriesPerRequest: 1 })
  t.teardown(() => fresh.disconnect())
  t.equal(await fresh.get('svc:test'), null, 'nothing persisted across a restart')
  const timed = new Redis(server.url, { maxRetriesPerRequest: 0, commandTimeout: 300 })
  timed.on('error', () => {})
  t.teardown(() => timed.disconnect())
  t.equal(await timed.ping(), 'PONG')
  server.pause()
  await t.rejects(timed.ping(), /timed out/i, 'a frozen redis does not answer')
  server.resume()
  t.equal(await fresh.ping(), 'PONG')
})
