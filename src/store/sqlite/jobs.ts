/** The JobStore on SQLite: the `jobs` table (migration 4). */
import { toJob, type JobOutcome, type JobRecord, type JobRow, type JobStore, type NewJob } from '../jobs.js'
import type { SqliteConnection } from './connection.js'

function prepareStatements(conn: SqliteConnection) {
  const db = conn.db
  return {
    insert: db.prepare(
      `INSERT INTO jobs (id, account_id, key_id, surface, model, provider_address, params, body, body_path, status, created_at, updated_at)
       VALUES (@id, @accountId, @keyId, @surface, @model, @providerAddress, @params, @body, @bodyPath, 'pending', @createdAt, @createdAt)`,
    ),
    byId: db.prepare<[string], JobRow>('SELECT * FROM jobs WHERE id = ?'),
    processing: db.prepare<[number, string]>("UPDATE jobs SET status = 'processing', updated_at = ? WHERE id = ? AND status = 'pending'"),
    finish: db.prepare(
      `UPDATE jobs SET status = @status, provider = @provider, result = @result, trace = @trace, error = @error,
         res_key = @resKey, updated_at = @at, body = NULL
       WHERE id = @id AND status IN ('pending', 'processing')`,
    ),
    unfinished: db.prepare<[], JobRow>("SELECT * FROM jobs WHERE status IN ('pending', 'processing') ORDER BY created_at"),
    charged: db.prepare<[string], { one: number }>("SELECT 1 AS one FROM journal WHERE request_id = ? AND kind = 'charge'"),
    ended: db.prepare<[number], JobRow>(
      "SELECT id, account_id, key_id, surface, model, provider_address, '' AS params, NULL AS body, body_path, status, provider, NULL AS result, NULL AS trace, error, res_key, created_at, updated_at FROM jobs WHERE status IN ('completed', 'failed') AND updated_at < ?",
    ),
    remove: db.prepare<[string]>('DELETE FROM jobs WHERE id = ?'),
  }
}

export class SqliteJobs implements JobStore {
  readonly #conn: SqliteConnection
  readonly #q: ReturnType<typeof prepareStatements>

  constructor(conn: SqliteConnection) {
    this.#conn = conn
    this.#q = prepareStatements(conn)
  }

  async createJob(job: NewJob): Promise<void> {
    await this.#conn.writable()
    this.#q.insert.run(job)
    return this.#conn.flushed(undefined)
  }

  async getJob(id: string): Promise<JobRecord | null> {
    this.#conn.check()
    const row = this.#q.byId.get(id)
    return row === undefined ? null : toJob(row)
  }

  async markProcessing(id: string, at: number): Promise<void> {
    await this.#conn.writable()
    // Not waited for: a crash that loses it leaves the job pending, which a restart resumes all the same.
    this.#q.processing.run(at, id)
  }

  async finishJob(id: string, outcome: JobOutcome): Promise<boolean> {
    await this.#conn.writable()
    const { changes } = this.#q.finish.run({ id, ...outcome })
    return changes === 0 ? false : this.#conn.flushed(true)
  }

  async unfinishedJobs(): Promise<JobRecord[]> {
    this.#conn.check()
    return this.#q.unfinished.all().map(toJob)
  }

  async jobCharged(id: string): Promise<boolean> {
    this.#conn.check()
    return this.#q.charged.get(id) !== undefined
  }

  async removeEndedJobs(endedBefore: number): Promise<JobRecord[]> {
    await this.#conn.writable()
    const rows = this.#q.ended.all(endedBefore)
    if (rows.length === 0) return []
    const remove = this.#q.remove
    this.#conn.db.transaction(() => {
      for (const row of rows) remove.run(row.id)
    })()
    return this.#conn.flushed(rows.map(toJob))
  }
}
