/**
 * The JobStore on PostgreSQL: the `jobs` table. A job created through a store opened with a replica id is owned
 * by that replica; when a replica dies, another takes its unfinished jobs over with claimUnfinished().
 */
import { toJob as toUnownedJob, type JobOutcome, type JobRecord, type JobRow as StoredJobRow, type JobStore, type NewJob } from '../jobs.js'
import type { PgConnection } from './connection.js'

type JobRow = StoredJobRow & { owner: string | null }

const COLUMN_NAMES = ['id', 'account_id', 'key_id', 'surface', 'model', 'provider_address', 'params', 'body', 'body_path', 'status',
  'provider', 'result', 'trace', 'error', 'res_key', 'owner', 'created_at', 'updated_at']
const COLUMNS = COLUMN_NAMES.join(', ')

export const JOB_SQL = {
  insert: `INSERT INTO jobs (id, account_id, key_id, surface, model, provider_address, params, body, body_path, status,
      owner, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $11)`,
  byId: `SELECT ${COLUMNS} FROM jobs WHERE id = $1`,
  /** Only a pending job starts processing: an ended one never goes back. */
  processing: "UPDATE jobs SET status = 'processing', updated_at = $2 WHERE id = $1 AND status = 'pending'",
  /**
   * A job ends once: the status condition is checked on the row under its lock, so of two replicas finishing the
   * same job at once (one took it over from the other) exactly one writes its outcome.
   */
  finish: `UPDATE jobs SET status = $2, provider = $3, result = $4, trace = $5, error = $6, res_key = $7, updated_at = $8, body = NULL
    WHERE id = $1 AND status IN ('pending', 'processing')`,
  unfinished: `SELECT ${COLUMNS} FROM jobs WHERE status IN ('pending', 'processing') ORDER BY created_at, ord`,
  charged: "SELECT 1 FROM journal WHERE request_id = $1 AND kind = 'charge'",
  removeEnded: `DELETE FROM jobs WHERE status IN ('completed', 'failed') AND updated_at < $1
    RETURNING id, account_id, key_id, surface, model, provider_address, '' AS params, NULL::bytea AS body, body_path, status,
      provider, NULL AS result, NULL AS trace, error, res_key, owner, created_at, updated_at`,
  /**
   * Takes over every unfinished job with no live owner. The rows are locked as they are picked (FOR UPDATE)
   * and a row another claimer holds is skipped (SKIP LOCKED), so two replicas claiming at once split the jobs
   * between them and never both take one; the owner condition is re-checked on the locked row. A job that a
   * live replica owns is never taken, the caller's own included.
   */
  claim: `UPDATE jobs j SET owner = $1
    FROM (
      SELECT id FROM jobs
      WHERE status IN ('pending', 'processing') AND (owner IS NULL OR NOT (owner = ANY($2::text[])))
      ORDER BY created_at, ord
      FOR UPDATE SKIP LOCKED
    ) picked
    WHERE j.id = picked.id
    RETURNING ${COLUMN_NAMES.map((c) => 'j.' + c).join(', ')}, j.ord`,
} as const

function toJob(row: JobRow): JobRecord {
  return { ...toUnownedJob(row), owner: row.owner }
}

export class PgJobs implements JobStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  async createJob(job: NewJob): Promise<void> {
    await this.#conn.query(JOB_SQL.insert, [
      job.id,
      job.accountId,
      job.keyId,
      job.surface,
      job.model,
      job.providerAddress,
      job.params,
      job.body,
      job.bodyPath,
      this.#conn.options.replicaId,
      job.createdAt,
    ])
  }

  async getJob(id: string): Promise<JobRecord | null> {
    const { rows } = await this.#conn.query<JobRow>(JOB_SQL.byId, [id])
    return rows[0] === undefined ? null : toJob(rows[0])
  }

  async markProcessing(id: string, at: number): Promise<void> {
    await this.#conn.query(JOB_SQL.processing, [id, at])
  }

  async finishJob(id: string, o: JobOutcome): Promise<boolean> {
    const { rowCount } = await this.#conn.query(JOB_SQL.finish, [id, o.status, o.provider, o.result, o.trace, o.error, o.resKey, o.at])
    return rowCount === 1
  }

  async unfinishedJobs(): Promise<JobRecord[]> {
    const { rows } = await this.#conn.query<JobRow>(JOB_SQL.unfinished)
    return rows.map(toJob)
  }

  async jobCharged(id: string): Promise<boolean> {
    const { rowCount } = await this.#conn.query(JOB_SQL.charged, [id])
    return rowCount !== null && rowCount > 0
  }

  async removeEndedJobs(endedBefore: number): Promise<JobRecord[]> {
    const { rows } = await this.#conn.query<JobRow>(JOB_SQL.removeEnded, [endedBefore])
    return rows.map(toJob)
  }

  async claimUnfinished(replicaId: string, liveReplicaIds: readonly string[]): Promise<JobRecord[]> {
    const { rows } = await this.#conn.query<JobRow & { ord: number }>(JOB_SQL.claim, [replicaId, [...liveReplicaIds]])
    rows.sort((a, b) => a.created_at - b.created_at || a.ord - b.ord)
    return rows.map(toJob)
  }
}
