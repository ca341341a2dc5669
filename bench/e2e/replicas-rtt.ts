/**
 * Workload `rtt` (issue 45): one replica with its PostgreSQL and Redis a round trip away, as in a fleet where
 * they sit on another machine. Two replicas run side by side, each on a database and a Redis database of its
 * own, each reaching both through a DelayLine proxy (delay-proxy.ts): one that holds nothing (0 ms: the same
 * hop without the wait) and one that holds every chunk 0.5 ms each way (1 ms round trip). In interleaved
 * rounds, direct, then each replica: latency at 1 connection (the run's latency plan), then throughput at 64
 * connections. Goal: at 1 ms a request's added p50 grows by no more than one round trip (its durable commit)
 * over the 0 ms figure, and throughput does not fall. What the proxy held each chunk is reported beside them,
 * and after each latency run the line's own round trip: Redis PINGs through the same side's proxy, one after
 * another, from a process of their own (line-ping.ts), the yardstick of the latency row.
 */
import type { LoadResult, LoadSpec } from './load.js'
import type { Measurement, RoundRun } from './measurement.js'
import { DelayLine, DelayProxy } from './delay-proxy.js'
import type { PingSpec } from './line-ping.js'
import { runScriptProcess, UsageMonitor } from './processes.js'
import { redisDb, type ReplicaStores } from './replicas.js'
import type { Distribution } from './stats.js'
import { directTarget, routerTarget, type SimSet, type Target } from './targets.js'

/** Each way: 0.5 ms, a 1 ms round trip. */
export const ONE_WAY_MS = 0.5

export interface RttSide {
  /** The round trip the proxies add (ms). */
  readonly rttMs: number
  /** Every round's latency run at 1 connection, and direct's of the same round. */
  readonly latency: readonly RoundRun[]
  readonly direct: readonly RoundRun[]
  /** Throughput at `connections`: the best round by req/s. */
  readonly throughput: Measurement
  /** How long the proxies held each chunk, from arrival to write (ms); null at 0 ms or before any. */
  readonly held: Distribution | null
  /**
   * Each round's Redis PINGs through this side's proxy (ms, line-ping.ts; null: the pings failed): the line's
   * round trip as a request meets it. Absent in runs before 2026-11-29.
   */
  readonly ping?: readonly (Distribution | null)[]
}

/** PINGs after each latency run: enough for a stable median at either distance (about 2 s at 1 ms). */
const PINGS = { warmup: 200, count: 2_000, maxMs: 20_000 } as const

export interface RttRun {
  readonly connections: number
  readonly rounds: number
  /** PINGs counted through each side's proxy after each latency run (absent before 2026-11-29). */
  readonly pings?: number
  readonly sides: readonly RttSide[]
}

export interface RttOptions {
  readonly root: string
  readonly sims: SimSet
  readonly workDir: string
  readonly stores: ReplicaStores
  readonly connections: number
  readonly throughput: { readonly warmupMs: number; readonly durationMs: number }
  readonly latency: { readonly warmup: number; readonly count: number; readonly maxMs: number }
  readonly rounds: number
  progress(line: string): void
  runLoad(spec: LoadSpec, boundMs: number): Promise<LoadResult>
  warmUp(t: Target): Promise<void>
}

/** `url` with its port replaced by the proxy's. */
function via(url: string, port: number): string {
  const u = new URL(url)
  u.hostname = '127.0.0.1'
  u.port = String(port)
  return u.toString()
}

