/**
 * Metric series whose per-request cost is a field update (issue #10). prom-client hashes the label object on
 * every inc/observe (a joined string, a lookup in a dictionary object, a histogram's float bound turned into a
 * property name): about a third of the router's telemetry CPU. Here each series is a cell, found through
 * nested Maps keyed by the label values themselves (no string is built), and prom-client sees the sums only
 * when /metrics is scraped.
 *
 * Bounded: a cell is the series prom-client would keep anyway, one per label tuple seen, and the label values
 * come from bounded sets (surfaces, HTTP statuses, configured providers, catalog models, outcome codes).
 */
import type { Counter, Metric, MetricValueWithName, Registry } from 'prom-client'

/** The map under `key` in `m`, made empty on first use. */
export function level<K, V>(m: Map<K, Map<unknown, V>>, key: K): Map<unknown, V> {
  let next = m.get(key)
  if (next === undefined) m.set(key, (next = new Map()))
  return next
}

export interface CounterCell {
  readonly labels: Readonly<Record<string, string>>
  /** Added since the last scrape. */
  pending: number
}

/** Cells of one prom-client Counter: `counter`'s collect() must call flush(). */
export class CounterCells {
  readonly #cells: CounterCell[] = []

  cell(labels: Readonly<Record<string, string>>): CounterCell {
    const c: CounterCell = { labels, pending: 0 }
    this.#cells.push(c)
    return c
  }

  /** Moves what was added since the last scrape into the counter (one label hash per series and scrape). */
  flush(counter: Counter): void {
    for (const c of this.#cells) {
      if (c.pending === 0) continue
      counter.inc(c.labels, c.pending)
      c.pending = 0
    }
  }
}

export interface HistogramCell {
  readonly labels: Readonly<Record<string, string>>
  /** Observations per bucket (not cumulative); the last one counts those above every bound. */
  readonly counts: Float64Array
  sum: number
  count: number
}

/**
 * A histogram registered in a prom-client Registry beside its own metrics, exposed exactly as prom-client's
 * Histogram would be (`_bucket` with `le`, cumulative, then `+Inf`, `_sum`, `_count`).
 */
export class SeriesHistogram {
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  readonly #cells: HistogramCell[] = []

  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Metric)
  }

  cell(labels: Readonly<Record<string, string>>): HistogramCell {
    const c: HistogramCell = { labels, counts: new Float64Array(this.buckets.length + 1), sum: 0, count: 0 }
    this.#cells.push(c)
    return c
  }

  observe(c: HistogramCell, value: number): void {
    const bounds = this.buckets
    let i = 0
    while (i < bounds.length && value > bounds[i]!) i++
    c.counts[i]!++
    c.sum += value
    c.count++
  }

  /** Registry.resetMetrics(). */
  reset(): void {
    for (const c of this.#cells) {
      c.counts.fill(0)
      c.sum = 0
      c.count = 0
    }
  }

  /** What the Registry reads of a metric (prom-client's MetricObjectWithValues, less the collect it never calls). */
  get(): Promise<{ name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: MetricValueWithName<string>[] }> {
    const values: MetricValueWithName<string>[] = []
    const bucket = `${this.name}_bucket`
    for (const c of this.#cells) {
      if (c.count === 0) continue
      let acc = 0
      for (let i = 0; i < this.buckets.length; i++) {
        acc += c.counts[i]!
        values.push({ metricName: bucket, labels: { le: this.buckets[i]!, ...c.labels }, value: acc })
      }
      values.push({ metricName: bucket, labels: { le: '+Inf', ...c.labels }, value: c.count })
      values.push({ metricName: `${this.name}_sum`, labels: c.labels, value: c.sum })
      values.push({ metricName: `${this.name}_count`, labels: c.labels, value: c.count })
    }
    return Promise.resolve({ name: this.name, help: this.help, type: 'histogram', aggregator: 'sum', values })
  }
}
