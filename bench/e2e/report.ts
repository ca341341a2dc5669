/**
 * BENCHMARKS.md and bench/e2e/added-latency.svg from one e2e run. Every table states absolute figures and
 * ratios to the direct baseline, and the targets are ratios to the billed floor (`floor-billed`: the bare
 * uWS + undici relay plus the work every billed answer must get, issue 30) measured in the same run, with the
 * bare floor, nginx and Portkey kept beside it; "added" latency of a proxy is its percentile minus direct's. A
 * table lists the targets that ran in its workload. The micro-benchmark section (written by bench/run.mjs) is
 * carried over as it is.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { LoadResult } from './load.js'
import type { Measurement } from './measurement.js'
import { formatMs, formatRatio, PERCENTILE_LABEL, PERCENTILES, type Distribution, type Percentile } from './stats.js'
import { addedLatencySvg } from './svg.js'
import { durableCommitSection } from './durable-commit.js'
import type { MessagesRun } from './messages.js'
import type { MultipartRun } from './multipart.js'
import type { ChargeRate, ReplicasRun } from './replicas.js'
import type { RttRun, RttSide } from './replicas-rtt.js'
import { STAGES, type Stage } from './stages.js'
import { SIM_SETTINGS, TARGET_IDS, TARGET_NAMES, type TargetId } from './targets.js'
import { criterion, median, meets } from './criteria.js'
import { PORTKEY_HONO_OVERRIDE } from './proxies.js'

export type WorkloadId = 'latency' | 'throughput' | 'open1000' | 'open2000' | 'ttft' | 'streams'

/** The sizes of the phases, as run.ts ran them. */
export interface Plan {
  /** Unmeasured warm-up per target: a burst of JSON requests for `ms`, then `streams` streams. */
  readonly warm: { readonly ms: number; readonly streams: number }
  readonly latency: { readonly warmup: number; readonly count: number; readonly maxMs: number }
  readonly throughput: { readonly warmupMs: number; readonly durationMs: number }
  readonly open: { readonly durationMs: number; readonly drainMs: number; readonly warmup: number }
  readonly ttft: { readonly count: number; readonly warmup: number; readonly maxMs: number }
  readonly concurrent: { readonly maxMs: number }
  /** The profiled latency run of the stage breakdown. */
  readonly stages: { readonly warmup: number; readonly count: number }
  /** The latency runs of the rtt workload (replicas-rtt.ts); absent before issue 45. */
  readonly rtt?: { readonly warmup: number; readonly count: number; readonly maxMs: number }
  readonly connections: number
  readonly ttftConcurrency: number
  readonly streams: number
  /** Rounds of the open-loop workloads (best round per target kept). */
  readonly rounds: number
  /** Interleaved rounds of the latency and first-event workloads, every one kept (issue 45); absent before. */
  readonly medianRounds?: number
}

export interface TargetInfo {
  readonly version: string
  readonly unavailable: string | null
  readonly idleRssMb: number | null
}

export interface RunData {
  readonly quick: boolean
  readonly startedAt: Date
  readonly seconds: number
  readonly machine: {
    readonly cpu: string
    readonly cores: number
    readonly memoryGb: number
    readonly node: string
    readonly kernel: string
    readonly undici: string
    readonly loadStart: readonly number[]
    readonly loadEnd: readonly number[]
  }
  /** Every target of TARGET_IDS; `floor` is missing from runs recorded before it was added. */
  readonly targets: Readonly<Record<TargetId, TargetInfo>>
  readonly plan: Plan
  readonly results: Readonly<Record<WorkloadId, Partial<Record<TargetId, Measurement>>>>
  /** The bare flush of one WAL frame on the run's disk (fsync-probe.ts). */
  readonly fsync: Distribution
  /** A charge's write flushed by an fdatasync on the thread pool (fsync-probe.ts): the durable commit's reference; absent in runs before issue 45. */
  readonly fsyncPool?: Distribution
  /** CPU time by stage of svc-router and of the floor (stages.ts); null when not run. */
  readonly stages: StageRun | null
  /** /v1/messages native and translated beside chat (messages.ts); absent when not run. */
  readonly messages?: MessagesRun
  /** Multipart upload throughput and the router's RSS under concurrent uploads (multipart.ts); absent when not run. */
  readonly multipart?: MultipartRun
  /** Replicas on PostgreSQL + Redis: 1 vs 2 behind one port, charges/s of the group commit (replicas.ts); absent when not run. */
  readonly replicas?: ReplicasRun
  /** Why the replica workloads and `router-pg` were skipped (no PostgreSQL or redis-server binaries, …). */
  readonly replicasSkipped?: string
  /** `--rows`: the Targets rows a partial run was asked for (criteria.ts ids); the table lists only those. */
  readonly rows?: readonly string[]
  /** One replica 0 and 1 ms from PostgreSQL and Redis (replicas-rtt.ts); absent when not run. */
  readonly rtt?: RttRun
}

/** The targets the stage breakdown profiles, in the order of its columns. */
export const STAGE_TARGETS = ['router', 'floor-billed', 'floor'] as const
export type StageTarget = (typeof STAGE_TARGETS)[number]

/** Bytes allocated by stage over `requests` requests, from one sampling heap profile (heap-sampling.ts). */
export interface HeapStages {
  readonly requests: number
  /** Samples charged (each stands for about `intervalBytes` of allocation, or its object's size when larger). */
  readonly samples: number
  readonly intervalBytes: number
  /** Node flags of the sampled run beyond the inspector's (heap-sampling.ts: no inlining); absent: none. */
  readonly nodeFlags?: readonly string[]
  readonly bytes: Readonly<Partial<Record<Stage, number>>>
}

/** One profiled target of the stage breakdown: CPU µs by stage over `requests` requests. */
export interface StageProfile {
  readonly requests: number
  /** Whether only the measured window was counted (else the whole process life). */
  readonly windowed: boolean
  readonly us: Readonly<Partial<Record<Stage, number>>>
  /** Bytes allocated by stage, from a run of its own; absent in runs recorded before it was measured, or when it failed. */
  readonly heap?: HeapStages
  /** Why `heap` is missing, when it was tried. */
  readonly heapError?: string
}
/** The profiled targets; runs recorded before issue 30 have `router` and `floor` only, a partial run the ones of --targets. */
export type StageRun = Readonly<Partial<Record<StageTarget, StageProfile>>>

/** What run.ts records as `unavailable` of a target a partial run (--targets) left out. */
export const NOT_STARTED = 'not started'
const START = '<!-- micro:start -->'
const END = '<!-- micro:end -->'
const SVG_PATH = 'bench/e2e/added-latency.svg'
const PROXIES: readonly TargetId[] = ['nginx', 'portkey', 'router', 'router-normal', 'floor', 'floor-billed']
/** Targets that run in some workloads only (run.ts): a table lists them where they have a result. */
const PARTIAL: readonly TargetId[] = ['floor', 'floor-billed', 'floor-billed-full', 'floor-billed-pg', 'router-normal', 'router-logged', 'router-quiet', 'router-pg']
const COLORS: Readonly<Record<TargetId, string>> = {
  direct: '#999999',
  nginx: '#4e79a7',
  portkey: '#e15759',
  router: '#59a14f',
  'router-normal': '#8cd17d',
  floor: '#b07aa1',
  'floor-billed': '#ff9da7',
  'floor-billed-full': '#d4a6c8',
  'floor-billed-pg': '#9c755f',
  'router-logged': '#f28e2b',
  'router-quiet': '#76b7b2',
  'router-pg': '#edc948',
}

class View {
  constructor(readonly data: RunData) {}

  load(w: WorkloadId, t: TargetId): LoadResult | null {
    return this.data.results[w]?.[t]?.load ?? null
  }

  rss(w: WorkloadId, t: TargetId): number | null {
    return this.data.results[w]?.[t]?.usage?.peakRssMb ?? null
  }

  /** The target's own CPU time per request it served during the workload, in ms (NaN for direct). */
  cpuPerRequest(w: WorkloadId, t: TargetId): number {
    const m = this.data.results[w]?.[t]
    if (m?.usage == null || m.load === null || m.load.sent === 0) return Number.NaN
    return m.usage.cpuMs / m.load.sent
  }

  dist(w: WorkloadId, t: TargetId, which: 'latency' | 'ttft' | 'firstEvent' | 'gap' = 'latency'): Distribution | null {
    const d = this.load(w, t)?.[which] ?? null
    return d === null || d.count === 0 ? null : d
  }

  pct(w: WorkloadId, t: TargetId, p: Percentile, which: 'latency' | 'ttft' | 'firstEvent' = 'latency'): number {
    return this.dist(w, t, which)?.[p] ?? Number.NaN
  }

  added(w: WorkloadId, t: TargetId, p: Percentile, which: 'latency' | 'ttft' | 'firstEvent' = 'latency'): number {
    return this.pct(w, t, p, which) - this.pct(w, 'direct', p, which)
  }

  rps(w: WorkloadId, t: TargetId): number {
    return this.load(w, t)?.rps ?? Number.NaN
  }

  /**
   * Added p50 of target `t` in each interleaved round of workload `w` (its percentile − direct's in the same
   * round): one value per round, from `runs` where the run kept them, else the one best round.
   */
  roundAddedAll(w: WorkloadId, t: TargetId, which: 'latency' | 'firstEvent' = 'latency'): number[] {
    const mine = this.data.results[w]?.[t]
    const direct = this.data.results[w]?.direct
    if (mine === undefined || direct === undefined) return []
    const a = mine.runs ?? [mine]
    const d = direct.runs ?? [direct]
    return a.map((r, i) => (r.load?.[which]?.p50 ?? Number.NaN) - (d[i]?.load?.[which]?.p50 ?? Number.NaN))
  }

  /** The median over the rounds of roundAddedAll. */
  medianAdded(w: WorkloadId, t: TargetId, which: 'latency' | 'firstEvent' = 'latency'): number {
    return median(this.roundAddedAll(w, t, which))
  }

  /** Round by round, `a`'s added p50 over `b`'s (NaN for a round where either is missing or not above zero). */
  roundRatios(w: WorkloadId, a: TargetId, b: TargetId, which: 'latency' | 'firstEvent' = 'latency'): number[] {
    const xs = this.roundAddedAll(w, a, which)
    const ys = this.roundAddedAll(w, b, which)
    return xs.map((x, i) => {
      const y = ys[i] ?? Number.NaN
      return x > 0 && y > 0 ? x / y : Number.NaN
    })
  }

  /** What the run recorded about a target; undefined for one it predates (the floor in older runs). */
  target(t: TargetId): TargetInfo | undefined {
    return (this.data.targets as Partial<Record<TargetId, TargetInfo>>)[t]
  }

  measured(t: TargetId): boolean {
    return this.target(t)?.unavailable === null
  }

  /**
   * The rows of workload `w`'s table: every target that runs in it, with unavailable ones kept so the table
   * says why. The floor and svc-router (normal) only where they have a result.
   */
  rows(w: WorkloadId): TargetId[] {
    return TARGET_IDS.filter((t) => this.target(t) !== undefined && (!PARTIAL.includes(t) || this.data.results[w]?.[t] !== undefined))
  }

  failure(w: WorkloadId, t: TargetId): string | null {
    if (this.target(t)?.unavailable === NOT_STARTED) return 'not run'
    if (!this.measured(t)) return 'unavailable (see Notes)'
    const m = this.data.results[w]?.[t]
    if (m === undefined) return 'not run'
    if (m.load === null) return `failed: ${m.error ?? '?'}`
    return null
  }
}

const ms = formatMs
const mb = (v: number | null): string => (v === null || !Number.isFinite(v) ? 'n/a' : `${v.toFixed(0)} MB`)
const int = (v: number): string => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : 'n/a')

function table(head: readonly string[], rows: readonly (readonly string[])[]): string[] {
  return [`| ${head.join(' | ')} |`, `| ${head.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`, ...rows.map((r) => `| ${r.join(' | ')} |`)]
}

function errorsCell(r: LoadResult | null): string {
  if (r === null) return 'n/a'
  const parts = [`${r.errors}`]
  if (r.incomplete > 0) parts.push(`${r.incomplete} unfinished`)
  return parts.join(', ') + (r.firstError !== null ? ` (${r.firstError.slice(0, 60)})` : '')
}

/** svc-router's figure beside the other references (not targets): its ratio to the bare floor's, nginx's and Portkey's. */
function besideCell(router: number, of: (t: TargetId) => number): string {
  const parts = (['floor', 'nginx', 'portkey'] as const).flatMap((t) => {
    const other = of(t)
    return Number.isFinite(router) && Number.isFinite(other) && other > 0 && router > 0 ? [`${t === 'floor' ? 'the floor' : TARGET_NAMES[t]} ${formatRatio(router, other)}`] : []
  })
  return parts.length === 0 ? '—' : parts.join(', ')
}

