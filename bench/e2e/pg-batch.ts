/**
 * `node dist/bench/e2e/pg-batch.js [--rounds=3] [--batches=1500] [--sizes=1,16] [--statements]`: what one batch of
 * charges costs PostgreSQL, outside a run (issue 45's replica rows). svc-router's batch (PgLedger.recordCharges,
 * one statement: svc_charge_batch) with one replica's leased charges on one key, as a warm replica sends them,
 * beside the billed floor's batch (floor-journal.ts: one INSERT of as many narrow rows) and the same floor's batch
 * with the roll-ups the spec's reads need (APPEND_WITH_ROLLUPS: the account's and key's spend and the daily usage
 * row, in the same statement), each side on a fresh
 * database of one server started as the tests start it (fsync and synchronous_commit on), batches one after
 * another on one connection, the sides interleaved in rounds. Per batch: the CPU of the server's processes (the
 * postmaster's tree from /proc, each process's increase: the backend, the WAL writer, …; clock ticks, so read
 * the tens of µs) and the wall time to the answer. `--statements` loads pg_stat_statements (track all) and
 * prints, for svc-router's side in the first round, each statement's execution time per batch, the functions'
 * nested statements included.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { parseUsd } from '../../src/billing/money.js'
import type { Charge } from '../../src/store/ledger.js'
import { startPostgres } from '../../test/helpers/postgres.js'
import { newApiKey, registeredReplica } from '../../test/helpers/store-fixtures.js'
import { APPEND, FLOOR_JOURNAL_TABLE } from './floor-journal.js'
import { treeCpuByPid, treeCpuSinceMs } from './processes.js'
import { median } from './criteria.js'

const arg = (name: string, fallback: string): string => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const ROUNDS = Number(arg('rounds', '3'))
const BATCHES = Number(arg('batches', '1500'))
const SIZES = arg('sizes', '1,16').split(',').map(Number)
const STATEMENTS = process.argv.includes('--statements')
/** Batches before each measurement, unmeasured: plans cached, pages read. */
const WARMUP = 300
const ACCOUNT = '0x' + 'a'.repeat(40)
const usd = (text: string): bigint => parseUsd(text)!

interface Side {
  readonly name: string
  batch(size: number): Promise<void>
  query(text: string, values?: unknown[]): Promise<pg.QueryResult>
  close(): Promise<void>
}

/** svc-router's batch: replica r1's store, registered, with a lease on the key that pays every charge. */
async function routerSide(url: string): Promise<Side> {
  const { store, leases } = await registeredReplica(url)
  await store.ledger.addFunds(ACCOUNT, 'deposit', usd('100000'), '', Date.now())
  const key = await store.keys.createApiKey(newApiKey(ACCOUNT, { name: 'pg-batch' }))
  const lease = await leases.acquire({ accountId: ACCOUNT, keyId: key.id, periodStart: 0, min: usd('1000'), want: usd('1000') })
  if (lease.granted !== usd('1000')) throw new Error(`the lease was not granted (${lease.granted})`)
  const charge = (): Charge => ({
    requestId: randomUUID(), accountId: ACCOUNT, keyId: key.id, model: 'm', provider: 'p', at: Date.now(), promptTokens: 16,
    completionTokens: 16, images: 0, audioMs: 0, cost: usd('0.0001'), leased: true, periodStart: 0,
  })
  return {
    name: 'svc-router (svc_charge_batch, leased)',
    async batch(size) {
      const out = await store.ledger.recordCharges(Array.from({ length: size }, charge))
      const failed = out.find((o) => o instanceof Error)
      if (failed !== undefined) throw failed
    },
    query: (text, values) => store.connection.query(text, values),
    close: () => store.close(),
  }
}

