/**
 * Issue #28's part of the e2e run: svc-router as replicas on one PostgreSQL and one Redis (README "Several
 * replicas"), each figure beside the SQLite router's.
 *
 * - Target `router-pg` (targets.ts): `svc-router serve` with `store.kind: postgres` and Redis, in the latency
 *   workload beside `router` (same rounds, interleaved): its added p50 and p99 at one connection.
 * - Workload `replicas`: throughput at 64 connections of 2 replicas behind one port (`serve --workers 2`) and
 *   of 1 replica (`serve`), each on a fresh database of the same server, interleaved in rounds.
 * - Workload `charges`: charges per second the group commit sustains, the ChargeWriter straight on PgLedger and
 *   on the SQLite store's ledger (synchronous FULL), with 1, 64 and 256 charges in flight; batch sizes and commit
 *   times from the writer's commit channel.
 *
 * PostgreSQL and Redis are started as the tests start them (test/helpers/postgres.ts and redis.ts, imported
 * from the build: one code path for both): PostgreSQL 15 in a fresh cluster as `nobody`, fsync and
 * synchronous_commit on, and a redis-server that persists nothing, both on free ports of 127.0.0.1. Without
 * their binaries these workloads print why and are skipped; the rest of the run goes on.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import pg from 'pg'
import { ChargeWriter } from '../../src/billing/charge-writer.js'
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import type { Charge } from '../../src/store/ledger.js'
import type { Store } from '../../src/store/store.js'
import { ledgerCommit } from '../../src/telemetry/events.js'
import { startPostgres, type TestPostgres } from '../../test/helpers/postgres.js'
import { startRedis, type TestRedis } from '../../test/helpers/redis.js'
import { newApiKey } from '../../test/helpers/store-fixtures.js'
import type { LoadResult, LoadSpec } from './load.js'
import { UsageMonitor } from './processes.js'
import type { Measurement } from './measurement.js'
import { Samples, type Distribution } from './stats.js'
import { floorTarget, routerTarget, TARGET_NAMES, type SimSet, type Target } from './targets.js'

/** The workloads of this file, as `--only` names them (the latency one is the run's own `latency`). */
export const REPLICA_WORKLOADS = ['replicas', 'charges'] as const

export interface ReplicaStores {
  readonly pg: TestPostgres
  readonly redis: TestRedis
  /** `SHOW server_version` and `redis-server --version`. */
  readonly versions: { readonly postgres: string; readonly redis: string }
}

/** Redis URL of database `n` on the run's server: each router setup keeps its rate windows and health apart. */
export function redisDb(stores: ReplicaStores, n: number): string {
  const url = new URL(stores.redis.url)
  url.pathname = `/${n}`
  return url.toString()
}

let starting: Promise<ReplicaStores | string> | null = null

/**
 * PostgreSQL and Redis for the run, started once on first use; a string says why they cannot be (no binaries,
 * not root for `setpriv`, …): the caller prints it and skips.
 */
export function replicaStores(progress: (line: string) => void): Promise<ReplicaStores | string> {
  starting ??= (async () => {
    progress('starting PostgreSQL and Redis (test/helpers: fsync on, as nobody; nothing persisted by Redis)')
    let pgServer: TestPostgres
    try {
      pgServer = await startPostgres()
    } catch (err) {
      return `PostgreSQL could not start: ${(err as Error).message.split('\n')[0]}`
    }
    let redis: TestRedis
    try {
      redis = await startRedis()
    } catch (err) {
      if (pgServer.controllable) await pgServer.stop().catch(() => {})
      return `redis-server could not start: ${(err as Error).message.split('\n')[0]}`
    }
    const client = new pg.Client({ connectionString: pgServer.url })
    client.on('error', () => {})
    let postgres = 'PostgreSQL'
    try {
      await client.connect()
      postgres = `PostgreSQL ${(await client.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version}`
    } finally {
      await client.end().catch(() => {})
    }
    const bin = process.env.TEST_REDIS_BIN ?? '/usr/bin/redis-server'
    const printed = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout ?? ''
    const redisVersion = /v=(\S+)/.exec(printed)?.[1]
    return { pg: pgServer, redis, versions: { postgres, redis: redisVersion === undefined ? 'redis-server' : `redis-server ${redisVersion}` } }
  })()
  return starting
}

