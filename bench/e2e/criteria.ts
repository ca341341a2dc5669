/**
 * The targets of issue 45, each against its like-for-like reference: what is judged against what, and what a
 * row needs measured. report.ts renders the verdicts in this order; run.ts's `--rows=<ids>` measures only
 * what the named rows need (e.g. `--rows=durable` runs the latency workload on svc-router `full` and `normal`
 * and direct). The limits are here, once.
 */
import type { TargetId } from './targets.js'

/** Workloads as run.ts and `--only` name them. */
export type WorkloadName = 'latency' | 'throughput' | 'open1000' | 'open2000' | 'ttft' | 'streams' | 'messages' | 'multipart' | 'replicas' | 'charges' | 'rtt' | 'stages'

export interface Criterion {
  readonly id: string
  /** The row's text in the Targets table. */
  readonly label: string
  readonly limit: number
  /** 'max': measured ≤ limit × reference; 'min': measured ≥ limit × reference. */
  readonly sense: 'max' | 'min'
  readonly workloads: readonly WorkloadName[]
  readonly targets: readonly TargetId[]
  /** A moonshot: reported, not a target the work is judged by. */
  readonly moonshot?: boolean
}

export const CRITERIA: readonly Criterion[] = [
  { id: 'cpu-full', label: 'CPU per request, 64 connections: `full` ≤ 1.3× `floor-billed full`', limit: 1.3, sense: 'max', workloads: ['throughput'], targets: ['router', 'floor-billed-full'] },
  { id: 'cpu-normal', label: 'CPU per request, 64 connections: `normal` ≤ 1.3× `floor-billed normal`', limit: 1.3, sense: 'max', workloads: ['throughput'], targets: ['router-normal', 'floor-billed'] },
  { id: 'throughput-full', label: 'throughput, 64 connections: `full` ≥ 0.85× `floor-billed full`', limit: 0.85, sense: 'min', workloads: ['throughput'], targets: ['router', 'floor-billed-full'] },
  { id: 'throughput-normal', label: 'throughput, 64 connections: `normal` ≥ 0.85× `floor-billed normal`', limit: 0.85, sense: 'min', workloads: ['throughput'], targets: ['router-normal', 'floor-billed'] },
  { id: 'replica-throughput', label: 'one replica on PostgreSQL + Redis: throughput, 64 connections ≥ 0.8× `floor-billed-pg`', limit: 0.8, sense: 'min', workloads: ['replicas'], targets: [] },
  { id: 'replica-p50', label: 'one replica on PostgreSQL + Redis: added p50, 1 connection ≤ 1.3× `floor-billed-pg` (median of the interleaved runs)', limit: 1.3, sense: 'max', workloads: ['latency'], targets: ['router-pg', 'floor-billed-pg'] },
  { id: 'p50', label: 'added p50, 1 connection: `normal` ≤ 1.15× `floor-billed` (median of the interleaved runs)', limit: 1.15, sense: 'max', workloads: ['latency'], targets: ['router-normal', 'floor-billed'] },
  { id: 'first-event', label: 'added first-event p50, 8 concurrent paced streams: `full` ≤ 1.2× `floor-billed` (median of the interleaved runs)', limit: 1.2, sense: 'max', workloads: ['ttft'], targets: ['router', 'floor-billed'] },
  { id: 'durable', label: 'durable commit at 1 connection: `full` − `normal` added p50 ≤ 1.5× a thread-pool fdatasync of a charge\'s write (median of the interleaved runs)', limit: 1.5, sense: 'max', workloads: ['latency'], targets: ['router', 'router-normal'] },
  { id: 'multipart', label: 'multipart: CPU per MiB relayed ≤ 1.3× the floor relay\'s, same uploads', limit: 1.3, sense: 'max', workloads: ['multipart'], targets: [] },
  { id: 'open-p99', label: 'added p99 at 2,000 req/s open loop ≤ 2× `floor-billed`\'s', limit: 2, sense: 'max', workloads: ['open2000'], targets: ['router', 'floor-billed'] },
  { id: 'telemetry', label: 'cost of telemetry (issue #13): added p50 with metrics and access log on ≤ 1.05× off (median of the interleaved runs)', limit: 1.05, sense: 'max', workloads: ['latency'], targets: ['router-logged', 'router-quiet'] },
  { id: 'streams-rss', label: '500 concurrent streams < 150 MB RSS', limit: 150, sense: 'max', workloads: ['streams'], targets: ['router'] },
  { id: 'rtt-p50', label: 'replicas 1 ms from PostgreSQL and Redis: added p50 grows by ≤ one round trip over 0 ms', limit: 1, sense: 'max', workloads: ['rtt'], targets: [] },
  { id: 'rtt-throughput', label: 'replicas 1 ms from PostgreSQL and Redis: throughput, 64 connections, does not fall (≥ 1.0× 0 ms)', limit: 1, sense: 'min', workloads: ['rtt'], targets: [] },
  { id: 'moonshot-throughput', label: 'moonshot: throughput, 64 connections: `full` ≥ 1.0× `floor-billed full`', limit: 1, sense: 'min', workloads: ['throughput'], targets: ['router', 'floor-billed-full'], moonshot: true },
  { id: 'moonshot-p50', label: 'moonshot: added p50, 1 connection: `full` ≤ 1.1× `floor-billed full` (median of the interleaved runs)', limit: 1.1, sense: 'max', workloads: ['latency'], targets: ['router', 'floor-billed-full'], moonshot: true },
]

export function criterion(id: string): Criterion {
  const c = CRITERIA.find((x) => x.id === id)
  if (c === undefined) throw new Error(`no target row ${id}`)
  return c
}

/**
 * What `--rows=a,b` asks to run: the union of the rows' workloads and targets (direct always, as every added
 * latency is over it). Throws on an unknown row, naming the known ones.
 */
export function rowsPlan(ids: readonly string[]): { workloads: WorkloadName[]; targets: TargetId[] } {
  const unknown = ids.filter((id) => !CRITERIA.some((c) => c.id === id))
  if (unknown.length > 0) throw new Error(`unknown --rows ${unknown.join(', ')}; known: ${CRITERIA.map((c) => c.id).join(', ')}`)
  const rows = ids.map(criterion)
  return {
    workloads: [...new Set(rows.flatMap((r) => r.workloads))],
    targets: [...new Set<TargetId>(['direct', ...rows.flatMap((r) => r.targets)])],
  }
}

/** Whether `measured` meets criterion `c` against `reference` (null: not decidable from these figures). */
export function meets(c: Criterion, measured: number, reference: number): boolean | null {
  if (!Number.isFinite(measured) || !Number.isFinite(reference)) return null
  return c.sense === 'max' ? measured <= c.limit * reference : measured >= c.limit * reference
}

/** The median of finite values (NaN when none). */
export function median(values: readonly number[]): number {
  const xs = values.filter(Number.isFinite).sort((a, b) => a - b)
  if (xs.length === 0) return Number.NaN
  const mid = xs.length >> 1
  return xs.length % 2 === 1 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2
}