/**
 * The billed floor's batch with the roll-ups the spec's reads need done in its transaction, the cheapest way
 * (what issue 45's replica rows would be judged against if the reference did them): one statement appends the
 * charges (a request billed already is skipped) and adds exactly the appended ones into the account's spend,
 * the key's and the daily usage row of (account, day, model, key). Narrow tables without CHECK constraints;
 * no budget leases (one writer needs none). Concurrent writers over shared accounts would also need the rows
 * locked in one order first; one connection here.
 */
const ROLLUP_TABLES = `CREATE TABLE floor_accounts (id TEXT PRIMARY KEY, spent NUMERIC NOT NULL DEFAULT 0);
  CREATE TABLE floor_keys (id TEXT PRIMARY KEY, spent NUMERIC NOT NULL DEFAULT 0);
  CREATE TABLE floor_usage_daily (account_id TEXT NOT NULL, day TEXT NOT NULL, model TEXT NOT NULL, key_id TEXT NOT NULL,
    requests BIGINT NOT NULL, prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL, cost NUMERIC NOT NULL,
    PRIMARY KEY (account_id, day, model, key_id))`
const APPEND_WITH_ROLLUPS = `WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::numeric[], $4::int[], $5::int[], $6::text[], $7::text[])
      AS u(request_id, model, amount, prompt_tokens, completion_tokens, account_id, key_id)
  ), appended AS (
    INSERT INTO floor_journal (request_id, model, amount, prompt_tokens, completion_tokens, created_at)
    SELECT request_id, model, amount, prompt_tokens, completion_tokens, $8 FROM input
    ON CONFLICT (request_id) DO NOTHING RETURNING request_id
  ), charged AS (
    SELECT i.* FROM input i JOIN appended a ON a.request_id = i.request_id
  ), accounts AS (
    UPDATE floor_accounts f SET spent = f.spent + s.amount
    FROM (SELECT account_id, sum(amount) AS amount FROM charged GROUP BY account_id) s WHERE f.id = s.account_id
  ), keys AS (
    UPDATE floor_keys f SET spent = f.spent + s.amount
    FROM (SELECT key_id, sum(amount) AS amount FROM charged GROUP BY key_id) s WHERE f.id = s.key_id
  ), daily AS (
    INSERT INTO floor_usage_daily AS u (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens, cost)
    SELECT account_id, $9, model, key_id, count(*), sum(prompt_tokens), sum(completion_tokens), sum(amount)
    FROM charged GROUP BY account_id, model, key_id
    ON CONFLICT (account_id, day, model, key_id) DO UPDATE SET requests = u.requests + EXCLUDED.requests,
      prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens, completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens,
      cost = u.cost + EXCLUDED.cost
  )
  SELECT count(*) FROM appended`

/**
 * The billed floor's batch on a connection of its own: its table and its INSERT, prepared; with `rollups`, the
 * roll-ups' tables too and APPEND_WITH_ROLLUPS instead, checked at close against its journal.
 */
async function floorSide(url: string, rollups = false): Promise<Side> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  await client.query(FLOOR_JOURNAL_TABLE)
  if (rollups) {
    await client.query(ROLLUP_TABLES)
    await client.query('INSERT INTO floor_accounts (id) VALUES ($1)', [ACCOUNT])
    await client.query("INSERT INTO floor_keys (id) VALUES ('k')")
  }
  return {
    name: rollups ? 'billed floor with roll-ups (one statement)' : 'billed floor (one INSERT)',
    async batch(size) {
      const ids = Array.from({ length: size }, () => randomUUID())
      const at = Date.now()
      const charges = [ids, ids.map(() => 'm'), ids.map(() => '100000000000000'), ids.map(() => 16), ids.map(() => 16)]
      if (!rollups) {
        await client.query({ name: 'floor-append', text: APPEND, values: [...charges, at] })
        return
      }
      const values = [...charges, ids.map(() => ACCOUNT), ids.map(() => 'k'), at, new Date(at).toISOString().slice(0, 10)]
      const { rows } = await client.query({ name: 'floor-append-rollups', text: APPEND_WITH_ROLLUPS, values })
      if (Number(rows[0].count) !== size) throw new Error(`the roll-up floor appended ${rows[0].count} of ${size}`)
    },
    query: (text, values) => client.query(text, values),
    async close() {
      if (!rollups) return client.end()
      // A reference that does not add up measures nothing: every total is the journal's.
      const { rows } = await client.query(`SELECT (SELECT sum(amount) FROM floor_journal) AS journal, (SELECT spent FROM floor_accounts) AS account,
        (SELECT spent FROM floor_keys) AS key, (SELECT sum(cost) FROM floor_usage_daily) AS daily,
        (SELECT count(*) FROM floor_journal) AS charges, (SELECT sum(requests) FROM floor_usage_daily) AS requests`)
      await client.end()
      const r = rows[0] as Record<string, string>
      if (r.account !== r.journal || r.key !== r.journal || r.daily !== r.journal || r.requests !== r.charges) {
        throw new Error(`the roll-up floor's totals differ from its journal: ${JSON.stringify(r)}`)
      }
    },
  }
}