function targetsSection(v: View): string[] {
  const rows: string[][] = []
  const verdict = (ok: boolean | null): string => (ok === null ? 'not measured' : ok ? 'yes' : '**no**')
  const finite = (...xs: number[]): boolean => xs.every(Number.isFinite)
  const B = 'floor-billed'
  /**
   * One row: `a` against `b`, by the row's criterion. An added value at or below zero means the baseline (direct)
   * measured slower than the proxy in this run: the noise of a shared machine, not a proxy that costs nothing;
   * no verdict is drawn from such a pair.
   */
  const row = (id: string, a: number, b: number, text: (a: number, b: number) => string, beside = '—', runs = ''): void => {
    const c = criterion(id)
    const label = c.label
    if (!finite(a, b)) return void rows.push([label, 'not measured in this run', 'not measured', beside])
    if (a <= 0 || b <= 0) return void rows.push([label, `${text(a, b)}: not comparable, the baseline measured slower than a proxy in this run${runs}`, 'undecided', beside])
    rows.push([label, `${text(a, b)} = ${formatRatio(a, b)}${runs}`, verdict(meets(c, a, b)), beside])
  }
  const pair = (a: number, b: number): string => `${ms(a)} vs ${ms(b)}`
  const perS = (a: number, b: number): string => `${int(a)} vs ${int(b)} req/s`
  /** A row judged by the median of the interleaved rounds' ratios (issue 45), each round's ratio listed. */
  const medianRow = (id: string, w: WorkloadId, a: TargetId, b: TargetId, which: 'latency' | 'firstEvent' = 'latency', beside = '—'): void => {
    const ratios = v.roundRatios(w, a, b, which)
    const listed = ratios.length > 1 ? ` (median of the runs: ${ratios.map((r) => (Number.isFinite(r) ? `${r.toFixed(2)}×` : 'n/a')).join(', ')})` : ''
    const c = criterion(id)
    const aMed = v.medianAdded(w, a, which)
    const bMed = v.medianAdded(w, b, which)
    if (!finite(aMed, bMed)) return void rows.push([c.label, 'not measured in this run', 'not measured', beside])
    const m = ratios.length > 0 ? median(ratios) : Number.NaN
    const ratio = Number.isFinite(m) ? ` = ${m.toFixed(2)}×` : ''
    rows.push([c.label, `${pair(aMed, bMed)} (medians of the added p50)${ratio}${listed}`, Number.isFinite(m) && m > 0 ? verdict(meets(c, m, 1)) : 'undecided', beside])
  }
  const cpu = (t: TargetId): number => v.cpuPerRequest('throughput', t)
  const rps = (t: TargetId): number => v.rps('throughput', t)
  const added50 = (t: TargetId): number => v.medianAdded('latency', t, 'latency')
  // Decision 1: each commit mode against the billed floor with the same durability.
  row('cpu-full', cpu('router'), cpu('floor-billed-full'), pair, besideCell(cpu('router'), cpu))
  row('cpu-normal', cpu('router-normal'), cpu(B), pair)
  row('throughput-full', rps('router'), rps('floor-billed-full'), perS, besideCell(rps('router'), rps))
  row('throughput-normal', rps('router-normal'), rps(B), perS)
  // Decision 2: one replica against the billed floor on the same PostgreSQL.
  const tp = v.data.replicas?.throughput
  const one = tp?.one.load ?? null
  const floorPg = tp?.floorPg?.load ?? null
  row('replica-throughput', one === null || one.errors > 0 ? Number.NaN : one.rps, floorPg?.rps ?? Number.NaN, perS)
  medianRow('replica-p50', 'latency', 'router-pg', 'floor-billed-pg')
  // Decision 3: the 1-connection latency and the first event, medians of the interleaved rounds.
  medianRow('p50', 'latency', 'router-normal', B, 'latency', besideCell(added50('router-normal'), added50))
  const byEvent = v.dist('ttft', 'router', 'firstEvent') !== null
  medianRow('first-event', 'ttft', 'router', B, byEvent ? 'firstEvent' : 'latency')
  // Decision 4: what `full` adds over `normal`, per round, against a thread-pool fdatasync of a charge's write.
  const fullOverNormal = (full: TargetId, normal: TargetId): number =>
    median(v.roundAddedAll('latency', full).map((x, i) => x - (v.roundAddedAll('latency', normal)[i] ?? Number.NaN)))
  const durable = fullOverNormal('router', 'router-normal')
  const pool = v.data.fsyncPool
  // Beside: what the same flush adds to the billed floor, measured the same way (its full and normal rounds).
  const floorDurable = fullOverNormal('floor-billed-full', B)
  const floorDurableCell =
    Number.isFinite(floorDurable) && pool !== undefined ? `the billed floor's own \`full\` − \`normal\`: ${ms(floorDurable)} = ${formatRatio(floorDurable, pool.p50)}` : '—'
  row('durable', durable, pool?.p50 ?? Number.NaN, (a, b) => `${ms(a)} vs ${ms(b)} (the thread-pool fdatasync's p50, this run; a bare synchronous one: ${ms(v.data.fsync.p50)})`, floorDurableCell)
  // Decision 5: multipart by CPU per MiB relayed.
  const mp = v.data.multipart
  const perMiB = (usage: { cpuMs: number } | undefined, r: { sent: number } | undefined): number =>
    mp?.requestBytes === undefined || usage === undefined || r === undefined || r.sent === 0 ? Number.NaN : usage.cpuMs / ((r.sent * mp.requestBytes) / 2 ** 20)
  row('multipart', perMiB(mp?.throughput.routerUsage, mp?.throughput.router), perMiB(mp?.throughput.floorUsage, mp?.throughput.floor), (a, b) => `${ms(a)} vs ${ms(b)} per MiB (${mp?.fileMiB ?? '?'} MiB transcriptions, ${mp?.concurrency ?? '?'} clients)`)
  const added99 = (t: TargetId): number => v.added('open2000', t, 'p99')
  const unfinished = v.load('open2000', 'router')?.incomplete ?? 0
  row('open-p99', unfinished > 0 ? Number.POSITIVE_INFINITY : added99('router'), added99(B), pair, besideCell(added99('router'), added99))
  medianRow('telemetry', 'latency', 'router-logged', 'router-quiet')
  const s = v.load('streams', 'router')
  const rss = v.rss('streams', 'router')
  rows.push([
    criterion('streams-rss').label,
    s === null ? 'not measured in this run' : `${s.ok}/${v.data.plan.streams} complete, peak RSS ${mb(rss)}`,
    verdict(s === null || rss === null ? null : s.ok === v.data.plan.streams && rss < 150),
    besideCell(rss ?? Number.NaN, (t) => v.rss('streams', t) ?? Number.NaN),
  ])
  if (mp !== undefined) {
    const growth = mp.memory.peakRssMb - mp.memory.idleRssMb
    const perUpload = mp.uploadMemoryMiB ?? mp.replayBufferMiB
    const bound = mp.uploads * perUpload
    rows.push([
      `router RSS during ${mp.uploads} concurrent ${mp.uploadMiB} MiB uploads within what uploads keep in memory (growth ≤ ${mp.uploads} × ${perUpload} MiB, \`server.upload_memory_bytes\`)`,
      `${mp.memory.load.ok}/${mp.uploads} complete, +${growth.toFixed(0)} MiB over idle (uploads: ${mp.uploads * mp.uploadMiB} MiB)`,
      verdict(mp.memory.load.ok === mp.uploads ? growth <= bound : null),
      '—',
    ])
    const dbl = mp.memoryDouble
    if (dbl !== undefined) {
      // Not by upload sizes: twice the bytes uploaded may add at most a tenth of the extra bytes to the growth.
      const growth2 = dbl.peakRssMb - dbl.idleRssMb
      const extra = mp.uploads * (dbl.uploadMiB - mp.uploadMiB)
      rows.push([
        `router RSS not bounded by upload sizes: ${mp.uploads} × ${dbl.uploadMiB} MiB grows it by ≤ a tenth of the extra ${extra} MiB more than ${mp.uploads} × ${mp.uploadMiB} MiB`,
        `+${growth2.toFixed(0)} MiB vs +${growth.toFixed(0)} MiB`,
        verdict(dbl.load.ok === mp.uploads && mp.memory.load.ok === mp.uploads ? growth2 - growth <= extra / 10 : null),
        '—',
      ])
    }
  }
  // The fleet's network (replicas-rtt.ts): 1 ms against 0 ms, through the same proxy.
  const rtt = v.data.rtt
  const at0 = rtt?.sides.find((x) => x.rttMs === 0)
  const at1 = rtt?.sides.find((x) => x.rttMs > 0)
  if (at0 !== undefined && at1 !== undefined) {
    const a0 = rttAdded(at0)
    const a1 = rttAdded(at1)
    const c = criterion('rtt-p50')
    const grew = a1 - a0
    // The line's own round trip (Redis PINGs through the same proxies, line-ping.ts) at 1 ms minus at 0 ms: one
    // round trip as a request meets it. Runs before the pings were measured are judged by the set delay.
    const p0 = linePing(at0)
    const p1 = linePing(at1)
    const pinged = finite(p0, p1)
    const trip = pinged ? p1 - p0 : at1.rttMs
    const held = at1.held === null ? '' : `; the proxy held chunks ${ms(at1.held.p50)} at p50 (p99 ${ms(at1.held.p99)}) for ${ms(at1.rttMs / 2)} set`
    rows.push([
      c.label,
      finite(a0, a1)
        ? `${ms(a1)} − ${ms(a0)} = ${ms(grew)} (medians of the added p50) vs ${pinged ? `the line's round trip ${ms(trip)} (a Redis PING through the same proxies, medians of the rounds' p50: ${ms(p1)} at ${ms(at1.rttMs)} set, ${ms(p0)} at 0)` : `one round trip ${ms(trip)}`}${held}`
        : 'not measured in this run',
      finite(a0, a1) ? verdict(grew <= c.limit * trip) : 'not measured',
      '—',
    ])
    row('rtt-throughput', at1.throughput.load?.rps ?? Number.NaN, at0.throughput.load?.rps ?? Number.NaN, perS)
  } else {
    rows.push([criterion('rtt-p50').label, 'not measured in this run', 'not measured', '—'], [criterion('rtt-throughput').label, 'not measured in this run', 'not measured', '—'])
  }
  // Decision 6: the moonshots, against the billed floor at `full`.
  row('moonshot-throughput', rps('router'), rps('floor-billed-full'), perS, besideCell(rps('router'), rps))
  medianRow('moonshot-p50', 'latency', 'router', 'floor-billed-full', 'latency', besideCell(added50('router'), added50))
  // `--rows`: only the rows asked for.
  const asked = v.data.rows
  if (asked !== undefined) {
    const labels = new Set(asked.map((id) => criterion(id).label))
    for (let i = rows.length - 1; i >= 0; i--) if (!labels.has(rows[i]![0]!)) rows.splice(i, 1)
  }
  const billedP50 = added50(B)
  const rt = rps('router')
  const reference: string[][] = []
  const nginxP50 = added50('nginx')
  const floorP50 = added50('floor')
  const gap = (t: TargetId): number => v.dist('ttft', t, 'gap')?.p99 ?? Number.NaN
  reference.push(['floor added p50 vs nginx added p50 (1 connection)', `${ms(floorP50)} vs ${ms(nginxP50)} = ${formatRatio(floorP50, nginxP50)}`])
  reference.push(['billed floor added p50 vs nginx', `${ms(billedP50)} vs ${ms(nginxP50)} = ${formatRatio(billedP50, nginxP50)}`])
  reference.push(['svc-router (`full`) added p50 vs nginx', `${ms(added50('router'))} vs ${ms(nginxP50)} = ${formatRatio(added50('router'), nginxP50)}`])
  reference.push(['svc-router throughput vs nginx, vs Portkey', `${formatRatio(rt, rps('nginx'))}, ${formatRatio(rt, rps('portkey'))}`])
  reference.push([
    `chunk gap p99 under ${v.data.plan.ttftConcurrency} concurrent streams: svc-router vs the billed floor, the floor, nginx`,
    `${ms(gap('router'))} vs ${ms(gap(B))}, ${ms(gap('floor'))}, ${ms(gap('nginx'))}`,
  ])
  return [
    '## Targets',
    '',
    `Each target against its like-for-like reference, measured in the same run (issue 45; the rows and their limits are bench/e2e/criteria.ts). The references are the **${TARGET_NAMES[B]}** (\`floor-billed\`, Method: the floor relay plus only the work every billed answer must get) in three durabilities: \`floor-billed\` commits its journal to SQLite as svc-router's \`synchronous: normal\` does (on the OS), \`floor-billed-full\` flushes it with a thread-pool fdatasync before the last byte (group-committed), as svc-router's default \`full\` does, and \`floor-billed-pg\` appends it to the same PostgreSQL the replicas use (one transaction per batch, \`synchronous_commit on\`). So \`full\` is judged against \`floor-billed-full\`, \`normal\` against \`floor-billed\` and a replica against \`floor-billed-pg\`. The durable commit is judged against a thread-pool fdatasync of a charge's write, multipart against the floor relay's CPU per MiB on the same uploads. Rows marked *median* are judged by the median of ${v.data.plan.medianRounds ?? v.data.plan.rounds} interleaved runs (every target, then every target again), each after ${int(v.data.plan.latency.warmup)} warm-up requests per target; each run's ratio is listed. The bare floor relay, nginx and Portkey stay beside: the last column gives svc-router's figure as a ratio to each of theirs (not targets). A miss is explained under Notes and in the stage breakdown.`,
    '',
    ...table(['target', 'measured in this run', 'met', 'beside: svc-router vs the floor, nginx, Portkey'], rows),
    '',
    ...requiredWorkSection(v),
    'Outside reference (not targets):',
    '',
    ...table(['', 'this run'], reference),
    '',
  ]
}

/**
 * What the floor with the required billing work (floor-relay.ts `--bill`) costs beside the floor and beside
 * svc-router: the step from the bare floor to the reference of the targets, before any implementation choice.
 */
/** The median over the rounds of a replica's added p50 at 1 connection in the rtt workload (ms). */
function rttAdded(side: RttSide): number {
  return median(side.latency.map((r, i) => (r.load?.latency?.p50 ?? Number.NaN) - (side.direct[i]?.load?.latency?.p50 ?? Number.NaN)))
}

/** The median over the rounds of the p50 of the PINGs through a side's proxy (ms); NaN when not measured. */
function linePing(side: RttSide): number {
  const p50s = (side.ping ?? []).map((d) => d?.p50 ?? Number.NaN)
  return p50s.length === 0 ? Number.NaN : median(p50s)
}

function requiredWorkSection(v: View): string[] {
  if (!v.measured('floor-billed')) return []
  const billed = TARGET_NAMES['floor-billed']
  const floorP50 = v.added('latency', 'floor', 'p50')
  const billedP50 = v.added('latency', 'floor-billed', 'p50')
  const normalP50 = v.added('latency', 'router-normal', 'p50')
  const firstEvent = (t: TargetId): number => v.added('ttft', t, 'p50', 'firstEvent')
  const open99 = (t: TargetId): number => v.added('open2000', t, 'p99')
  const rows: string[][] = [
    ['added p50, 1 connection', `${ms(billedP50)} vs the floor's ${ms(floorP50)} = ${formatRatio(billedP50, floorP50)}`, `${ms(normalP50)} (\`normal\`) = ${formatRatio(normalP50, billedP50)}`],
    [
      `throughput, ${v.data.plan.connections} connections`,
      `${int(v.rps('throughput', 'floor-billed'))} vs the floor's ${int(v.rps('throughput', 'floor'))} req/s = ${formatRatio(v.rps('throughput', 'floor-billed'), v.rps('throughput', 'floor'))}`,
      `${int(v.rps('throughput', 'router'))} req/s (\`full\`) = ${formatRatio(v.rps('throughput', 'router'), v.rps('throughput', 'floor-billed'))}`,
    ],
    [
      'CPU per request, throughput',
      `${ms(v.cpuPerRequest('throughput', 'floor-billed'))} vs the floor's ${ms(v.cpuPerRequest('throughput', 'floor'))} = ${formatRatio(v.cpuPerRequest('throughput', 'floor-billed'), v.cpuPerRequest('throughput', 'floor'))}`,
      `${ms(v.cpuPerRequest('throughput', 'router'))} = ${formatRatio(v.cpuPerRequest('throughput', 'router'), v.cpuPerRequest('throughput', 'floor-billed'))}`,
    ],
    ['added p99, 2,000 req/s open loop', `${ms(open99('floor-billed'))} vs the floor's ${ms(open99('floor'))} = ${formatRatio(open99('floor-billed'), open99('floor'))}`, `${ms(open99('router'))} = ${formatRatio(open99('router'), open99('floor-billed'))}`],
    [
      `added first event p50, ${v.data.plan.ttftConcurrency} concurrent streams`,
      `${ms(firstEvent('floor-billed'))} vs the floor's ${ms(firstEvent('floor'))} = ${formatRatio(firstEvent('floor-billed'), firstEvent('floor'))}`,
      `${ms(firstEvent('router'))} = ${formatRatio(firstEvent('router'), firstEvent('floor-billed'))}`,
    ],
  ]
  return [
    `From the bare floor to the reference (not a target): the **${billed}** (Method) does on the same stack only what every answer must get, the cheapest way (the key looked up, the body parsed for its model, a hold, the answer's usage read, the charge appended to SQLite before the last byte, the trace spliced in; no routing, rate limit, key policy, failover or telemetry). What it costs over the floor is the spec's own work, which no router that bills as the spec says can avoid on this stack: that is why the targets above are ratios to it rather than to the floor (issue 30).`,
    '',
    ...table(['', `${billed} vs the floor`, 'svc-router vs it'], rows),
    '',
  ]
}