/** Stops what replicaStores started (its temp dirs go when the process exits: the helpers' exit hook). */
export async function stopReplicaStores(): Promise<void> {
  const stores = starting === null ? null : await starting
  starting = null
  if (stores === null || typeof stores === 'string') return
  if (stores.redis.controllable) await stores.redis.stop().catch(() => {})
  if (stores.pg.controllable) await stores.pg.stop().catch(() => {})
}

/** The `router-pg` target: one replica on its own database, Redis database 0. */
export async function pgRouterTarget(root: string, sims: SimSet, workDir: string, stores: ReplicaStores, nodeArgs?: readonly string[]): Promise<Target> {
  const pgUrl = await stores.pg.newDatabase()
  return routerTarget(root, sims, workDir, 'router-pg', { synchronous: 'full', nodeArgs, shared: { pgUrl, redisUrl: redisDb(stores, 0) } })
}

export interface ChargeRate {
  readonly store: 'sqlite' | 'postgres'
  readonly inflight: number
  readonly seconds: number
  /** Charges committed in the window, and per second. */
  readonly charges: number
  readonly perS: number
  readonly failed: number
  readonly firstError: string | null
  /** Transactions committed in the window, their sizes (charges) and their durations (ms). */
  readonly batches: number
  readonly batchSize: Distribution | null
  readonly commitMs: Distribution | null
}

export interface ReplicasRun {
  readonly versions: { readonly postgres: string; readonly redis: string }
  /** 64 connections, closed loop: the best round (by req/s) of each. */
  readonly throughput?: {
    readonly connections: number
    readonly durationMs: number
    readonly rounds: number
    readonly one: Measurement
    readonly two: Measurement
    /**
     * The reference of one replica (issue 45): the billed floor journaling to a database of its own on the same
     * PostgreSQL (floor-journal.ts), in the same rounds; absent in runs before it or when it did not start.
     */
    readonly floorPg?: Measurement
  }
  readonly charges?: readonly ChargeRate[]
}

export interface ReplicasOptions {
  readonly root: string
  readonly sims: SimSet
  readonly workDir: string
  readonly quick: boolean
  readonly stores: ReplicaStores
  readonly workloads: readonly string[]
  readonly connections: number
  readonly throughput: { readonly warmupMs: number; readonly durationMs: number }
  readonly rounds: number
  progress(line: string): void
  /** run.ts's: the load process, and the unmeasured warm-up every target gets. */
  runLoad(spec: LoadSpec, boundMs: number): Promise<LoadResult>
  warmUp(t: Target): Promise<void>
}

/** The `replicas` and `charges` workloads (those of `workloads` that are asked for). */
export async function measureReplicas(o: ReplicasOptions): Promise<ReplicasRun> {
  const run: { -readonly [K in keyof ReplicasRun]: ReplicasRun[K] } = { versions: o.stores.versions }
  if (o.workloads.includes('replicas')) run.throughput = await replicaThroughput(o)
  if (o.workloads.includes('charges')) run.charges = await chargeRates(o)
  return run
}

