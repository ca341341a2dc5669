/**
 * Async image jobs (DESIGN.md §4): what a job asked for, where it stands, and its result. The job runner
 * (src/jobs/runner.ts) writes a job when it accepts it (before the 202), when an attempt starts, and when the
 * engine's answer lands; a restart reads back every job that had not finished and resumes it. Results are
 * kept for a while after the job ended, then removed.
 */

export type JobStatus = 'pending' | 'processing' | 'completed' | 'failed'

/** What a job runs: the surface, and the request as the runner rebuilds it after a restart. */
export interface NewJob {
  /** UUID; also the request id its charge is recorded under (one charge per job, ever). */
  readonly id: string
  readonly accountId: string
  /** The sk- key that pays, null for an unauthenticated deployment. */
  readonly keyId: string | null
  /** 'images' (JSON generation) or 'image_edits' (multipart). */
  readonly surface: string
  readonly model: string
  /** The provider the job was assigned to when it was accepted (the 202's `provider_address`). */
  readonly providerAddress: string
  /** The request's parameters the runner needs to run it again (routing preferences, n, content type…), JSON. */
  readonly params: string
  /** The upstream body held in the store (JSON generations), null when it is a spooled file (`bodyPath`). */
  readonly body: Buffer | null
  readonly bodyPath: string | null
  readonly createdAt: number
}

export interface JobRecord extends NewJob {
  readonly status: JobStatus
  readonly updatedAt: number
  /** The provider that answered last (completed or failed), null before. */
  readonly provider: string | null
  /** A completed job's body (the sync endpoint's answer without the trace), JSON. */
  readonly result: string | null
  /** The x_svc_trace block of the run, JSON, null before it ended. */
  readonly trace: string | null
  readonly error: string | null
  /** The provider's id of the answer (SVC-Res-Key), '' when it gave none. */
  readonly resKey: string
  /** The replica that runs it, on a store shared by replicas (PostgreSQL); absent or null otherwise. */
  readonly owner?: string | null
}

/** How a job ended. */
export interface JobOutcome {
  readonly status: 'completed' | 'failed'
  readonly provider: string | null
  readonly result: string | null
  readonly trace: string | null
  readonly error: string | null
  readonly resKey: string
  readonly at: number
}

export interface JobStore {
  /** Stores a new pending job, durably (its 202 goes out after). */
  createJob(job: NewJob): Promise<void>
  getJob(id: string): Promise<JobRecord | null>
  /** A pending job's first attempt is under way. */
  markProcessing(id: string, at: number): Promise<void>
  /** Records how the job ended (once: a job that ended already is left as it is); false when it had. */
  finishJob(id: string, outcome: JobOutcome): Promise<boolean>
  /** Jobs not ended (pending or processing), oldest first: what a restart resumes. */
  unfinishedJobs(): Promise<JobRecord[]>
  /** Whether the ledger holds a charge recorded under the job's id (it was billed before a crash). */
  jobCharged(id: string): Promise<boolean>
  /** Removes jobs that ended before `endedBefore`; returns them (their spooled bodies are the caller's to delete). */
  removeEndedJobs(endedBefore: number): Promise<JobRecord[]>
  /**
   * Stores shared by replicas only (PostgreSQL; optional, SQLite has one process): takes over, for `replicaId`,
   * every unfinished job whose owner is null or not among `liveReplicaIds` (a replica that died), atomically:
   * of two replicas claiming at once each job goes to exactly one. Returns the jobs taken, oldest first. A job
   * created through a store opened with a replica id is owned by that replica from the start.
   */
  claimUnfinished?(replicaId: string, liveReplicaIds: readonly string[]): Promise<JobRecord[]>
}

/** A `jobs` row as both stores read it (the replica that owns it is PostgreSQL's alone). */
export interface JobRow {
  id: string
  account_id: string
  key_id: string | null
  surface: string
  model: string
  provider_address: string
  params: string
  body: Buffer | null
  body_path: string | null
  status: JobStatus
  provider: string | null
  result: string | null
  trace: string | null
  error: string | null
  res_key: string
  created_at: number
  updated_at: number
}

/** The record of a `jobs` row, without its owner. */
export function toJob(row: JobRow): JobRecord {
  return {
    id: row.id,
    accountId: row.account_id,
    keyId: row.key_id,
    surface: row.surface,
    model: row.model,
    providerAddress: row.provider_address,
    params: row.params,
    body: row.body,
    bodyPath: row.body_path,
    status: row.status,
    provider: row.provider,
    result: row.result,
    trace: row.trace,
    error: row.error,
    resKey: row.res_key,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  }
}
