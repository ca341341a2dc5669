/**
 * Async image jobs (DESIGN.md §4): run through the same engine into a job sink; the ones a previous process left
 * unfinished are resumed by the listener part, just before it opens.
 */
import type { KeyAuthenticators } from '../auth/authenticate.js'
import type { RateGate } from '../auth/rate-limit.js'
import type { Books } from '../billing/books.js'
import type { Config } from '../config/index.js'
import { JobRunner } from '../jobs/runner.js'
import type { RoutingTable } from '../routing/table.js'
import type { Store } from '../store/store.js'
import type { EngineContext } from '../upstream/failover.js'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { part, type Part } from './part.js'

export interface JobParts {
  readonly store: Store
  readonly table: RoutingTable
  readonly engine: EngineContext
  readonly ledger: Books
  readonly auth: KeyAuthenticators
  readonly limiter: RateGate
}

export function jobsPart(config: Pick<Config, 'jobs' | 'store' | 'limits'>, parts: JobParts): Part<JobRunner> {
  const inMemory = basename(config.store.path) === ':memory:'
  const jobs = new JobRunner({
    store: parts.store,
    table: parts.table,
    engine: parts.engine,
    ledger: parts.ledger,
    authenticate: parts.auth.inference,
    resultTtlMs: config.jobs.result_ttl_ms,
    maxRunning: config.jobs.max_running,
    spoolDir: config.jobs.spool_dir !== '' ? config.jobs.spool_dir : inMemory ? join(tmpdir(), 'svc-router-jobs') : join(dirname(config.store.path), 'jobs'),
    ownsSpoolDir: !inMemory,
    limiter: parts.limiter,
    defaultRateLimit: config.limits.requests_per_minute,
  })
  // Jobs still running are detached (resumed at the next start); what they billed is written by the billing
  // part, which stops after this one.
  return part(jobs, () => jobs.close())
}