async function replicaThroughput(o: ReplicasOptions): Promise<ReplicasRun['throughput']> {
  const started: Target[] = []
  try {
    for (const [workers, db] of [[1, 1], [2, 2]] as const) {
      o.progress(`replicas: starting ${workers === 1 ? '1 replica (serve)' : `${workers} replicas behind one port (serve --workers ${workers})`} on a fresh database`)
      const pgUrl = await o.stores.pg.newDatabase()
      const t = await routerTarget(o.root, o.sims, o.workDir, 'router-pg', {
        synchronous: 'full',
        shared: { pgUrl, redisUrl: redisDb(o.stores, db), workers, name: `router-pg-${workers}` },
      })
      started.push(t)
      o.progress(`replicas: warming up ${workers} (not measured)`)
      await o.warmUp(t)
    }
    o.progress(`replicas: starting the ${TARGET_NAMES['floor-billed-pg']} on a fresh database`)
    try {
      const floor = await floorTarget(o.root, o.sims, [], { pgUrl: await o.stores.pg.newDatabase() })
      started.push(floor)
      o.progress('replicas: warming up the billed floor on PostgreSQL (not measured)')
      await o.warmUp(floor)
    } catch (err) {
      o.progress(`replicas: the billed floor on PostgreSQL did not start: ${(err as Error).message.slice(0, 300)}`)
    }
    const best: (Measurement | undefined)[] = started.map(() => undefined)
    for (let round = 1; round <= o.rounds; round++) {
      for (let i = 0; i < started.length; i++) {
        const t = started[i]!
        const who = i === 2 ? TARGET_NAMES['floor-billed-pg'] : `${i + 1} replica${i === 0 ? '' : 's'}`
        const label = `replicas: throughput, ${o.connections} connections, ${who}${o.rounds > 1 ? ` (round ${round}/${o.rounds})` : ''}`
        o.progress(`${label} …`)
        const spec: LoadSpec = { mode: 'throughput', request: t.request('fast', false), connections: o.connections, ...o.throughput }
        const monitor = new UsageMonitor(t.pid!)
        monitor.start()
        let m: Measurement
        try {
          m = { load: await o.runLoad(spec, o.throughput.warmupMs + o.throughput.durationMs + 30_000), error: null, usage: monitor.stop(), rounds: 1 }
        } catch (err) {
          m = { load: null, error: (err as Error).message, usage: monitor.stop(), rounds: 1 }
        }
        const r = m.load
        const cpu = r === null || r.sent === 0 || m.usage === null ? '' : `, CPU ${((m.usage.cpuMs * 1000) / r.sent).toFixed(1)} µs per request (all workers)`
        o.progress(`${label}: ${r === null ? `failed: ${m.error}` : `${r.rps.toFixed(0)} req/s, ${r.errors} errors${cpu}`}`)
        const before = best[i]
        const rps = (x: Measurement | undefined): number => x?.load?.rps ?? -1
        best[i] = before === undefined ? m : { ...(rps(m) > rps(before) ? m : before), rounds: before.rounds + 1 }
        await new Promise((r) => setTimeout(r, 300))
      }
    }
    return { connections: o.connections, durationMs: o.throughput.durationMs, rounds: o.rounds, one: best[0]!, two: best[1]!, ...(best[2] === undefined ? {} : { floorPg: best[2] }) }
  } finally {
    await Promise.all(started.map((t) => t.stop()))
  }
}

const ACCOUNT = '0x' + 'c'.repeat(40)
const KEY_ID = '5b0e7c1e-0000-4000-8000-00000000c4a2'
const PROVIDER = '0x' + '1'.repeat(40)
/** In-flight levels of the charges workload: 1 is the commit a lone request waits for (the latency workload's). */
const INFLIGHT = [1, 64, 256] as const

async function fundedStore(store: Store): Promise<void> {
  await store.ledger.addFunds(ACCOUNT, 'deposit', 10n ** 30n, 'bench', Date.now())
  await store.keys.createApiKey(newApiKey(ACCOUNT, { id: KEY_ID, hash: 'bench-charges', preview: 'sk-bench', name: 'bench-charges' }))
}