function stagesSection(v: View): string[] {
  const st = v.data.stages
  if (st === null) return []
  const profiled = STAGE_TARGETS.filter((t) => st[t] !== undefined)
  if (profiled.length === 0) return []
  // The difference is svc-router's over the reference of the targets (runs before issue 30: over the floor).
  const base = st.router === undefined ? undefined : (['floor-billed', 'floor'] as const).find((t) => st[t] !== undefined)
  const label = (t: StageTarget): string => (t === 'router' ? 'svc-router' : t)
  const head = ['stage', ...profiled.map(label), ...(base === undefined ? [] : [`difference svc-router − ${base}`])]
  const render = (of: (p: StageProfile, stage: Stage) => number | null, fmt: (x: number) => string, shown: number): string[][] => {
    const cell = (t: StageTarget, stage: Stage | null): number | null => {
      const p = st[t]!
      if (stage !== null) return of(p, stage)
      const each = STAGES.map((s) => of(p, s))
      return each.some((x) => x === null) ? null : each.reduce<number>((a, b) => a + b!, 0)
    }
    const line = (name: string, stage: Stage | null, bold: boolean): string[] => {
      const cells = profiled.map((t) => cell(t, stage))
      const diff = base === undefined ? [] : [cell('router', stage), cell(base, stage)]
      const out = [name, ...cells.map((x) => (x === null ? 'n/a' : fmt(x))), ...(base === undefined ? [] : [diff[0] === null || diff[1] === null ? 'n/a' : fmt(diff[0]! - diff[1]!)])]
      return bold ? out.map((c) => `**${c}**`) : out
    }
    const rows = STAGES.filter((stage) => profiled.some((t) => (cell(t, stage) ?? 0) >= shown)).map((stage) => line(stage, stage, false))
    rows.push(line('total per request', null, true))
    return rows
  }
  const us = (x: number): string => `${x < 0 ? '−' : ''}${Math.abs(x).toFixed(1)} µs`
  const bytes = (x: number): string => `${x < 0 ? '−' : ''}${Math.round(Math.abs(x)).toLocaleString('en-US')} B`
  const cpuRows = render((p, stage) => (p.us[stage] ?? 0) / p.requests, us, 0.05)
  cpuRows.push(['requests counted', ...profiled.map((t) => int(st[t]!.requests)), ...(base === undefined ? [] : [''])])
  const whole = profiled.some((t) => !st[t]!.windowed) ? ' (the profile window was not found for one of them: its whole process life, start-up included, is counted)' : ''
  const names = profiled.map((t) => (t === 'router' ? 'svc-router (`full`)' : `the ${TARGET_NAMES[t]} (\`${t}\`)`))
  const list = names.length === 1 ? names[0]! : `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]!}`
  const out = [
    '## Where one request\'s time goes',
    '',
    `CPU time per request by stage, from \`node --cpu-prof\` (100 µs sampling) of ${list}, each serving ${int(v.data.plan.stages.count)} requests of the latency workload alone, after ${int(v.data.plan.stages.warmup)} unprofiled ones${whole}. A sample is charged to the innermost frame that names a stage (bench/e2e/stages.ts): undici's own work is undici's even when svc-router called it. Wall time that is not CPU (the provider's answer, the fsync on the thread pool) is in the latency tables, not here; \`native, unattributed\` is time V8 saw outside JavaScript (syscalls, uWS's and libuv's C++). The main thread only: svc-router's worker threads (the store's upkeep) are not in it.`,
    '',
    ...table(head, cpuRows),
    '',
  ]
  const sampled = profiled.filter((t) => st[t]!.heap !== undefined)
  const missing = profiled.flatMap((t) => {
    const p = st[t]!
    return p.heap !== undefined ? [] : [`${label(t)}: ${p.heapError ?? 'a run recorded before bytes were measured'}`]
  })
  if (sampled.length > 0) {
    const heapRows = render((p, stage) => (p.heap === undefined ? null : (p.heap.bytes[stage] ?? 0) / p.heap.requests), bytes, 1)
    heapRows.push(['requests counted (samples)', ...profiled.map((t) => { const h = st[t]!.heap; return h === undefined ? 'n/a' : `${int(h.requests)} (${int(h.samples)})` }), ...(base === undefined ? [] : [''])])
    const interval = st[sampled[0]!]!.heap!.intervalBytes
    const flags = st[sampled[0]!]!.heap!.nodeFlags ?? []
    const inlining = flags.includes('--no-turbo-inlining')
      ? " The sampled runs run with `--no-turbo-inlining`: V8's sampler records a stack's physical frames, so an allocation in a function TurboFan inlined into another would be charged to that other one and its stage (in the billed floor, its trace landed in its commit); without inlining each allocation keeps its own frame, and what a request allocates barely changes (within 3% in both directions, measured with and without, bench/e2e/heap-sampling.ts)."
      : " V8's sampler records a stack's physical frames: an allocation in a function TurboFan inlined into another is charged to that other one and its stage (the CPU table keeps inlined frames apart)."
    out.push(
      `Bytes allocated per request by stage, from a second run of each (not the CPU-profiled one): started again with its inspector open, warmed up with ${int(v.data.plan.stages.warmup * 2)} unsampled requests, then ${int(v.data.plan.stages.count)} requests of the latency workload under V8's sampling heap profiler (DevTools \`HeapProfiler.startSampling\`, a sample every ${int(interval)} bytes on average, with \`includeObjectsCollectedByMajorGC\` and \`includeObjectsCollectedByMinorGC\`, checked to be honoured by this Node's V8 before the run: objects the garbage collector freed before the end count, so this is what a request allocates, not what it keeps). Each sample is charged to the innermost frame of its allocation stack that names a stage, by the rules of the CPU table; an allocation made with no JavaScript on the stack (uWS and Node's C++ creating a callback's arguments) is native. The figures are V8's estimates (each sample stands for the bytes sampled at its size's odds), of the JavaScript heap of the main thread: the memory behind ArrayBuffers and Buffers (socket reads, uWS's chunks, SQLite's pages) lies outside it and is not counted, only their JavaScript objects.${inlining}`,
      '',
      ...table(head, heapRows),
      '',
    )
    if (missing.length > 0) out.push(`No bytes for ${missing.join('; ')}.`, '')
  } else if (missing.length > 0) {
    out.push(`Bytes allocated per request: not measured (${missing.join('; ')}).`, '')
  }
  return out
}

function machineSection(v: View): string[] {
  const d = v.data
  const m = d.machine
  const version = (t: TargetId): string => {
    const info = v.target(t)
    return info === undefined ? 'n/a' : info.version + (info.unavailable === null ? '' : ' (unavailable)')
  }
  return [
    '## Machine',
    '',
    ...table(
      ['', ''],
      [
        ['CPU', `${m.cpu}, ${m.cores} cores (/proc/cpuinfo)`],
        ['memory', `${m.memoryGb.toFixed(0)} GiB`],
        ['kernel', m.kernel],
        ['Node', m.node],
        ['nginx', version('nginx')],
        ['Portkey gateway', version('portkey')],
        ['svc-router', version('router')],
        ['bare fdatasync of one WAL frame (this disk)', `p50 ${ms(d.fsync.p50)}, p99 ${ms(d.fsync.p99)} (bench/e2e/fsync-probe.ts, best of two measurements)`],
        ...(v.target('floor') === undefined ? [] : [[TARGET_NAMES.floor, version('floor')]]),
        ['load generator', `bench/e2e/load.ts, undici ${m.undici} dispatch, its own process`],
        ['load average (1/5/15 min)', `${m.loadStart.map((l) => l.toFixed(2)).join(' / ')} at start, ${m.loadEnd.map((l) => l.toFixed(2)).join(' / ')} at end`],
        ['run', `${d.quick ? 'quick (`--quick`)' : 'full'}, ${d.startedAt.toISOString()}, ${d.seconds.toFixed(0)} s`],
      ],
    ),
    '',
  ]
}

function methodSection(v: View): string[] {
  const p = v.data.plan
  const sim = (k: keyof typeof SIM_SETTINGS): string => {
    const s = SIM_SETTINGS[k]
    return `ttft ${s.ttftMs} ms, ${s.tokensPerS === 0 ? 'no pacing' : `${s.tokensPerS} tokens/s`}, ${s.completionTokens} completion tokens`
  }
  return [
    '## Method',
    '',
    `- Upstream: \`svc-router simulate-provider\`, three processes: *fast* (${sim('fast')}) for the request/response workloads, *paced* (${sim('paced')}) for time to first token, *slow* (${sim('slow')}) for the concurrent streams.`,
    '- Targets, all on 127.0.0.1 and all started by the run: **direct** to the simulator (the baseline); **nginx** (one worker, `proxy_pass` to an `upstream` with `keepalive 64`, HTTP/1.1, `Connection ""`, `proxy_buffering off`); **Portkey** (`@portkey-ai/gateway` Node server, `x-portkey-provider: openai` + `x-portkey-custom-host`); **svc-router** (`svc-router serve`, errors-only log, rate limit 100,000,000/min, 1,024 upstream connections so 500 streams can overlap).',
    ...(v.target('floor') === undefined
      ? []
      : [
          `- **${TARGET_NAMES.floor}** (bench/e2e/floor-relay.ts), in every workload but the 500 streams, beside the reference of the targets (the billed floor, next): the smallest relay on svc-router's own stack, uWebSockets.js in front and one undici \`Pool\` (1,024 keep-alive connections) behind, one process per simulator. It copies the request body out of uWS, dispatches it with the content type (on undici's first handler interface, as svc-router's attempt handler), and streams the answer back chunk by chunk as it arrives (corked writes; an answer with a Content-Length keeps it), with backpressure both ways (a slow client pauses the upstream read, a client that leaves aborts it). It does no routing, auth, rate limiting, trace or billing and logs nothing: its added latency is what Node, uWS and undici cost by themselves, and svc-router's added latency above it is svc-router's own work.`,
          `- **${TARGET_NAMES['floor-billed']}** (floor-relay.ts \`--bill\`), where requests are billed (every workload but the 500 streams): the floor plus only the work the spec and DESIGN.md require of every answer, each piece the cheapest way, and less than svc-router must do: the key looked up in a \`Map\` (no hashing), the request body parsed for its model, a hold on the account's balance, the answer parsed for its usage (a stream: asked for with \`stream_options.include_usage\`, read from the event that carries it, the provider's \`[DONE]\` held back), the cost priced in integer atto-USD, one row appended to a SQLite journal (WAL, \`synchronous=NORMAL\`, a unique request id, one transaction per turn of the loop) before the last byte, and the \`x_svc_trace\` spliced in (a stream: a trace event and \`[DONE]\`). No routing, rate limit, key policy, failover, telemetry, error envelopes or checks of the provider's events. Its WAL is checkpointed by SQLite itself inside a commit, on the event loop, with the checkpoint's fsyncs (svc-router moved those to a thread of its own): a reference for medians and CPU, not for tails.`,
          `- **${TARGET_NAMES['floor-billed-full']}** (\`floor-billed-full\`, floor-relay.ts \`--bill … --sync full\`): the same, with its journal's WAL flushed by an fdatasync on libuv's thread pool after each commit and before the answers it covers are released, group-committed (the transactions committed while a flush runs share the next one): the same durability as svc-router's default \`full\`, the cheapest correct way (floor-journal.ts). \`full\` is judged against it, \`normal\` against \`floor-billed\`.`,
          `- **${TARGET_NAMES['floor-billed-pg']}** (\`floor-billed-pg\`, floor-relay.ts \`--bill-pg\`): the same, appending its journal rows to a database of its own on the PostgreSQL the replicas use (same server, same machine), one INSERT of the batch per transaction (a prepared statement over unnested arrays), \`synchronous_commit on\`, one batch in flight: the reference of the replica rows (section 7).`,
          `- **${TARGET_NAMES['router-normal']}**: the same svc-router with \`store.synchronous: normal\` (charges committed to the WAL without the flush), in the latency and throughput workloads: \`full\` minus \`normal\` is what durability costs, judged against a thread-pool fdatasync of a charge's write measured on the same disk in the same run (bench/e2e/fsync-probe.ts: two WAL frames, 8,240 bytes, written on the loop, then \`fdatasync\` on the thread pool, timed to its callback, 2,000 times in a full run, before and after the workloads, the lower p50 kept); a bare synchronous fdatasync of one frame is measured beside it.`,
        ]),
    '- Request: `POST /v1/chat/completions` `{"model":…,"messages":[{"role":"user","content":"hi"}]}` (+ `"stream":true`), with `Authorization: Bearer …`.',
    `- Before any workload each target is warmed up, unmeasured: ${p.warm.ms / 1000} s of JSON requests on 16 connections and ${p.warm.streams} streams (JIT compilation would otherwise land in the first workload).`,
    `- Latency: ${int(p.latency.count)} requests one after another on one connection after ${int(p.latency.warmup)} warm-up requests, in ${p.medianRounds ?? p.rounds} interleaved rounds (every target, then every target again); its rows in the Targets are judged by the median over the rounds of each round's ratio (added p50 over the reference's added p50 in the same round), and the tables below show each target's round with the lowest p99. The first event is judged the same way over as many rounds of the streams workload. Throughput: ${p.connections} connections in a closed loop for ${p.throughput.durationMs / 1000} s after ${p.throughput.warmupMs / 1000} s of warm-up; only requests that start and end inside the window count.`,
    `- Open loop: a request every 1/rate s for ${p.open.durationMs / 1000} s whatever the answers do, latency counted from the *scheduled* start (coordinated omission would otherwise hide the tail); requests still open ${p.open.drainMs / 1000} s after the last send are counted as unfinished and enter the percentiles with the time they had waited so far. The generator's own lateness is reported as send lag.`,
    `- Streams: ${p.ttft.count} streamed requests, ${p.ttftConcurrency} at a time; time to first token = from sending to the first chunk that carries a content delta; first event = from sending to the first chunk of the answer's body; gaps = time between consecutive chunks after it. Concurrent streams: ${p.streams} started at once; a stream counts when it is 200, has content and ends with \`data: [DONE]\`.`,
    ...(p.rounds > 1
      ? [`- The machine is shared, and one burst of outside load in one target's turn would decide a comparison of tails: the open-loop workloads run ${p.rounds} times, interleaved (every target, then every target again), and each target's round with the lowest p99 is reported (a target that saturates or fails runs once); the latency and TTFT workloads run ${p.medianRounds ?? p.rounds} times, every round kept.`]
      : []),
    '- Added latency of a proxy = its percentile − direct\'s percentile in the same run. Percentiles are exact (every sample kept and sorted, nearest rank). RSS = VmRSS from /proc of the process and its children (nginx: master + worker), sampled every 100 ms; the peak per workload is reported. CPU per request = the proxy\'s utime + stime over the workload (10 ms ticks) ÷ requests sent, warm-up included.',
    `- Workloads run one after another and, within a workload, the targets back to back (direct, nginx, Portkey, svc-router, svc-router normal, the ${TARGET_NAMES.floor}, the ${TARGET_NAMES['floor-billed']}; each where it runs). All processes share the same 2 cores: the generator, the simulator and the proxy compete for CPU, so absolute figures are lower than on a bigger machine; the ratios are what this file is for.`,
    '',
  ]
}