export async function measureRtt(o: RttOptions): Promise<RttRun> {
  const pgPort = Number(new URL(o.stores.pg.url).port)
  const redisPort = Number(new URL(o.stores.redis.url).port)
  const lines: DelayLine[] = []
  const proxies: DelayProxy[] = []
  const routers: Target[] = []
  const redisProxies: DelayProxy[] = []
  try {
    for (const [i, oneWay] of [0, ONE_WAY_MS].entries()) {
      const line = new DelayLine(oneWay)
      lines.push(line)
      const pgProxy = await DelayProxy.start(pgPort, line)
      const redisProxy = await DelayProxy.start(redisPort, line)
      proxies.push(pgProxy, redisProxy)
      redisProxies.push(redisProxy)
      o.progress(`rtt: starting a replica ${oneWay * 2} ms from PostgreSQL and Redis (proxies on ports ${pgProxy.port}, ${redisProxy.port})`)
      const pgUrl = via(await o.stores.pg.newDatabase(), pgProxy.port)
      // Redis databases 3 and 4: the replicas workload uses 0 to 2.
      const redisUrl = via(redisDb(o.stores, 3 + i), redisProxy.port)
      const t = await routerTarget(o.root, o.sims, o.workDir, 'router-pg', { synchronous: 'full', shared: { pgUrl, redisUrl, name: `router-pg-rtt-${oneWay * 2}ms` } })
      routers.push(t)
      o.progress(`rtt: warming up the replica at ${oneWay * 2} ms (not measured)`)
      await o.warmUp(t)
    }
    const direct = directTarget(o.sims)
    const latency: RoundRun[][] = routers.map(() => [])
    const directRuns: RoundRun[][] = routers.map(() => [])
    const best: (Measurement | undefined)[] = routers.map(() => undefined)
    const pings: (Distribution | null)[][] = routers.map(() => [])
    const latencySpec = (t: Target): LoadSpec => ({ mode: 'latency', request: t.request('fast', false), ...o.latency })
    for (let round = 1; round <= o.rounds; round++) {
      for (let i = 0; i < routers.length; i++) {
        const t = routers[i]!
        const label = `rtt: ${lines[i]!.oneWayMs * 2} ms${o.rounds > 1 ? ` (round ${round}/${o.rounds})` : ''}`
        const d = await o.runLoad(latencySpec(direct), o.latency.maxMs + 30_000).catch(() => null)
        directRuns[i]!.push({ load: d, usage: null })
        o.progress(`${label}: latency, 1 connection …`)
        const monitor = new UsageMonitor(t.pid!)
        monitor.start()
        const l = await o.runLoad(latencySpec(t), o.latency.maxMs + 30_000).catch((err: unknown) => {
          o.progress(`${label}: latency failed: ${(err as Error).message}`)
          return null
        })
        latency[i]!.push({ load: l, usage: monitor.stop() })
        const added = l?.latency != null && d?.latency != null ? `added p50 ${((l.latency.p50 - d.latency.p50) * 1000).toFixed(0)} µs` : 'n/a'
        const spec: PingSpec = { port: redisProxies[i]!.port, ...PINGS }
        const p = await runScriptProcess<Distribution>(o.root, 'line-ping.js', spec, PINGS.maxMs + 30_000).catch((err: unknown) => {
          o.progress(`${label}: the line's PINGs failed: ${(err as Error).message}`)
          return null
        })
        pings[i]!.push(p)
        o.progress(`${label}: latency: ${added}${p === null ? '' : `; the line's round trip (Redis PING) p50 ${(p.p50 * 1000).toFixed(0)} µs`}`)
        o.progress(`${label}: throughput, ${o.connections} connections …`)
        const tm = new UsageMonitor(t.pid!)
        tm.start()
        const load: LoadSpec = { mode: 'throughput', request: t.request('fast', false), connections: o.connections, ...o.throughput }
        let m: Measurement
        try {
          m = { load: await o.runLoad(load, o.throughput.warmupMs + o.throughput.durationMs + 30_000), error: null, usage: tm.stop(), rounds: 1 }
        } catch (err) {
          m = { load: null, error: (err as Error).message, usage: tm.stop(), rounds: 1 }
        }
        o.progress(`${label}: throughput: ${m.load === null ? `failed: ${m.error}` : `${m.load.rps.toFixed(0)} req/s, ${m.load.errors} errors`}`)
        const before = best[i]
        const rps = (x: Measurement | undefined): number => x?.load?.rps ?? -1
        best[i] = before === undefined ? m : { ...(rps(m) > rps(before) ? m : before), rounds: before.rounds + 1 }
      }
    }
    return {
      connections: o.connections,
      rounds: o.rounds,
      pings: PINGS.count,
      sides: routers.map((_, i) => ({ rttMs: lines[i]!.oneWayMs * 2, latency: latency[i]!, direct: directRuns[i]!, throughput: best[i]!, held: lines[i]!.held(), ping: pings[i]! })),
    }
  } finally {
    await Promise.all(routers.map((t) => t.stop()))
    await Promise.all(proxies.map((p) => p.close()))
    for (const line of lines) line.close()
  }
}
