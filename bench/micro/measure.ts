/**
 * What every micro benchmark shares: batching for operations shorter than the timer, a check that throws,
 * and the machine-readable summary that `bench/run.mjs` turns into the micro section of BENCHMARKS.md.
 */
import { appendFileSync } from 'node:fs'
import type { Bench, FnReturnedObject, Task } from 'tinybench'

/**
 * Runs `op` `count` times per sample and reports the mean per call. Sub-microsecond operations are
 * shorter than one performance.now() call (~30–60 ns here), so timing them one by one would mostly measure
 * the timer; tinybench's `overriddenDuration` is meant for exactly this.
 */
export function batched(count: number, op: () => unknown): () => FnReturnedObject {
  return function batch(): FnReturnedObject {
    const start = process.hrtime.bigint()
    for (let i = 0; i < count; i++) op()
    const total = Number(process.hrtime.bigint() - start) / 1e6
    return { overriddenDuration: total / count, overriddenIterationCost: total }
  }
}

/** Throws (and so fails the run) when a benchmarked function does not compute what it should. */
export function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`benchmark self-check failed: ${what}`)
}

/** Mean nanoseconds per operation of a finished task. */
export function nsPerOp(task: Task | undefined): number {
  const result = task?.result
  if (result === undefined || !('latency' in result)) return Number.NaN
  return result.latency.mean * 1e6
}

export interface SummaryRow {
  readonly task: string
  readonly nsPerOp: number
  readonly p50Ns: number
  readonly p99Ns: number
  readonly opsPerSec: number
  readonly rmePct: number
  readonly samples: number
}

/** One line of derived results: what the numbers mean (ratios, targets). */
export interface Finding {
  readonly label: string
  readonly value: string
  /** Set for a stated target: whether it was met. */
  readonly pass?: boolean
}

export interface BenchSummary {
  readonly name: string
  readonly rows: readonly SummaryRow[]
  readonly findings: readonly Finding[]
}

function rowOf(task: Task): SummaryRow {
  const result = task.result
  if (!('latency' in result)) return { task: task.name, nsPerOp: NaN, p50Ns: NaN, p99Ns: NaN, opsPerSec: NaN, rmePct: NaN, samples: 0 }
  return {
    task: task.name,
    nsPerOp: result.latency.mean * 1e6,
    p50Ns: result.latency.p50 * 1e6,
    p99Ns: result.latency.p99 * 1e6,
    opsPerSec: result.latency.mean > 0 ? 1000 / result.latency.mean : NaN,
    rmePct: result.latency.rme,
    samples: result.latency.samplesCount,
  }
}

/**
 * Appends the bench's results to the file named by SVC_BENCH_SUMMARY (set by bench/run.mjs), one JSON
 * document per line; without it (a bench run by hand) this does nothing.
 */
export function recordSummary(bench: Bench, findings: readonly Finding[] = []): void {
  for (const f of findings) console.log(`${f.pass === undefined ? '  ' : f.pass ? 'ok' : '!!'} ${f.label}: ${f.value}`)
  const file = process.env.SVC_BENCH_SUMMARY
  if (file === undefined || file === '') return
  const summary: BenchSummary = { name: bench.name ?? 'bench', rows: bench.tasks.map(rowOf), findings }
  appendFileSync(file, JSON.stringify(summary) + '\n')
}

/** `1234.5` → `1,235 ns`, `0.0123` → `0.012 ns`: three significant figures where it matters. */
export function formatNs(ns: number): string {
  if (!Number.isFinite(ns)) return 'n/a'
  if (ns >= 1e6) return `${(ns / 1e6).toFixed(2)} ms`
  if (ns >= 1e4) return `${(ns / 1e3).toFixed(1)} µs`
  if (ns >= 1e3) return `${(ns / 1e3).toFixed(2)} µs`
  return `${ns.toFixed(ns >= 100 ? 0 : 1)} ns`
}

export function ratio(a: number, b: number): string {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b === 0) return 'n/a'
  const r = a / b
  return `${r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`
}