function latencySection(v: View): string[] {
  const rows = v.rows('latency').map((t) => {
    const fail = v.failure('latency', t)
    if (fail !== null) return [TARGET_NAMES[t], fail, '', '', '', '', '', '', '', '', '']
    const isProxy = t !== 'direct'
    return [
      TARGET_NAMES[t],
      ...PERCENTILES.map((p) => ms(v.pct('latency', t, p))),
      formatRatio(v.pct('latency', t, 'p50'), v.pct('latency', 'direct', 'p50')),
      isProxy ? ms(v.added('latency', t, 'p50')) : '—',
      isProxy ? ms(v.added('latency', t, 'p99')) : '—',
      isProxy ? formatRatio(v.added('latency', t, 'p50'), v.added('latency', 'floor-billed', 'p50')) : '—',
      isProxy ? formatRatio(v.added('latency', t, 'p50'), v.added('latency', 'nginx', 'p50')) : '—',
      isProxy ? ms(v.cpuPerRequest('latency', t)) : '—',
    ]
  })
  return [
    '## 1. Latency at 1 connection',
    '',
    ...table(['', 'p50', 'p90', 'p99', 'p99.9', 'p50 vs direct', 'added p50', 'added p99', 'added p50 vs floor-billed', 'added p50 vs nginx', 'proxy CPU per request'], rows),
    '',
    `![Added latency per percentile](${SVG_PATH})`,
    '',
  ]
}

function throughputSection(v: View): string[] {
  const rows = v.rows('throughput').map((t) => {
    const fail = v.failure('throughput', t)
    if (fail !== null) return [TARGET_NAMES[t], fail, '', '', '', '', '', '', '', '', '']
    const r = v.rps('throughput', t)
    return [
      TARGET_NAMES[t],
      int(r),
      formatRatio(r, v.rps('throughput', 'direct')),
      formatRatio(r, v.rps('throughput', 'floor-billed')),
      formatRatio(r, v.rps('throughput', 'nginx')),
      formatRatio(r, v.rps('throughput', 'portkey')),
      ms(v.pct('throughput', t, 'p50')),
      ms(v.pct('throughput', t, 'p99')),
      errorsCell(v.load('throughput', t)),
      t === 'direct' ? '—' : ms(v.cpuPerRequest('throughput', t)),
      t === 'direct' ? '—' : mb(v.rss('throughput', t)),
    ]
  })
  return [
    `## 2. Throughput at ${v.data.plan.connections} connections`,
    '',
    'The generator, the simulator and the proxy share the 2 cores, so a proxy that needs more CPU per request also leaves less to the other two: the CPU column says where the throughput went.',
    '',
    ...table(['', 'req/s', 'vs direct', 'vs floor-billed', 'vs nginx', 'vs Portkey', 'p50', 'p99', 'errors', 'proxy CPU per request', 'peak RSS'], rows),
    '',
  ]
}

function openSection(v: View): string[] {
  const out = ['## 3. Open loop (fixed arrival rate)', '']
  for (const [w, rate] of [['open1000', 1000], ['open2000', 2000]] as const) {
    if (v.data.results[w] === undefined) continue
    const rows = v.rows(w).map((t) => {
      const fail = v.failure(w, t)
      if (fail !== null) return [TARGET_NAMES[t], fail, '', '', '', '', '', '', '', '']
      const isProxy = t !== 'direct'
      const r = v.load(w, t)!
      return [
        TARGET_NAMES[t],
        int(r.rps),
        ms(v.pct(w, t, 'p50')),
        ms(v.pct(w, t, 'p99')),
        ms(v.pct(w, t, 'p999')),
        isProxy ? ms(v.added(w, t, 'p50')) : '—',
        isProxy ? ms(v.added(w, t, 'p99')) : '—',
        isProxy ? formatRatio(v.added(w, t, 'p99'), v.added(w, 'floor-billed', 'p99')) : '—',
        errorsCell(r),
        `${ms(r.sendLag?.p50 ?? Number.NaN)} / ${ms(r.sendLag?.p99 ?? Number.NaN)}`,
      ]
    })
    out.push(`### ${rate.toLocaleString('en-US')} req/s`, '', ...table(['', 'completed req/s', 'p50', 'p99', 'p99.9', 'added p50', 'added p99', 'added p99 vs floor-billed', 'errors', 'generator send lag p50 / p99'], rows), '')
  }
  return out
}

function streamSection(v: View): string[] {
  const rows = v.rows('ttft').map((t) => {
    const fail = v.failure('ttft', t)
    if (fail !== null) return [TARGET_NAMES[t], fail, '', '', '', '', '', '', '', '', '']
    const isProxy = t !== 'direct'
    const gap = v.dist('ttft', t, 'gap')
    return [
      TARGET_NAMES[t],
      ms(v.pct('ttft', t, 'p50', 'ttft')),
      ms(v.pct('ttft', t, 'p99', 'ttft')),
      isProxy ? ms(v.added('ttft', t, 'p50', 'ttft')) : '—',
      isProxy ? ms(v.added('ttft', t, 'p99', 'ttft')) : '—',
      ms(v.pct('ttft', t, 'p50', 'firstEvent')),
      isProxy ? ms(v.added('ttft', t, 'p50', 'firstEvent')) : '—',
      isProxy ? formatRatio(v.added('ttft', t, 'p50', 'firstEvent'), v.added('ttft', 'floor-billed', 'p50', 'firstEvent')) : '—',
      ms(gap?.mean ?? Number.NaN),
      ms(gap?.p99 ?? Number.NaN),
      errorsCell(v.load('ttft', t)),
    ]
  })
  const s = SIM_SETTINGS.paced
  return [
    '## 4. Streaming: time to first token',
    '',
    `Simulator: first token after ${s.ttftMs} ms, then ${s.tokensPerS} tokens/s (a chunk every ${(1000 / s.tokensPerS).toFixed(1)} ms). Its first event (the role) goes out as soon as it has read the request, ${s.ttftMs} ms before the first token, from a timer whose lateness (up to a millisecond or two, with the load) varies by more than a proxy adds, so the target is judged on the time to the first event, which crosses the same path (the request in, the answer's head and one event back) without the timer.`,
    '',
    ...table(['', 'TTFT p50', 'TTFT p99', 'added TTFT p50', 'added TTFT p99', 'first event p50', 'added first event p50', 'added first event p50 vs floor-billed', 'mean gap between chunks', 'gap p99', 'errors'], rows),
    '',
  ]
}

function messagesSection(v: View): string[] {
  const m = v.data.messages
  if (m === undefined) return []
  const cases = [
    ['chat', 'chat → OpenAI provider', 'chat'],
    ['native', 'messages → Anthropic provider (native: bytes relayed)', 'messages'],
    ['translated', 'messages → OpenAI provider (translated both ways)', 'chat'],
  ] as const
  const rows = cases.map(([id, label, direct]) => {
    const r = m.router[id]
    const d = m.direct[direct]
    const added = (a: Distribution | null, b: Distribution | null, p: 'p50' | 'p99'): string => ms((a?.[p] ?? Number.NaN) - (b?.[p] ?? Number.NaN))
    const errors = r.latency.errors + r.ttft.errors
    return [
      label,
      ms(r.latency.latency?.p50 ?? Number.NaN),
      added(r.latency.latency, d.latency.latency, 'p50'),
      added(r.latency.latency, d.latency.latency, 'p99'),
      ms(r.ttft.ttft?.p50 ?? Number.NaN),
      added(r.ttft.ttft, d.ttft.ttft, 'p50'),
      String(errors),
    ]
  })
  return [
    '## 5b. `/v1/messages` beside chat',
    '',
    'A svc-router of its own (bench/e2e/messages.ts) whose registry lists each simulator twice, as an OpenAI provider and as a native Anthropic one; each case is compared with the same simulator reached directly on the upstream path the router uses. Latency: 1 connection; TTFT: streams as in section 4.',
    '',
    ...table(['', 'latency p50', 'added p50', 'added p99', 'TTFT p50', 'added TTFT p50', 'errors'], rows),
    '',
  ]
}

function multipartSection(v: View): string[] {
  const mp = v.data.multipart
  if (mp === undefined) return []
  const tp = mp.throughput
  const perRequest = (cpuMs: number, r: MultipartRun['throughput']['direct']): string => ms(cpuMs / Math.max(1, r.sent))
  const perMiB = (cpuMs: number, r: MultipartRun['throughput']['direct']): string =>
    mp.requestBytes === undefined ? 'n/a' : ms(cpuMs / Math.max(1e-9, (r.sent * mp.requestBytes) / 2 ** 20))
  const row = (label: string, r: MultipartRun['throughput']['direct'], simCpuMs: number, cpu: string): string[] => [
    label,
    r.rps.toFixed(1),
    `${r.mibPerS.toFixed(0)} MiB/s`,
    formatRatio(r.mibPerS, tp.direct.mibPerS),
    ms(r.latency?.p50 ?? Number.NaN),
    ms(r.latency?.p99 ?? Number.NaN),
    `${r.errors}${r.firstError === null ? '' : ` (${r.firstError.slice(0, 60)})`}`,
    perRequest(simCpuMs, r),
    cpu,
  ]
  const m = mp.memory
  const growth = m.peakRssMb - m.idleRssMb
  return [
    '## 5c. Multipart uploads (speech-to-text)',
    '',
    `A svc-router of its own (bench/e2e/multipart.ts) with one speech-to-text model on the fast simulator; an upload keeps its first ${mp.uploadMemoryMiB ?? 4} MiB in memory (\`server.upload_memory_bytes\`, the default) and the rest in its spool file (src/upstream/upload-spool.ts) for a failover. \`POST /v1/audio/transcriptions\`, \`model\` then a WAV file; every answer is checked (200, and the seconds of audio the provider counted equal those sent).`,
    '',
    `Throughput: ${mp.concurrency} clients in a closed loop for ${mp.durationMs / 1000} s, each sending a ${mp.fileMiB} MiB WAV; MiB/s of request body; direct, svc-router and the ${TARGET_NAMES.floor} (floor-relay.ts: the body streamed upstream as it comes, in pooled chunks, never read as a form) in turn${mp.rounds > 1 ? `, ${mp.rounds} rounds, each one's best round kept` : ''}. The target is the relay's CPU per MiB relayed (its CPU time over the run ÷ the MiB of every request sent), svc-router's against the floor relay's.`,
    '',
    ...table(['', 'req/s', 'upload', 'vs direct', 'p50', 'p99', 'errors', 'simulator CPU per request', 'relay CPU per request', 'relay CPU per MiB'], [
      [...row('direct', tp.direct, tp.simCpuMs.direct, '—'), '—'],
      [...row('svc-router', tp.router, tp.simCpuMs.router, perRequest(tp.routerUsage.cpuMs, tp.router)), perMiB(tp.routerUsage.cpuMs, tp.router)],
      ...(tp.floor === undefined || tp.floorUsage === undefined ? [] : [[...row(TARGET_NAMES.floor, tp.floor, tp.floorSimCpuMs ?? Number.NaN, perRequest(tp.floorUsage.cpuMs, tp.floor)), perMiB(tp.floorUsage.cpuMs, tp.floor)]]),
    ]),
    '',
    'The generator, the simulator (which parses every upload whole) and the relay share the 2 cores, as in section 2: direct already keeps them busy, so the relay\'s CPU per request is taken from the other two and the CPU columns say where the throughput went. CPU per request and per MiB count warm-up requests too.',
    '',
    `Memory (measured before the throughput runs): ${mp.uploads} uploads of ${mp.uploadMiB} MiB started at once through the router (each client streams one reused 1 MiB chunk), the router's VmRSS sampled every 20 ms, and its own gauge of what uploads hold in memory (\`svc_upload_buffered_bytes\`) read from \`/metrics\` as often.${mp.warmup === undefined ? '' : ` Idle is taken after a warm-up as wide as the round (${mp.warmup.uploads} concurrent ${mp.warmup.mib} MiB uploads, each within its memory bound): the chunk pool keeps up to 32 free 1 MiB slabs for the next uploads (src/upstream/chunk-pool.ts) and holds about 6 after two uploads, so an idle taken then counted the pool's growth to the size any burst of ${mp.uploads} uploads leaves it at as the round's (2026-11-29, one build: idle 122 → 153 MiB, growth +51 → +27 MiB; the gauge at 41.5–43.9 MiB in every run). What uploads hold may pass ${mp.uploads} × \`server.upload_memory_bytes\` by their spool files' write queues (up to 1 MiB each, README).`}`,
    '',
    ...table(['', 'this run'], [
      ['completed', `${m.load.ok} / ${mp.uploads} in ${m.load.seconds.toFixed(1)} s${m.load.errors > 0 ? `, ${m.load.errors} errors (${(m.load.firstError ?? '').slice(0, 60)})` : ''}`],
      [
        `router RSS idle (after a warm-up of ${mp.warmup === undefined ? 'two small uploads' : `${mp.warmup.uploads} concurrent ${mp.warmup.mib} MiB uploads`}) → peak`,
        `${m.idleRssMb.toFixed(0)} MiB → ${m.peakRssMb.toFixed(0)} MiB`,
      ],
      ['growth (peak − idle)', `${growth.toFixed(0)} MiB`],
      ...(m.peakBufferedMb === undefined ? [] : [['what uploads held in memory at most, by the router\'s gauge (`svc_upload_buffered_bytes`, memory)', `${m.peakBufferedMb.toFixed(1)} MiB`]]),
      [`vs ${mp.uploads} × the upload (${mp.uploads * mp.uploadMiB} MiB)`, formatRatio(growth, mp.uploads * mp.uploadMiB)],
      [`vs ${mp.uploads} × what an upload keeps in memory (${mp.uploads * (mp.uploadMemoryMiB ?? mp.replayBufferMiB)} MiB)`, formatRatio(growth, mp.uploads * (mp.uploadMemoryMiB ?? mp.replayBufferMiB))],
      ...(mp.memoryDouble === undefined
        ? []
        : [
            [
              `the same with ${mp.uploads} × ${mp.memoryDouble.uploadMiB} MiB (right after): idle → peak, growth`,
              `${mp.memoryDouble.idleRssMb.toFixed(0)} MiB → ${mp.memoryDouble.peakRssMb.toFixed(0)} MiB, +${(mp.memoryDouble.peakRssMb - mp.memoryDouble.idleRssMb).toFixed(0)} MiB${mp.memoryDouble.load.errors > 0 ? `, ${mp.memoryDouble.load.errors} errors` : ''}`,
            ],
          ]),
    ]),
    '',
  ]
}