/** Each statement's execution time per batch since the last reset, in this database, the largest first. */
async function statementTable(side: Side, batches: number): Promise<string[]> {
  const { rows } = await side.query(
    `SELECT calls, total_exec_time, regexp_replace(query, '\\s+', ' ', 'g') AS text FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT 16`,
  )
  return rows.map((r: { calls: string; total_exec_time: number; text: string }) => {
    const us = (r.total_exec_time * 1000) / batches
    return `    ${us.toFixed(1).padStart(7)} µs  ${String(r.calls).padStart(6)} calls  ${r.text.slice(0, 120)}`
  })
}

async function main(): Promise<void> {
  const teardowns: (() => unknown)[] = []
  const settings: Record<string, string> = STATEMENTS ? { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' } : {}
  const server = await startPostgres({ teardown: (fn) => teardowns.push(fn) }, { settings })
  const pid = server.pid
  if (pid === null) throw new Error('pg-batch needs a server of its own (not TEST_PG_URL): it reads its processes\' CPU')
  const results = new Map<string, { cpu: number[]; wall: number[] }>()
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const make of [routerSide, floorSide, (url: string) => floorSide(url, true)]) {
        const side = await make(await server.newDatabase())
        try {
          const explain = STATEMENTS && round === 0 && make === routerSide
          if (explain) await side.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements')
          for (const size of SIZES) {
            for (let i = 0; i < WARMUP; i++) await side.batch(size)
            if (explain) await side.query('SELECT pg_stat_statements_reset()')
            const cpuBefore = treeCpuByPid(pid)
            const started = performance.now()
            for (let i = 0; i < BATCHES; i++) await side.batch(size)
            const wall = ((performance.now() - started) * 1000) / BATCHES
            const cpu = (treeCpuSinceMs(pid, cpuBefore) * 1000) / BATCHES
            const label = `${side.name}, batches of ${size}`
            const r = results.get(label) ?? { cpu: [], wall: [] }
            r.cpu.push(cpu)
            r.wall.push(wall)
            results.set(label, r)
            process.stdout.write(`round ${round + 1}: ${label}: server CPU ${cpu.toFixed(0)} µs a batch, wall ${wall.toFixed(0)} µs\n`)
            if (explain) process.stdout.write((await statementTable(side, BATCHES)).join('\n') + '\n')
          }
        } finally {
          await side.close()
        }
      }
    }
    process.stdout.write(`\nmedians of ${ROUNDS} rounds, ${BATCHES} batches each:\n`)
    for (const [label, r] of results) {
      process.stdout.write(`  ${label}: server CPU ${median(r.cpu).toFixed(0)} µs a batch (${r.cpu.map((x) => x.toFixed(0)).join(', ')}), wall ${median(r.wall).toFixed(0)} µs\n`)
    }
  } finally {
    for (const fn of teardowns.reverse()) await fn()
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`pg-batch: ${String((err as Error)?.stack ?? err)}\n`)
    process.exit(1)
  },
)