let chargeSeq = 0
function nextCharge(): Charge {
  return {
    requestId: `req_charges_${process.pid}_${chargeSeq++}`,
    accountId: ACCOUNT,
    keyId: KEY_ID,
    model: 'bench-fast',
    provider: PROVIDER,
    at: Date.now(),
    promptTokens: 512,
    completionTokens: 128,
    images: 0,
    audioMs: 0,
    cost: 89_600_000_000_000n,
  }
}

/**
 * Keeps `inflight` charges settling through one ChargeWriter for `ms` (each worker enqueues its next charge
 * when the last one committed): what a router settling that many responses at once could write at most.
 * Half a second first, not counted, fills the pool and the plan cache.
 */
async function chargeRate(store: Store, kind: ChargeRate['store'], inflight: number, ms: number): Promise<ChargeRate> {
  const writer = new ChargeWriter(store.ledger)
  let counting = false
  let charges = 0
  let failed = 0
  let firstError: string | null = null
  let batches = 0
  const sizes = new Samples()
  const commits = new Samples()
  const onCommit = (message: unknown): void => {
    if (!counting) return
    const m = message as { charges: number; durationMs: number; ok: boolean }
    if (!m.ok) return
    batches++
    sizes.push(m.charges)
    commits.push(m.durationMs)
  }
  ledgerCommit.subscribe(onCommit)
  const settle = (): Promise<void> =>
    new Promise((resolve) =>
      writer.enqueue(nextCharge(), (outcome) => {
        if (outcome instanceof Error) {
          failed++
          firstError ??= outcome.message
        } else if (counting) charges++
        resolve()
      }),
    )
  const loop = async (until: number): Promise<void> => {
    while (performance.now() < until && failed === 0) await settle()
  }
  try {
    const warm = performance.now() + 500
    await Promise.all(Array.from({ length: inflight }, () => loop(warm)))
    counting = true
    const start = performance.now()
    await Promise.all(Array.from({ length: inflight }, () => loop(start + ms)))
    const seconds = (performance.now() - start) / 1000
    counting = false
    return { store: kind, inflight, seconds, charges, perS: charges / seconds, failed, firstError, batches, batchSize: sizes.length === 0 ? null : sizes.distribution(), commitMs: commits.length === 0 ? null : commits.distribution() }
  } finally {
    ledgerCommit.unsubscribe(onCommit)
    await writer.close()
  }
}

async function chargeRates(o: ReplicasOptions): Promise<ChargeRate[]> {
  const ms = o.quick ? 2_000 : 5_000
  const dir = join(o.workDir, 'charges-sqlite')
  mkdirSync(dir, { recursive: true })
  const sqlite = await openSqliteStore({ path: join(dir, 'svc.db'), synchronous: 'full' })
  const postgres = await openPostgresStore({ url: await o.stores.pg.newDatabase(), poolSize: 10 })
  const out: ChargeRate[] = []
  try {
    await fundedStore(sqlite)
    await fundedStore(postgres)
    // Interleaved by level, so both stores meet the same outside load as far as possible.
    for (const inflight of INFLIGHT) {
      for (const [kind, store] of [['sqlite', sqlite], ['postgres', postgres]] as const) {
        o.progress(`charges: ${kind}, ${inflight} in flight, ${ms / 1000} s …`)
        const r = await chargeRate(store, kind, inflight, ms)
        out.push(r)
        const f = (d: Distribution | null, p: 'p50' | 'p99' | 'max', digits = 0): string => (d === null ? 'n/a' : d[p].toFixed(digits))
        o.progress(
          `charges: ${kind}, ${inflight} in flight: ${Math.round(r.perS)} charges/s, ${r.batches} transactions, batch p50 ${f(r.batchSize, 'p50')} max ${f(r.batchSize, 'max')}, commit p50 ${f(r.commitMs, 'p50', 2)} ms p99 ${f(r.commitMs, 'p99', 2)} ms${r.failed > 0 ? `, ${r.failed} failed (${r.firstError})` : ''}`,
        )
      }
    }
  } finally {
    await sqlite.close()
    await postgres.close()
  }
  return out
}