function concurrentSection(v: View): string[] {
  const rows = v.rows('streams').map((t) => {
    const fail = v.failure('streams', t)
    if (fail !== null) return [TARGET_NAMES[t], fail, '', '', '', '', '', '']
    const r = v.load('streams', t)!
    return [
      TARGET_NAMES[t],
      `${r.ok} / 500`,
      errorsCell(r),
      `${r.seconds.toFixed(2)} s`,
      String(r.peakOpen),
      ms(r.ttft?.p50 ?? Number.NaN),
      ms(r.ttft?.p99 ?? Number.NaN),
      t === 'direct' ? '—' : mb(v.rss('streams', t)),
    ]
  })
  const s = SIM_SETTINGS.slow
  return [
    '## 5. 500 concurrent streams',
    '',
    `Simulator: ${s.completionTokens} tokens at ${s.tokensPerS} tokens/s after ${s.ttftMs} ms, so each stream lasts about ${((s.ttftMs + (s.completionTokens * 1000) / s.tokensPerS) / 1000).toFixed(1)} s and all 500 overlap.`,
    '',
    ...table(['', 'completed', 'errors', 'wall time', 'open at once (peak)', 'TTFT p50', 'TTFT p99', 'peak RSS'], rows),
    '',
  ]
}

function memorySection(v: View): string[] {
  const workloads: readonly WorkloadId[] = ['latency', 'throughput', 'open1000', 'open2000', 'ttft', 'streams']
  const rows = PROXIES.map((t) => [TARGET_NAMES[t], mb(v.target(t)?.idleRssMb ?? null), ...workloads.map((w) => mb(v.rss(w, t)))])
  const cpu = PROXIES.map((t) => [TARGET_NAMES[t], ...workloads.map((w) => ms(v.cpuPerRequest(w, t)))])
  return [
    '## 6. Memory and CPU per workload',
    '',
    'Peak RSS of the proxy (process and children):',
    '',
    ...table(['', 'idle, after start', 'latency', 'throughput', 'open 1k/s', 'open 2k/s', 'TTFT', '500 streams'], rows),
    '',
    'CPU time (user + system, from /proc) the proxy spent per request it served, warm-up included; for streams a request is a whole stream:',
    '',
    ...table(['', 'latency', 'throughput', 'open 1k/s', 'open 2k/s', 'TTFT', '500 streams'], cpu),
    '',
  ]
}

/**
 * What a partial run (--only/--targets) prints, as it writes no file: the Targets (a row whose workload did
 * not run says "not measured") and the sections of what ran, rendered as the full report renders them.
 */
export function partialMarkdown(data: RunData): string {
  const v = new View(data)
  const ran = (w: WorkloadId): boolean => data.results[w] !== undefined
  return [
    ...targetsSection(v),
    ...(ran('latency') ? latencySection(v) : []),
    ...stagesSection(v),
    ...(ran('throughput') ? throughputSection(v) : []),
    ...(ran('open1000') || ran('open2000') ? openSection(v) : []),
    ...(ran('ttft') ? streamSection(v) : []),
    ...messagesSection(v),
    ...multipartSection(v),
    ...(ran('streams') ? concurrentSection(v) : []),
    ...replicasSection(v),
  ].join('\n')
}

/** One replica 0 and 1 ms from PostgreSQL and Redis (replicas-rtt.ts), and what the proxy itself held. */
function rttTable(v: View): string[] {
  const rtt = v.data.rtt
  if (rtt === undefined || rtt.sides.length === 0) return []
  const rows = rtt.sides.map((side) => {
    const added = side.latency.map((r, i) => (r.load?.latency?.p50 ?? Number.NaN) - (side.direct[i]?.load?.latency?.p50 ?? Number.NaN))
    const m = side.throughput
    const cpu = m.usage === null || m.load === null || m.load.sent === 0 ? Number.NaN : m.usage.cpuMs / m.load.sent
    return [
      `${side.rttMs === 0 ? '0 ms' : ms(side.rttMs)} round trip`,
      `${ms(rttAdded(side))} (${added.map((x) => ms(x)).join(', ')})`,
      m.load === null ? `failed: ${m.error ?? '?'}` : int(m.load.rps),
      errorsCell(m.load),
      ms(cpu),
      side.held === null || side.rttMs === 0 ? 'none (relayed at once)' : `${ms(side.held.p50)} / ${ms(side.held.p99)} / ${ms(side.held.max)}`,
      side.ping === undefined ? 'not measured' : `${ms(linePing(side))} (${side.ping.map((d) => (d === null ? 'failed' : ms(d.p50))).join(', ')})`,
    ]
  })
  return [
    `A fleet's network (issue 45, bench/e2e/replicas-rtt.ts): one replica each, on a database and a Redis database of its own, reaching both through the bench's own TCP proxy (bench/e2e/delay-proxy.ts; this kernel has no netem), which holds every chunk a fixed time each way, timed by a thread of its own (Atomics.wait: Node's timers have 1 ms granularity) and set early by its own measured wake-up latency. At 0 ms the same proxy relays at once, so the two differ only by the wait. ${rtt.rounds} interleaved rounds, each: direct, then the replica's latency at 1 connection (added p50: the median of the rounds, each round's in brackets), then its throughput at ${rtt.connections} connections (the best round). Goal: at 1 ms the added p50 grows by no more than one round trip over 0 ms, and throughput does not fall. One round trip is the line's as a request meets it: after each latency run, ${int(rtt.pings ?? 0)} Redis PINGs one after another through that side's proxy from a process of their own (bench/e2e/line-ping.ts), whose p50 holds, beside the set delay, the wake-ups a round trip through the proxy makes (its clock thread's and event loop's, the server's, the client's), which a replica's commit pays the same way; the growth is set against the PINGs' p50 at 1 ms minus at 0 ms.`,
    '',
    ...table(['', 'added p50, 1 connection (median; each round)', `req/s, ${rtt.connections} connections`, 'errors', 'router CPU per request', 'proxy held each chunk p50 / p99 / max', 'line round trip (Redis PING) p50: median (each round)'], rows),
    '',
  ]
}

function replicasSection(v: View): string[] {
  const r = v.data.replicas
  const head = ['## 7. Replicas: PostgreSQL + Redis', '']
  if (r === undefined) {
    const rtt = rttTable(v)
    if (rtt.length > 0) return [...head, ...rtt]
    return v.data.replicasSkipped === undefined ? [] : [...head, `Not measured: ${v.data.replicasSkipped}.`, '']
  }
  const out = [
    ...head,
    `svc-router as replicas (README "Several replicas"): \`store.kind: postgres\` and Redis, on ${r.versions.postgres} and ${r.versions.redis} started by the run on 127.0.0.1 as the tests start them (test/helpers/postgres.ts, redis.ts): a fresh cluster with \`fsync\` and \`synchronous_commit\` on, \`shared_buffers\` 32 MB, on the same disk as the SQLite file; Redis persists nothing. Each router setup has a database of its own on that server and a Redis database of its own; the replicas config is the default (heartbeat 500 ms, pool of 10 connections per replica). A charge on PostgreSQL is durable when its transaction's commit returned (the WAL flushed), as SQLite's \`full\` is. **The machine's 2 cores are shared by the load generator, the simulator, PostgreSQL, Redis and the replicas**: a second replica has no core of its own, so 2 replicas cannot double the throughput here; what the row shows is that the shared store and Redis do not take it down.`,
    '',
  ]
  if (v.measured('router-pg') || v.data.results.latency?.['router-pg'] !== undefined) {
    const rows = (['router', 'router-pg', 'floor-billed-pg'] as const).flatMap((t) => {
      if (v.data.results.latency?.[t] === undefined && t !== 'router-pg') return []
      const fail = v.failure('latency', t)
      if (fail !== null) return [[TARGET_NAMES[t], fail, '', '', '', '', '']]
      const added = v.medianAdded('latency', t)
      const each = v.roundAddedAll('latency', t).map((x) => ms(x)).join(', ')
      return [[TARGET_NAMES[t], ms(v.pct('latency', t, 'p50')), ms(v.pct('latency', t, 'p99')), `${ms(added)} (${each})`, ms(v.added('latency', t, 'p99')), formatRatio(added, v.medianAdded('latency', 'floor-billed-pg')), ms(v.cpuPerRequest('latency', t))]]
    })
    out.push(
      `Latency at 1 connection (section 1's workload, the same rounds; target: one replica's added p50 ≤ 1.3× the ${TARGET_NAMES['floor-billed-pg']}'s, by the median of the rounds; p50 and p99 of the round with the lowest p99, added p50 the median with each round's in brackets):`,
      '',
      ...table(['', 'p50', 'p99', 'added p50 (median; each round)', 'added p99', 'added p50 vs floor-billed-pg', 'CPU per request'], rows),
      '',
    )
  }
  const tp = r.throughput
  if (tp !== undefined) {
    const one = tp.one.load?.rps ?? Number.NaN
    const row = (label: string, m: Measurement): string[] => {
      if (m.load === null) return [label, `failed: ${m.error ?? '?'}`, '', '', '', '', '', '']
      const cpu = m.usage === null || m.load.sent === 0 ? Number.NaN : m.usage.cpuMs / m.load.sent
      return [label, int(m.load.rps), formatRatio(m.load.rps, one), ms(m.load.latency?.p50 ?? Number.NaN), ms(m.load.latency?.p99 ?? Number.NaN), errorsCell(m.load), ms(cpu), mb(m.usage?.peakRssMb ?? null)]
    }
    const rows = [row('1 replica (`serve`)', tp.one), row('2 replicas behind one port (`serve --workers 2`)', tp.two)]
    if (tp.floorPg !== undefined) rows.push(row(`${TARGET_NAMES['floor-billed-pg']} (the reference; CPU: the relay's)`, tp.floorPg))
    const sqlite = v.data.results.throughput?.router
    if (sqlite !== undefined) rows.push(row(`${TARGET_NAMES.router}, SQLite (section 2)`, sqlite))
    out.push(
      `Throughput at ${tp.connections} connections (closed loop, ${tp.durationMs / 1000} s after ${v.data.plan.throughput.warmupMs / 1000} s of warm-up${tp.rounds > 1 ? `, ${tp.rounds} interleaved rounds, the better one kept` : ''}; CPU and RSS are the router processes' only, the supervisor's and every worker's):`,
      '',
      ...table(['', 'req/s', 'vs 1 replica', 'p50', 'p99', 'errors', 'router CPU per request', 'peak RSS'], rows),
      '',
    )
  }
  out.push(...rttTable(v))
  const charges = r.charges
  if (charges !== undefined && charges.length > 0) {
    const d = (x: Distribution | null, p: 'p50' | 'p99' | 'max', digits: number): string => (x === null ? 'n/a' : x[p].toFixed(digits))
    const rows = charges.map((c: ChargeRate) => [
      c.store === 'sqlite' ? 'SQLite (WAL, synchronous FULL)' : r.versions.postgres,
      String(c.inflight),
      int(c.perS),
      int(c.batches),
      `${d(c.batchSize, 'p50', 0)} / ${d(c.batchSize, 'max', 0)}`,
      `${d(c.commitMs, 'p50', 2)} / ${d(c.commitMs, 'p99', 2)} ms`,
      c.failed === 0 ? '0' : `${c.failed} (${(c.firstError ?? '').slice(0, 60)})`,
    ])
    out.push(
      'Charges per second the group commit sustains (bench/e2e/replicas.ts): the ChargeWriter straight on each store\'s ledger, in the run\'s own process, with a fixed number of charges in flight (each one settled again as soon as its commit returned), after half a second not counted. One batch commits at a time; each is one transaction (PostgreSQL: one prepared statement, svc_charge_batch, in autocommit: the account locks, the append and the roll-ups; before 2026-11-28, BEGIN, the account lock, the append and COMMIT pipelined in one round trip). At 1 in flight the commit is what one request alone waits for before its last byte. These charges are not leased: in a replica they also pay out of its budget lease, in the same statement.',
      '',
      ...table(['store', 'in flight', 'charges/s', 'transactions', 'batch size p50 / max', 'commit p50 / p99', 'failed'], rows),
      '',
    )
  }
  return out
}

