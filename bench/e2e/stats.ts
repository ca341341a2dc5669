/**
 * Latency samples to percentiles. Every sample is kept and sorted (at most a few tens of thousands per
 * measurement), so percentiles are exact nearest-rank values, not histogram buckets.
 */

/** Milliseconds. `count` 0 means no sample (every field is then NaN). */
export interface Distribution {
  readonly count: number
  readonly mean: number
  readonly min: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly p999: number
  readonly max: number
}

export const PERCENTILES = ['p50', 'p90', 'p99', 'p999'] as const
export type Percentile = (typeof PERCENTILES)[number]
export const PERCENTILE_LABEL: Readonly<Record<Percentile, string>> = { p50: 'p50', p90: 'p90', p99: 'p99', p999: 'p99.9' }

/** A growable Float64Array: no boxing, no per-sample allocation while measuring. */
export class Samples {
  #data: Float64Array
  #length = 0

  constructor(capacity = 1024) {
    this.#data = new Float64Array(Math.max(16, capacity))
  }

  get length(): number {
    return this.#length
  }

  push(value: number): void {
    if (this.#length === this.#data.length) {
      const bigger = new Float64Array(this.#data.length * 2)
      bigger.set(this.#data)
      this.#data = bigger
    }
    this.#data[this.#length++] = value
  }

  distribution(): Distribution {
    return distributionOf(this.#data.subarray(0, this.#length))
  }
}

/** Nearest-rank percentile of sorted values: the smallest value with at least q of the samples at or below it. */
function rank(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!
}

export function distributionOf(values: Float64Array): Distribution {
  const sorted = Float64Array.from(values).sort()
  let sum = 0
  for (const v of sorted) sum += v
  const n = sorted.length
  return {
    count: n,
    mean: n === 0 ? Number.NaN : sum / n,
    min: n === 0 ? Number.NaN : sorted[0]!,
    p50: rank(sorted, 0.5),
    p90: rank(sorted, 0.9),
    p99: rank(sorted, 0.99),
    p999: rank(sorted, 0.999),
    max: n === 0 ? Number.NaN : sorted[n - 1]!,
  }
}

/** `0.0412` → `41 µs`, `1.234` → `1.23 ms`, `1234` → `1.23 s`. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return 'n/a'
  const sign = ms < 0 ? '−' : ''
  const a = Math.abs(ms)
  if (a >= 1000) return `${sign}${(a / 1000).toFixed(2)} s`
  if (a >= 100) return `${sign}${a.toFixed(0)} ms`
  if (a >= 10) return `${sign}${a.toFixed(1)} ms`
  if (a >= 1) return `${sign}${a.toFixed(2)} ms`
  return `${sign}${(a * 1000).toFixed(a >= 0.1 ? 0 : 1)} µs`
}

/** `a / b` as `1.23×`; `n/a` when b is not a positive number (a ratio to a negative "added" value means nothing). */
export function formatRatio(a: number, b: number): string {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b <= 0) return 'n/a'
  const r = a / b
  return `${r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`
}

/** Outcomes of a load's exchanges: successes, failures and the first failure's reason. */
export class Tally {
  ok = 0
  errors = 0
  firstError: string | null = null

  fail(reason: string): void {
    this.errors++
    this.firstError ??= reason
  }

  /** Counts the outcome of one exchange by its status; true when it was a success. */
  count(status: number): boolean {
    if (status >= 200 && status < 300) {
      this.ok++
      return true
    }
    this.fail(`HTTP ${status}`)
    return false
  }
}
