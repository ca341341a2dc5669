/** What one workload measured on one target: shared by the runs (run.ts, replicas.ts) and the report. */
import type { LoadResult } from './load.js'
import type { Usage } from './processes.js'

export interface Measurement {
  readonly load: LoadResult | null
  readonly error: string | null
  /** Peak RSS and CPU time of the target's process tree during the workload (null for direct). */
  readonly usage: Usage | null
  /** How many rounds the target ran (this is the best of them by p99). */
  readonly rounds: number
  /**
   * Every round, in order, where the workload is judged by the median of its interleaved rounds (issue 45: the
   * latency and first-event rows); absent elsewhere and in runs recorded before.
   */
  readonly runs?: readonly RoundRun[]
}

export interface RoundRun {
  readonly load: LoadResult | null
  readonly usage: Usage | null
}