function notesSection(v: View): string[] {
  const notes: string[] = []
  for (const t of TARGET_IDS) {
    const why = v.target(t)?.unavailable ?? null
    if (why !== null && why !== NOT_STARTED) notes.push(`- **${TARGET_NAMES[t]} was not measured:** ${why}`)
  }
  if (v.measured('portkey')) {
    notes.push(
      `- Portkey runs with \`@hono/node-server\` pinned to ${PORTKEY_HONO_OVERRIDE} (npm \`overrides\` in the scratch install): with the 1.19.x it resolves by default, every streamed answer fails with \`TypeError: immutable\` in its updateHeaders (Portkey-AI/gateway#1389, #1550).`,
    )
    const added = v.added('ttft', 'portkey', 'p50', 'ttft')
    if (Number.isFinite(added)) {
      notes.push(
        `- Portkey's added TTFT (${ms(added)} at p50) is mostly a fixed wait: its stream transform sleeps 25 ms (\`setTimeout(…, 25)\`) before passing on the first event of every OpenAI-style stream (build/start-server.js of the installed version). The simulator sends its first event (the role) at once and the first token ${SIM_SETTINGS.paced.ttftMs} ms later, so the first ${SIM_SETTINGS.paced.ttftMs} ms of that sleep overlap the wait for the token and the rest shows up as added TTFT.`,
      )
    }
  }
  if (v.measured('router')) {
    notes.push(
      '- svc-router bills every answer exactly: the last byte of a response waits until its charge is durably committed (group commit into SQLite, WAL with synchronous=FULL; DESIGN.md §4). Its latency therefore includes a disk commit that nginx and Portkey, which write nothing, do not pay.',
      '- 500 concurrent streams: the added time to first token is the first burst\'s. svc-router opens one upstream connection per stream, and the burst is the first time most of them are needed (the warm-up needs about twenty); a CPU profile of the burst puts about 100 ms in `connect` and the setup of new sockets. A second burst of 500 on the same router (2026-11-23, outside this run) had a time to first token of 200 ms at p50 against 205 ms direct.',
      '- What 500 concurrent streams cost in memory, and what this run does not show (2026-11-23, outside this run, RSS sampled every 20 ms): a fresh router, not warmed up, sits at 95–96 MB idle and 133–134 MB after its first burst of 500, of which the V8 heap grows by about 23 MB (the young generation reaches its 32 MB maximum, and the old one holds the streams). The first burst adds a transient of about 18 MB on top (peaks 149–152 MB) that is gone with `--no-concurrent-recompilation` (peak 130 MB): TurboFan compiling the hot path on its background threads, memory they return once done. The warm-up before this run\'s workloads compiles that code first. A cap on the young generation (`--max-semi-space-size=4`) would take 16 MB off the peak but costs 6.6 µs of scavenges per request at 64 connections against 2.8 µs (minor GC time over 5 s of the throughput workload), and was not taken. Until 2026-11-23 the routing index\'s worker thread ran from boot (10 MB); a registry of up to 250 offers is now re-sorted inline (src/routing/table.ts).',
      '- What that commit is, at 1 connection (strace of the router\'s main thread, 2026-11-23): each charge batch makes 10 system calls on the event loop, 6 `fcntl` locks and unlocks on the WAL index (SQLite\'s read-mark update, then the write lock) and 4 `pwrite` (a header and a page for each of the two WAL frames: the journal row and its unique request-id index). In `full` mode the `fdatasync` runs on the thread pool, which adds two thread wake-ups: on this VM an async `fdatasync` of one frame took 40–60 µs longer than the same call made synchronously (157–223 vs 116–165 µs at p50), and a dedicated thread woken by `Atomics.notify` measured no better (142–233 µs), so it was not built. A writer thread doing the transaction and a synchronous `fdatasync` was prototyped too (3 rounds of 3,000 sequential charges, reached by `postMessage` or woken by `Atomics.notify`): durable p50 253–316 µs against 196–226 µs today, while the event loop\'s share per charge fell from 69–77 to 14–19 µs. It is slower at 1 connection and was not built; what it frees on the loop could only pay under concurrency, measured next with 1, 8 and 64 clients settling charges in a loop through the same ChargeWriter: the thread cut the event loop\'s share per charge from 94–100 to 37–44 µs (1 client), 19 to 6 µs (8) and 10 to 2.4–3 µs (64), the p99 to durable at 8 clients from 2.15–2.18 ms to 0.59–0.80 ms, and raised charges/s at 64 clients from 47–48k to 63–74k, while its p50 stayed 40–55 µs slower at 1 and 8 clients. In the router the commit is about a tenth of the CPU per request at 64 connections, so the throughput gain would be a few percent; the tail at 8 concurrent requests is what it would buy.',
      '- An fsync that was on the event loop until 2026-11-23 (found with `perf sched` at 2,000 req/s, open loop): after a checkpoint that copies the whole WAL, the next write starts the file over and SQLite fsyncs its new header before the first frame (at any `synchronous` level but OFF). The upkeep thread checkpointed last, so that write was always the next charge batch, on the loop: 74 fsyncs in 10 s on the main thread, each waiting for the disk (inode write and cache flush). The upkeep now checkpoints first and then writes itself (its fold, or a no-op), so the restart and its fsync run on its thread while charges are held, and the loop\'s commits only append. The open-loop tail did not measurably move with it (4 interleaved runs each: p99 14–185 ms before, 7–79 ms after, both dominated by other noise). Two more waits of the loop on the store went with it: a read of the totals folded the charges past the watermark inline, and any write but a charge batch could meet the upkeep thread\'s write lock and sleep in SQLite\'s busy handler (45–54 ms each with 20,000 charges to fold); writes now wait for a running upkeep, and a long tail is folded by the thread.',
      '- libuv\'s io_uring (`UV_USE_IO_URING=1`, libuv 1.46 in Node 20.20) cut the cost of submitting an `fdatasync` from the loop from 17 µs to 2.6 µs at p50 (the thread pool\'s futex wake-up is gone), but its submission-queue polling thread spins: 855–1,108 µs of CPU per request at 1 connection, more than the whole router. Not usable here.',
    )
  }
  if (v.measured('floor-billed')) {
    notes.push(
      '- What `full` costs the CPU and throughput rows (2026-11-27, outside this run: five interleaved rounds of 5 s at 64 connections, CPU of every thread from `/proc`, the three targets started as this run starts them): svc-router `full` 54.9–59.4 µs per request (one slow round 73.9), `normal` 46.0–54.9 µs, the billed floor 34.8–38.6 µs; by round `full` 1.47–1.57× the billed floor (2.12× in the slow one) and `normal` 1.24–1.48×; throughput 0.69–0.75× and 0.71–0.89×. `full` − `normal` was 8.9 µs at the median: 3.5 µs on the thread pool and 5 µs on the main thread (the pool\'s wake-ups, the later turn that releases the answers, requests alive longer for the scavenger). One write + `fdatasync` costs about 85 µs of system time on this VM whatever its size, most of it two virtio notifications (`iowrite16`, an exit to the hypervisor each: the data write and the flush), spread over the ~22 charges a flush covers. The billed floor commits as `normal` does (Method), so it never pays this: at `full` the rows ask svc-router to do its routing, key policy, rate limit, failover, telemetry and trace in about 1.05× the billed floor\'s work plus the flush. Pacing the flushes (fewer, larger) would trade this CPU for latency under load; not done.',
      '- How far one run decides the 1-connection row (`normal`, added p50 against the billed floor\'s), over the full runs committed since the targets were restated (2026-11-26 17:21 to 2026-11-27 09:23, the same request path throughout): 1.24×, 1.49×, 1.65×, 1.67×, 1.53×, 1.00×, 2.07×, 1.70×, 1.25×, 1.23×; the billed floor\'s own added p50 106–156 µs. Three partial runs of the latency workload on 2026-11-27 (08:20–08:25) gave 1.58×, 1.74× and 1.47×. The first-event row moves as much: 0.97× at 07:09 and 1.47× at 09:23 the same day; six interleaved pairs of partial runs of the two builds (41060d0 and the 09:23 run\'s, whose changes touch the stream path only by a flag or two per event) gave 1.49×, 0.95×, 1.40×, 1.93×, 1.18×, 3.02× for the first and 1.11×, 1.80×, 1.05×, 1.11×, 1.24×, 1.38× for the second, and perf of the router over 8 paced streams 1,268 and 1,524 µs of main-thread CPU a stream against 1,298 and 1,240. The median is about 1.5×: the row is a real gap, about 60 µs of the router\'s own work at 1 connection, where every step runs with cold caches (the step-by-step note below), not only the noise of one run.',
      `- What the spec's own work costs, beyond this run (2026-11-23, the ${TARGET_NAMES['floor-billed']}): in seven rounds of the latency workload (three partial runs of two interleaved rounds, and the full run of 20:08), its added p50 was 1.39–1.99× the floor's, above the 1.3× the first target then allowed svc-router (a ratio to the floor), while svc-router (\`normal\`) measured 1.11–1.38× the billed floor in the same rounds. Without its SQLite append (a variant measured in three interleaved rounds, not kept) it still added 1.37–1.50× the floor's: the request's and the answer's parse, the trace and the turn of the loop that groups commits are enough. That target and the moonshot, as they were written, could not be met by any router that bills as the spec says, on this stack; measured against the billed floor, svc-router was within 1.11–1.38× of it, and issue 30 restated the targets against the billed floor (the Targets above). At 64 connections the same work costs little: the main thread's CPU per request in the steady state (per-thread \`/proc\` over 5 s after 4 s of warm-up, two runs each) was 41–43 µs for the floor, 54–62 µs for the billed floor and 74–94 µs for svc-router (\`full\`): what the throughput and CPU rows miss by is svc-router's own work, not the spec's.`,
    )
  }
  const mp = v.data.multipart
  if (mp !== undefined && mp.throughput.direct.rps > 0 && mp.throughput.router.rps > 0) {
    const tp = mp.throughput
    // Direct keeps both cores busy (generator + simulator): its CPU per upload is what 2 cores give per request.
    const whole = (2 * 1000) / tp.direct.rps
    const router = tp.routerUsage.cpuMs / Math.max(1, tp.router.sent)
    const simExtra = Math.max(0, tp.simCpuMs.router / Math.max(1, tp.router.sent) - tp.simCpuMs.direct / Math.max(1, tp.direct.sent))
    const bound = whole / (whole + router + simExtra)
    const floorPerUpload = tp.floor !== undefined && tp.floorUsage !== undefined ? tp.floorUsage.cpuMs / Math.max(1, tp.floor.sent) : Number.NaN
    const perMiBOf = (cpuMs: number, sent: number): number => (mp.requestBytes === undefined ? Number.NaN : cpuMs / Math.max(1e-9, (sent * mp.requestBytes) / 2 ** 20))
    const routerMiB = perMiBOf(tp.routerUsage.cpuMs, tp.router.sent)
    const floorMiB = tp.floor !== undefined && tp.floorUsage !== undefined ? perMiBOf(tp.floorUsage.cpuMs, tp.floor.sent) : Number.NaN
    notes.push(
      `- Why multipart misses 1.3× the floor relay's CPU per MiB: svc-router ${ms(routerMiB)} against ${ms(floorMiB)} per MiB, ${ms(router)} against ${ms(floorPerUpload)} per ${mp.fileMiB} MiB upload. Where the difference goes, by \`perf record -e cpu-clock -g\` of each main thread (2026-11-29, outside a full run, this workload at 8 clients, JIT frames named; per upload): the callback that takes the client's body chunks (uWS onData, all it runs but the sends) costs the router about 850 µs against the floor's 240. The copy out of uWS into pooled chunks is the same memcpy in both (80–90 µs); the rest is the router's own: the form's scan (about 240 µs in-process: busboy searched the whole first chunk of the body, up to 512 KiB, because a new file stream hands over its first data a tick later), the part watch over all ${mp.fileMiB} MiB (a native indexOf, about 35 µs), and the request path that runs once the scan has \`model\` (key, rate limit, routing, the hold, the attempt), mostly in V8's interpreter and baseline code and their inline-cache stubs (at a few hundred uploads a second each per-request function runs too rarely for the optimising compiler). The charge adds about 95 µs of thread-pool completions (its fdatasync at \`full\`) and 125 µs more in the loop's immediates (the charge batch); the floor relay bills nothing. The kernel's socket work is alike (the sends about 350 against 385 µs; the receive is in uWS's read, before the callback). Split by size in the same harness (interleaved, on the shared machine): at 1 MiB the router took 0.76–1.09 ms per upload against the floor's 0.35–0.46 (2 rounds), at 3 MiB 2.1–3.4 against 1.1–1.6 (9 rounds), so a good part of the gap grows with the bytes, not only with the request; not yet pinned down: the part watch is 35 µs of it, and the chunks the replay keeps for the whole request are colder to send than the floor's reused slab (the kernel's copy from them about 120 against 80 µs per upload). Cut on 2026-11-29: the scan now takes the file's head within the push of the chunk that holds it, and a transcription declared past 256 KiB stops at the audio's header (the scan of that first chunk 238 → 105 µs in-process; 4 interleaved rounds against the build before, CPU per MiB 0.89–1.04×, three of four lower); an upload whose Content-Length fits in \`server.upload_memory_bytes\` no longer opens a spool file it never writes (an open, an unlink and a close on the thread pool each time; futex calls per upload 17.7 → 3.9; 6 interleaved rounds of this workload against the build before, CPU per MiB 0.77–0.94×, median 0.90×; two interleaved pairs of \`--rows=multipart\` runs, 791 and 684 against 882 and 821 µs per MiB, 0.90× and 0.83×). All three together, two interleaved pairs of \`--rows=multipart\` runs against main's build (2026-11-29, 03:11–03:19, shared machine): 705 against 780 and 539 against 667 µs per MiB (0.90× and 0.81×), 1.69× and 1.30× the floor relay's of the same runs (main: 1.96× and 2.09×); the floor's own figure moved 319–416 µs between runs, so the row needs the quiet full run to be judged. Throughput against direct is no target: direct, the load generator and the simulator already keep both cores busy (${ms(whole)} of CPU per upload at ${tp.direct.rps.toFixed(0)} uploads/s), so with the router's CPU${simExtra > 0 ? ` and the simulator's ${ms(simExtra)} more` : ''} it could reach ${bound.toFixed(2)}× direct and measured ${formatRatio(tp.router.mibPerS, tp.direct.mibPerS)}. History: until 2026-11-23 every chunk of an upload was a fresh Buffer (external memory, a full mark-compact every 64 MiB: a quarter of the router's CPU); chunks now live in reused slabs (src/upstream/chunk-pool.ts). On 2026-11-27 busboy's teardown of a stopped scan stopped formatting two error stacks per upload, and the part watch stopped building a busboy per part head (about 50 µs an upload). What of the gap is work the spec asks for (2026-11-29, outside a run, \`perf record -e cpu-clock -g\` of every thread of each relay over 5 s of this workload at 8 clients after 8 s of warm-up, samples grouped by the functions on their stack): svc-router 659 against the floor relay\'s 438 µs per MiB, of which the charge and its durable commit 78 µs per MiB (12%: the store, the charge writer, the thread pool\'s fdatasync and the disk\'s doorbell; one commit per upload at a few hundred uploads a second), the part watch 21 and the form\'s scan 41. Without the charge, which the floor relay does not make, svc-router took 1.33× the floor relay\'s; without the charge and the part watch, 1.28×.`,
    )
  }
  if (v.measured('router') && v.measured('floor')) {
    notes.push(
      '- Why added time to first token is where svc-router misses most (2026-11-23, 1 connection, `normal`, timestamps taken along the request path by temporary probes, not kept in the code): from the request head to the return of undici\'s dispatch (the upstream write included) svc-router takes 51 µs at p50 when requests follow one another (the fast simulator), the floor relay 10 µs. A streamed request to the paced simulator runs the same path once every ~85 ms while the simulator and the load generator run on the same 2 cores, and every step of it is then 3–27× slower: 303 µs for svc-router against 78 µs for the floor (the JSON guard 7 → 28 µs, routing 2 → 14 µs, undici\'s dispatch and write 9 → 67 µs). The same guard on the same body costs 1.4 µs in a loop of its own: what the path pays is the cache misses of touching ~15 modules and their objects, not instructions, so time to first token follows how much code and memory the admission path touches more than how many operations it does. Splicing the usage member into a stream\'s body without decoding its keys took one step from 42 to 22 µs (cold); the rest is spread over the stages of the breakdown above.',
      '- Where svc-router\'s own time goes at 1 connection, step by step (2026-11-23, `normal`, temporary probes, p50 of 6,000 requests, not kept in the code): request head to undici\'s dispatch 21–28 µs; undici\'s dispatch and write 7–10 µs; the answer parsed (one `JSON.parse`) 6.5 µs and the charge priced and queued 3 µs; the group commit\'s turn of the loop 4–5 µs; the charge\'s SQLite transaction 38–48 µs; the promise hops back 3–5 µs; the trace built and spliced into the answer 11–16 µs; uWS\'s write of the answer 28–38 µs (the floor pays undici\'s and uWS\'s steps too). The transaction is the largest step: with an in-memory database it takes 23–27 µs, so about 16 µs are the WAL\'s locks and writes and the rest SQLite\'s own code, which costs 14 µs in a loop of its own. Measured and not kept: the journal\'s foreign key and CHECK constraints off saved 6–8 µs of it, and dropping the request-id index about 10 µs; the index is what makes a second charge of one request impossible, and the constraints are the last check on what reaches the ledger.',
      '- CPU per request in the steady state (the main thread\'s user and system time from `/proc`, after 20,000 or more unmeasured requests, 2026-11-23): at 1 connection svc-router (`normal`) spends 192 µs user and 93 µs system per request against 58 and 58 µs for the floor relay; at 64 connections 41 and 18 µs against 18 and 15 µs. The same code costs svc-router 4.7× more user time per request when requests come one at a time than when they come 64 at a time (the floor 3.2×): a request that arrives alone finds the caches cold, so latency at 1 connection follows how much code and memory a request touches. Pinning the router to a core of its own (the simulator and the load generator on the other) did not change it, nor did `--use-largepages=on` or a young generation four times larger.',
      '- Why `full` costs more than a bare fsync: in the router the `fdatasync` of a charge\'s two WAL frames takes 222–250 µs at p50 from its submission to its callback, while the same asynchronous call in a process of its own takes 145–150 µs (96–116 µs made synchronously) and 275 µs while a router serving one connection runs beside it. With the router pinned to one core and the simulator and the load generator to the other it fell to 167 µs. The durable commit\'s miss is the thread pool\'s two wake-ups on 2 shared cores, not SQLite.',
      '- Where the floor relay loses to nginx at 1 connection (`/proc` user and system time over 10,000 requests, 2026-11-23): both make the same system calls and the same 2 context switches per request; system time is 57–76 µs per request for the floor against 50–57 µs for nginx, user time 87–103 µs against 19 µs. The gap is user-space work in Node (V8, undici\'s dispatcher and llhttp, uWS\'s bindings), not the kernel; `perf` puts 27% of the floor\'s samples in the kernel\'s wake-up path (`_raw_spin_unlock_irqrestore`, `finish_task_switch`), which nginx pays as well.',
      '- Where the CPU gap to the billed floor is at 64 connections, by CPU time only (2026-11-26, outside this run: `perf record -e cpu-clock` of each main thread, 10 kHz, over 5 s of the throughput workload, JIT frames named by `--perf-basic-prof-only-functions`; the cpu-prof stage table above samples wall time, so a thread that waits for a core is charged to what it was running): svc-router (`full`) 66.9 µs per request, the billed floor 45.5 µs. By where the samples fell: JavaScript 14.6 against 7.5 µs, V8\'s runtime and builtins (inline caches, JSON, typed arrays, GC) 21.5 against 14.5, the kernel 22.4 against 18.3 (2.3 of it more context switches: the thread pool\'s `fdatasync` and V8\'s GC helpers), SQLite 3.1 against 1.6, libc 3.4 against 2.4. No symbol differs by more than 1.3 µs and the largest twenty make up under half of the gap: it is the breadth of the request path (about twenty functions of svc-router\'s on it, each 0.1–0.9 µs), not one slow step. Tried the same day and not kept: a young generation of 16–32 MiB semi-spaces (`--min/--max-semi-space-size`): GC in the wall-time profile fell from 5–10 to 2–3 µs per request, but the process\'s CPU per request in three interleaved rounds was not distinguishable (72.8–90.8 against 76.2–90.6 µs), and a Node flag would have to reach every way svc-router is started.',
      '- The second pass on that gap (2026-11-26, later the same day, each change measured against the one before with `bench/e2e/perf-cpu.ts`, interleaved): the charge path without async hops or closures per batch (the SQLite ledger\'s `recordCharges` returns the flush\'s promise, the charge writer\'s handlers are made once, delivery is a method: main thread 189–201 against 206–248 µs per request at 1 connection, 62.2/73.1 against 66.8/77.7 µs at 64); admission without closures on its synchronous path (21,584 against 22,065 bytes allocated per request; CPU within the noise); the fold and checkpoint every 1,024 charges instead of 256 (the upkeep thread 2.5 against 4.6–5.0 µs per request at 64 connections). After them, at 64 connections: svc-router\'s main thread 59.9 µs per request against the billed floor\'s 40.7 µs (1.47×), the whole process 68.5 against 42.6 µs (1.61×; the thread pool\'s `fdatasync` 3.8 µs, the upkeep 2.6 µs, V8\'s helpers 2.4 µs). What is left is spread as before: JavaScript 12.4 against 5.9 µs, V8\'s runtime 20.4 against 13.6, the kernel 19.1 against 16.4, SQLite 3.2 against 1.5 (the journal row\'s CHECKs, foreign key and unique index), no symbol of svc-router\'s own above 0.8 µs. Reaching 1.3× of the process\'s CPU would take its own work from about 26 to 13 µs per request: the request path as a whole (admission, routing, failover, the attempt, the trace, telemetry), not any one piece of it. Two full runs of this code the same evening (20:01, and 20:34, the one above) measured CPU per request 1.77× and 2.06× the billed floor\'s and throughput 0.71× and 0.60×, against 2.21× and 2.37×, 0.56× and 0.54× in the two runs of the code before these changes (17:07 and 18:07).',
      '- Why one replica on PostgreSQL + Redis adds about 3× the SQLite router\'s latency at 1 connection (2026-11-26, outside this run: `perf-cpu.ts --targets=router-pg`, strace of the main thread): a request makes two round trips the SQLite router does not, the account\'s rate window in Redis (one script, before the upstream request) and the charge\'s transaction in PostgreSQL (BEGIN, the account lock, the lease payment, the append and COMMIT written back to back, five writes with no wait between them, and one wait for the answer after the commit\'s flush). The commit alone takes 0.44 ms at p50 with nothing else running (the charges table below), more than the 1.5 × the SQLite router\'s added p50 the target allows for the whole request. On the router\'s main thread the replica spends 590–730 µs of CPU per request against 190 µs on SQLite: pg\'s client 27% of the samples, ioredis 13%, undici 15%, and V8\'s concurrent marking another 100 µs on its helper threads. Tried and not kept: the charge as one plpgsql function call that is its own transaction (one message instead of five): router CPU 635–695 against 648–733 µs, latency p50 not distinguishable, and the group commit slower at 64 and 256 charges in flight (43.7k and 52.8k against 48.3k and 62.9k charges/s); ioredis without auto-pipelining: p50 20–25 µs lower in 3 interleaved rounds, CPU −30 µs in two of them, throughput at 64 connections 4,131 against 4,176 req/s on average, so not taken. What would take the Redis round trip off the request is leasing slots of the account\'s rate window as budgets are leased (DESIGN.md §6), with the same one-by-one rule near the limit. Both were built on 2026-11-28 for issue #45, which decided them (the charge batch as one prepared statement; rate leases, `redis.rate_lease_size`): not measured yet, the machine was too loaded that day (load average 17 on 2 cores) for the comparison above to mean anything; the next full run\'s rows are the first figures.',
      '- What limited one replica at 64 connections (2026-11-26, later): the charge batch\'s transaction, one in flight at a time, took 6.2 ms on average for ~26 charges (svc_ledger_commit_seconds), and PostgreSQL\'s backends spent 170 µs of CPU per request, more than the router: the lease payment updated the same account, key and lease rows once per charge, each update a new version of the row the next had to find. It now pays each key\'s charges with one update of each row when its lease covers them (migration 4; the rest charge by charge as before): a batch of 26 leased charges on the store alone 3.5 → 1.3 ms, of 64 7.8 → 1.9 ms, and the replicas workload 5,084 → 7,874 req/s for 1 replica, 4,016 → 6,706 for 2, in an interleaved pair of partial runs. The same day the pipelined transaction was made to leave in one write instead of five (pg writes each statement on its own): router CPU per request at 1 connection about 470–670 → 420–540 µs in three interleaved rounds, latency unchanged.',
      '- The replica\'s Redis and lease functions (2026-11-27, outside this run): the rate-window takes of one event-loop turn now go to Redis as one script call per account, decided one by one in arrival order (about 16 requests per call at 64 connections, by Redis\'s INFO commandstats): the replicas workload for 1 replica measured 5,263 → 6,087 req/s on average over five interleaved rounds of partial runs (every round higher). svc_key_period, a LANGUAGE sql function PostgreSQL parsed and planned on every call (once per leased key of each batch and each lease taken), is PL/pgSQL since migration 5: 0.13 → 0.018 ms per call, a batch of 23 leased charges on the store alone 1.9 → 1.4 ms at p50. Per request at 64 connections before the latter (one replica, CPU from /proc): router 106–128 µs, PostgreSQL\'s backends 66–73 µs, Redis 11 µs, the simulator 35 µs.',
      '- What a batch of charges costs PostgreSQL, and what two in flight change (2026-11-29, outside a run: the store alone with one replica\'s leased charges on one key, `pg_stat_statements` with nested statements and `perf -g` of the backends; then the replica rows): a batch\'s cost in the backend is mostly per statement, not per charge. A batch of one leased charge took ~450 µs of backend CPU and each further charge ~14 µs more: every statement the functions run builds and tears down an executor, every one that writes a row parses and compiles each CHECK of that table again (PostgreSQL keeps no compiled constraint across statements; accounts and api_keys have six each), the `= ANY (array)` reads were planned afresh on every call (55 µs of planning in a batch of one), the journal\'s foreign key ran a trigger and a lookup per row, and the lease payment probed the journal once per charge. Migration 10 (store/postgres/charge-batch.ts) drops the foreign key (the writers append only for an account they found and locked; none is deleted), reads what is billed in one indexed statement, runs svc_key_period only when the period moved, takes the lease\'s share in one UPDATE, and keeps one generic plan per statement with sequential scans off: backend CPU per batch 461–521 → 352–451 µs for one charge and 31–35 → 24–29 µs per charge for 25 (three interleaved rounds, machine shared). The charge writer now keeps two batches in flight on PostgreSQL (one on SQLite): the second waits at the server for the first\'s account lock and starts when it is released, so a batch\'s round trip and the event loop\'s turn to read its answer leave the serial path; at 0 ms from the database this changed nothing measurable in partial runs (the server\'s own work per batch is the serial part), and the full run of 2026-11-29 03:24 measured the 1 ms row where it was (0.80× the 0 ms throughput): what limits a replica 1 ms away is then not the commit\'s round trip (it was the rate lease\'s renewal: next note). That run: one replica 0.49× the floor\'s throughput, added p50 2.57× (2.71× before). What is left for the replica rows: the floor appends one narrow row per charge in one INSERT (~8 µs of backend CPU per charge, ~100 µs per batch); svc-router\'s batch also pays the lease, and rolls up the account\'s spend, the key\'s period use, the day\'s usage and a chain provider\'s served, in the same transaction. Reaching 1.3× the floor\'s added p50 at one connection would take the commit a request waits for down to the journal row alone, with the roll-ups applied behind it by a cursor over the journal while each charge stays counted in its lease until rolled up: a change to how DESIGN.md §6 keeps totals exact, not made here.',
      '- What held a replica 1 ms from PostgreSQL and Redis, and what is left (2026-11-29, `--rows=rtt-throughput`, 3 interleaved rounds a build, nothing else running): the rate lease. A lease of 16 lasted 1.6 ms at 10,000 requests a second, and its renewal, one script call a round trip away, held every request that arrived meanwhile (`/metrics`: one script call per 15 admissions). Counted by a temporary probe, the budget lease\'s top-ups were not it: 77 in a whole run. With leases of 256 and no other change the 1 ms replica ran 9,173–10,252 req/s (8,581–8,826 before). A lease is now renewed in the background once half used (the call reports the use, keeps the unused slots leased and tops them up to the lease size, so a replica still never holds more than it), and the default size is 64: at 1 ms 9,617–10,010 req/s, at 0 ms 10,557–12,132 (10,622–10,768 before), the router\'s CPU per request at 0 ms 57.9 → 51.9 µs (a script call per 32 admissions instead of per 15). Renewing ahead with leases of 16 did not help (8,241–8,829: half a lease went faster than the call came back); four charge batches in flight instead of two did worse at both distances (0 ms 9,590–10,812, 1 ms 7,561–9,367). What is left of the 1 ms throughput row is the commit itself: at 64 connections a request took 5.3 ms at 0 ms and 6.4 ms at 1 ms (64 connections over the throughput), one round trip more, which the charge committed before the last byte requires (DESIGN.md §4). A closed loop of 64 connections hides a wait only when something is busy all the time, and at 0 ms nothing is (the machine ~20% idle, the router ~60% of a core): requests wait for their account\'s charge batches, which PostgreSQL runs one after another on the account\'s lock, so this row moves with the replica rows (the batch\'s cost in PostgreSQL, note above). The 1 ms latency row: at 1 connection a request no longer waits for a lease\'s renewal (one in 15 did), and the added p50 still grows by 1.06–1.11 ms where the proxy held each chunk 502–503 µs at p50 each way; the 50–100 µs more is not explained yet (every process on the path sleeps longer per request at 1 ms; what waking up costs on this VM was not measured).',
      '- Where a replica\'s own CPU goes beyond the SQLite router\'s, and what a lighter commit would buy (2026-11-29, outside this run, nothing else running): one replica\'s main thread took 68.6 µs a request at 64 connections against the SQLite router\'s 48.2 (`perf-cpu.ts --mode=throughput --targets=router-pg,router` with call stacks, each sample charged to the innermost JavaScript function). Per request: pg\'s arrayString 1.5 µs (a JavaScript array per column of the batch, then two regular expressions per element), 10% of the samples in inline-cache misses (under LeasedLedger.settle 2.1 µs: the leased charge was a spread copy of chargeOf\'s object with two more members, a shape of its own; recordCharges 1.4 µs), the pg socket\'s writes 1.7 µs, the kernel\'s scheduling 1.1 µs more (more sockets to wake for), undici\'s upstream writes 1.4 µs more on the same work. The batch\'s arrays are now written as PostgreSQL array literals in one pass and every charge has one shape: 60.8–65.0 against 68.8–79.1 µs a request (3 interleaved rounds). To see what the commit\'s work in PostgreSQL costs the replica rows, a build whose batch only appended the journal row and a pending row (nothing paid out of the lease, nothing rolled up: not exact, measurement only) ran one replica at 12,580–12,638 req/s against 11,215–11,652 with the whole batch, and 600–666 µs at p50 against 757–772 µs at 1 connection: even a commit as light as the floor\'s would leave one replica near 0.6× the floor\'s throughput and 2× its added p50. So the replica rows wait on the request path\'s CPU on the replica (65 µs a request against the billed floor\'s 34 µs on the same PostgreSQL) at least as much as on the batch: moving the roll-ups behind the commit (as SQLite already folds behind its journal) is not enough alone.',
      '- One charge batch in flight on PostgreSQL again (2026-11-29, outside this run, nothing else running, builds alternated): the second batch in flight (note above) was chosen while the rate lease\'s renewal still held requests 1 ms from the database. With that fixed, two in flight only halve each batch, and a batch\'s cost in PostgreSQL is mostly per batch (~450 µs of backend CPU for one charge, ~14 µs for each further one) while the replica\'s socket writes and wake-ups double with the batches. `--rows=rtt-throughput,rtt-p50`, two rounds a build: at 0 ms one in flight ran 11,417 and 11,546 req/s at 54.7 and 54.5 µs of router CPU a request, two 9,687 and 9,752 at 62.8 and 62.7 µs; at 1 ms one ran 9,401 and 9,640, two 9,751 and 7,947 (the 1 ms row\'s ratio falls because its 0 ms figure rose). `--rows=replica-throughput`, two rounds a build: one 11,815 and 12,362 req/s (0.57× and 0.60× `floor-billed-pg`), two 10,850 and 11,411 (0.57× and 0.55×). The replica rows still need the batch\'s cost at the server cut (the roll-ups behind the commit, note above) and the replica\'s own request path (previous note).',
      '- A leased batch in fewer statements (2026-11-29, outside this run, builds alternated; migration 11, src/store/postgres/charge-batch.ts): when this replica\'s leases cover a batch\'s keys with room to spare (the usual case), one statement locks the keys and leases and checks that, and the append\'s statement pays them and updates each account once; before, a PL/pgSQL loop per key locked the account a second time and updated the lease, the account and the key one by one, and the append updated the account again. `pg-batch.ts`, two pairs: a batch of one 365/370 against 390/410 µs of server CPU, of 16 555/570 against 585/595; `--rows=replica-throughput,replica-p50`, two pairs: added p50 752/772 against 796/816 µs, throughput 11,570/10,979 against 9,208/10,861 req/s. By pg_stat_statements the batch now runs 4 statements inside the function (254 µs in all, of which the append-and-pay statement 111, the check 21, the account locks 13, the billed read 3); the ~100 µs left between them is not the call itself (a PL/pgSQL function with the same 20 array arguments and an empty body costs 3–5 µs a call): it lies outside what pg_stat_statements times of each statement, most likely their cached plans\' checks and locks and PL/pgSQL\'s handing of the arrays to them (not measured apart). A `perf` of the server during a run of batches: 16% of its CPU in `iowrite16`, the virtual disk\'s doorbell at each WAL flush, which the billed floor pays as well; the rest flat (executor set-up, CHECK constraints parsed anew per statement: pg_strtok, CheckExprStillValid). Nor is it PL/pgSQL (2026-11-29, a variant not kept): the covered batch as one statement the client prepares (the account locks, the check of the leases and every update in one WITH, the function only when a lease does not cover) took, by `pg-batch.ts` in two pairs, 327 µs of server CPU for a batch of one in three rounds of four (553 in the fourth, the client\'s prepared statement planned afresh at each call) against 353–360, 487–493 for 16 against 533–573: about 30 µs. The rest is the statements\' own work, and most of it is not the roll-ups the spec\'s reads need: the billed floor doing them in its one statement (`pg-batch.ts`\'s third side: the append, the account\'s and the key\'s spend and the daily usage row, narrow tables without CHECK constraints, no leases) took 147 µs a batch of one against its bare INSERT\'s 87 and svc-router\'s 367 (3 rounds). Of svc-router\'s, its CHECK constraints are 50–60 µs (all dropped in a throwaway database: 307–333 against 367–387 µs, 2 rounds), the nine on columns a batch never writes (the account\'s id pattern, its funds, the key\'s settings) about 20 µs: migration 12 checks those nine with a trigger that fires only when one of their columns is written (builds alternated, 3 rounds: a batch of one 327–340 against 347–373 µs). The rest is the lease payment, the locks and the wider rows. Tried and reverted the same day: the all-leased batch as one statement inside the function after the account locks (migration 13, bbaf740), 13 µs less in `pg-batch.ts` (333–340 against 347–353) and nothing end to end in two pairs of `--rows=replica-throughput,replica-p50` runs.',
      '- The 1 ms latency row\'s yardstick (2026-11-29): the line\'s own round trip is now measured in the run, with Redis PINGs through the same proxies after each latency run (bench/e2e/line-ping.ts), and the row is judged against it (the PINGs at 1 ms minus at 0 ms). It is not where the 50–100 µs of the note above went: the line adds 1.007 ms a round trip (1.08 ms at p50 at 1 ms, 70–88 µs at 0 ms), 7 µs more than the set delay, in both runs that measured it. In the first (`--rows=rtt-p50` alone, 3 interleaved rounds, nothing else running) the replica\'s added p50 grew by 1.008 ms (1.93 ms against 926 µs, the 0 ms rounds 815–928 µs): one round trip. In this full run, 20 minutes later, it grew by 1.12 ms with every round alike (0 ms 876–916 µs, 1 ms 1.95–2.03 ms): 110 µs beyond the line, not explained yet (a second exchange on some requests would move the p50 only if it came on more than half of them; the commit is one exchange on the charge writer\'s connection).',
      '- Why this run\'s SQLite rows are lower than the run before it (2026-11-29 09:15 against 05:37): svc-router `full` took 58.2 µs a request against 47.2, and the billed floor with the same durability 38.9 against 36.4. The request path on SQLite did not change between the two (the commits between them touch PostgreSQL, Redis, the stream translators and the default routing\'s draws), and five interleaved `perf-cpu.ts --mode=throughput --targets=router` rounds of the two builds measured the same within noise right after this run: 49.4–57.3 µs a request (median 51.5) for this one and 49.8–54.3 (median 50.5) for the one before. On this shared VM the whole machine ran slower during this run (the billed floor\'s own throughput 23,867 against 25,638 req/s), and not evenly for every target: the ratios moved too (CPU `full` 1.30× then 1.50×), as the note on how far one run decides a row says; a change to the code shows only in builds measured side by side.',
      '- What the garbage collector kept at 64 connections (2026-11-27, outside this run: `--trace-gc-nvp` of the main thread over 10 s of the throughput workload): from the first full collection on (a forced atomic one too), 2.2–2.7 MB survived each scavenge instead of 0.4–0.5 MB, every request\'s objects were promoted, and the scavenges took 90–110 ms of every second instead of 35–45; the billed floor never switched. The cause was a Set that every attempt entered and left (the attempts under way, for the total timeout): V8 rehashes such a table every few dozen changes, the table it leaves points to its successor and keeps its entries, and once one is in the old generation the chain of them, and the requests they name, is reachable from garbage only a full collection sees as garbage. An array where each attempt knows its slot has no such chain: in seven interleaved rounds (a slow spell) CPU per request in all threads 111 → 104 µs, helper threads 17–23 → 14–16 µs, 8,505 → 8,852 req/s; on one replica the survivors per scavenge fell from ~2.1 to ~0.9 MB and the pauses from ~60 to ~30 ms a second. Set-and-delete per request on a long-lived Map or Set is the pattern to keep off the request path (the provider limiter kept its idle slots for the same reason).',
      '- How far one run decides a row: two full runs of one build 40 minutes apart (2026-11-23, 13:03 and 13:33, load 1.51 and 0.78 at start) gave the durable commit 2.16× then 1.17× a bare fsync, the open-loop p99 10.1× then 0.44× the floor\'s, the chunk gap p99 the floor\'s + 0.14 ms then + 0.67 ms, throughput 0.47× then 0.61× the floor, telemetry 1.27× then 0.97×. On this shared 2-core machine those rows flip between yes and no from run to run: a verdict there is one sample, and a change is only shown by several runs side by side (interleaved A/B runs of two builds, as the commits do). The multipart rows (0.66× both times, RSS +35 and +32 MiB) and the 1-connection latency (2.84× and 2.75×) held. The open loop at 2,000 req/s is the widest: in four interleaved pairs of partial runs of two builds that differ in nothing on its path (2026-11-23, after the full run of 18:44, whose svc-router p99 was 44 ms against the floor\'s 7.3 ms), svc-router\'s p99 measured 15–144 ms for one and 12–417 ms for the other, with its p50 at 1.2–1.9 ms throughout and the floor\'s p99 at 4–24 ms.',
      '- The request path\'s breadth, a third pass (2026-11-29, outside a run, on a machine shared with two other sessions, load average 3–6): `perf-cpu.ts --mode=throughput --sync=normal` with call stacks of every thread, each sample charged to the innermost JavaScript function above it. svc-router\'s main thread took 46.6–55 µs per request, and its store\'s upkeep thread 2.9–3.3 µs more, which the billed floor does not have (it checkpoints on its loop): the fold 1.4–1.5 µs (better-sqlite3 turning every charge into a ten-value array for JavaScript), the WAL checkpoint 1.1 µs. Kept, though too small to show in CPU per request: metrics\' label walk behind the last event\'s cell (a request\'s three events 65 → 30 ns in-process), and the upstream header list built at its final length (297 → 153 B a call in-process; by the heap sampling of `run.js --only=stages --targets=router`, five runs a side, 20,427–20,951 → 20,285–20,601 B per request, the upstream write stage 154 B less at the median). Tried and not kept: the fold summing the charges that pass its checks in SQL, one row per account, key, model and day (the other rows checked one by one as before; equal plans to the old code\'s over a random journal with 6% odd rows). It cut the fold by 15–35% per charge in-process, and its share of the upkeep thread\'s profile fell from 1.36–1.49 to 0.95–1.06 µs per request, but the thread\'s total stayed at 2.9–3.3 µs in six rounds a side (by `/proc` and by perf), so some of its time moved into SQLite frames that perf cannot walk. Note that the schema\'s `NOT GLOB \'*[^0-9]*\'` test of an amount costs SQLite about 0.8 µs a row, where `trim(amount, \'0123456789\') = \'\'` is much cheaper. Also not kept: the trace written as a string by hand (0.75 against 1.15 µs a trace, but 2,241 against 1,312 B, from the concatenations\' cons strings and their flattening); the trace member written straight into the answer\'s Buffer (232 B less, 0.1–0.3 µs more, because `Buffer.byteLength` and the write each cross into C++); the answer\'s header list at its length (249 → 185 B, no time saved). In four interleaved `perf-cpu` rounds at 1 connection, main\'s build took 178–188 µs per request and the two kept changes 180–193 µs, which cannot be told apart. One pair of `run.js --rows=cpu-normal,cpu-full,throughput-full` (main\'s build, then one with the kept changes and the fold) on the loaded machine gave `normal` 1.33× and 1.42×, `full` 1.32× and 1.27×, with the billed floor\'s own throughput 10–30% apart between the two: noise. What remains is spread as before: the trace\'s JSON.stringify 1.2 µs, the answer\'s JSON.parse and checks 1.7 µs, the journal insert with its system calls 3.4 µs, uWS\'s copies of the head 0.5 µs, and about twenty functions of 0.1–0.4 µs each.',
    )
  }
  if (v.measured('router-logged') && v.measured('router-quiet') && v.measured('router')) {
    const logged = v.added('latency', 'router-logged', 'p50')
    const quiet = v.added('latency', 'router-quiet', 'p50')
    const base = v.added('latency', 'router', 'p50')
    notes.push(
      `- How far to trust the cost of telemetry: the three \`full\` routers of the latency workload differ only in telemetry, and the one in between (metrics on, no access line written: the svc-router row) measured ${ms(base)} added at p50 beside ${ms(logged)} with both on and ${ms(quiet)} with both off. Separate processes of one build differ by about this much from run to run on this shared machine (1.07×, 0.92× and 1.27× in three runs of 2026-11-23), which is more than the 5% the target allows: its verdict is within the noise either way.`,
    )
  }
  const load = v.data.machine.loadStart[0] ?? 0
  if (load > 0.5) notes.push(`- The machine was not idle when the run started (1-minute load average ${load.toFixed(2)}): other work competed for the 2 cores, which widens tails for every target alike.`)
  return notes.length === 0 ? [] : ['## Notes', '', ...notes, '']
}

function microSection(root: string): string {
  const file = join(root, 'BENCHMARKS.md')
  if (existsSync(file)) {
    const text = readFileSync(file, 'utf8')
    const from = text.indexOf(START)
    const to = text.indexOf(END)
    if (from !== -1 && to > from) return text.slice(from, to + END.length)
  }
  return [START, '## Micro benchmarks (`npm run bench`)', '', 'Not run yet: `npm run bench` fills in this section.', END].join('\n')
}

function chart(v: View): string {
  const d = v.data
  const series = PROXIES.filter((t) => v.measured(t)).map((t) => ({
    name: TARGET_NAMES[t],
    color: COLORS[t],
    values: PERCENTILES.map((p) => v.added('latency', t, p)),
  }))
  return addedLatencySvg(
    'Added latency over direct, 1 connection',
    `${d.quick ? 'quick' : 'full'} run ${d.startedAt.toISOString().slice(0, 16).replace('T', ' ')} UTC, ${d.machine.cores} cores, Node ${d.machine.node}`,
    PERCENTILES.map((p) => PERCENTILE_LABEL[p]),
    series,
  )
}

/** Writes both files; returns their paths relative to the repository. */
export function writeReport(root: string, data: RunData): string[] {
  const v = new View(data)
  const md = [
    '# svc-router benchmarks',
    '',
    `End-to-end figures below are written by \`npm run bench:e2e\` (last run: ${data.startedAt.toISOString()}, ${data.quick ? 'quick' : 'full'}); the micro-benchmark section by \`npm run bench\`. Both are generated: change the code in \`bench/\`, not this file.`,
    '',
    ...targetsSection(v),
    ...machineSection(v),
    ...methodSection(v),
    ...latencySection(v),
    ...stagesSection(v),
    ...durableCommitSection(),
    ...throughputSection(v),
    ...openSection(v),
    ...streamSection(v),
    ...messagesSection(v),
    ...multipartSection(v),
    ...concurrentSection(v),
    ...memorySection(v),
    ...replicasSection(v),
    ...notesSection(v),
    microSection(root),
    '',
  ].join('\n')
  writeFileSync(join(root, 'BENCHMARKS.md'), md)
  writeFileSync(join(root, SVG_PATH), chart(v))
  return ['BENCHMARKS.md', SVG_PATH]
}
