/** The ResponseStore on SQLite: the `responses` and `response_items` tables (migration 5). */
import { toResponse, type ResponseRow, type ResponseStore, type StoredResponse } from '../responses.js'
import { StoreConflictError } from '../store.js'
import type { SqliteConnection } from './connection.js'

/** The most ids looked up by one statement (SQLite's default limit of bound parameters is 32766). */
const IDS_PER_QUERY = 500

function prepareStatements(conn: SqliteConnection) {
  const db = conn.db
  return {
    insert: db.prepare(
      `INSERT INTO responses (id, account_id, model, created_at, expires_at, input, output, response)
       VALUES (@id, @accountId, @model, @createdAt, @expiresAt, @input, @output, @response)`,
    ),
    // A provider may reuse an item id: the newest response's item is the one a reference names.
    insertItem: db.prepare<[string, string, string, string]>(
      'INSERT OR REPLACE INTO response_items (account_id, id, response_id, item) VALUES (?, ?, ?, ?)',
    ),
    // Owner and expiry are part of the key of every read: another account's row is as absent as a missing one.
    byId: db.prepare<[string, string, number], ResponseRow>('SELECT * FROM responses WHERE id = ? AND account_id = ? AND expires_at > ?'),
    remove: db.prepare<[string, string, number]>('DELETE FROM responses WHERE id = ? AND account_id = ? AND expires_at > ?'),
    removeItems: db.prepare<[string]>('DELETE FROM response_items WHERE response_id = ?'),
    expired: db.prepare<[number, number], { id: string }>('SELECT id FROM responses WHERE expires_at <= ? LIMIT ?'),
    removeById: db.prepare<[string]>('DELETE FROM responses WHERE id = ?'),
  }
}

/** Expired responses deleted per transaction, so that a large backlog never holds the write lock for long. */
const EXPIRED_BATCH = 500

export class SqliteResponses implements ResponseStore {
  readonly #conn: SqliteConnection
  readonly #q: ReturnType<typeof prepareStatements>

  constructor(conn: SqliteConnection) {
    this.#conn = conn
    this.#q = prepareStatements(conn)
  }

  async putResponse(response: StoredResponse): Promise<void> {
    await this.#conn.writable()
    const q = this.#q
    try {
      this.#conn.db.transaction(() => {
        q.insert.run({
          id: response.id,
          accountId: response.accountId,
          model: response.model,
          createdAt: response.createdAt,
          expiresAt: response.expiresAt,
          input: response.input,
          output: response.output,
          response: response.response,
        })
        for (const { id, item } of response.items) q.insertItem.run(response.accountId, id, response.id, item)
      })()
    } catch (err) {
      if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new StoreConflictError(`response ${response.id} exists already`)
      throw err
    }
    return this.#conn.flushed(undefined)
  }

  async getResponse(accountId: string, id: string, now: number): Promise<StoredResponse | null> {
    this.#conn.check()
    const row = this.#q.byId.get(id, accountId, now)
    return row === undefined ? null : toResponse(row)
  }

  async getItems(accountId: string, ids: readonly string[], now: number): Promise<Map<string, string>> {
    this.#conn.check()
    const found = new Map<string, string>()
    const unique = [...new Set(ids)]
    for (let i = 0; i < unique.length; i += IDS_PER_QUERY) {
      const slice = unique.slice(i, i + IDS_PER_QUERY)
      const rows = this.#conn.db
        .prepare<unknown[], { id: string; item: string }>(
          `SELECT i.id, i.item FROM response_items i JOIN responses r ON r.id = i.response_id
           WHERE i.account_id = ? AND r.expires_at > ? AND i.id IN (${slice.map(() => '?').join(',')})`,
        )
        .all(accountId, now, ...slice)
      for (const row of rows) found.set(row.id, row.item)
    }
    return found
  }

  async deleteResponse(accountId: string, id: string, now: number): Promise<boolean> {
    await this.#conn.writable()
    const q = this.#q
    const removed = this.#conn.db.transaction(() => {
      const { changes } = q.remove.run(id, accountId, now)
      if (changes > 0) q.removeItems.run(id)
      return changes > 0
    })()
    return removed ? this.#conn.flushed(true) : false
  }

  async removeExpiredResponses(now: number): Promise<number> {
    let removed = 0
    const q = this.#q
    for (;;) {
      await this.#conn.writable()
      const batch = this.#conn.db.transaction(() => {
        const rows = q.expired.all(now, EXPIRED_BATCH)
        for (const { id } of rows) {
          q.removeItems.run(id)
          q.removeById.run(id)
        }
        return rows.length
      })()
      removed += batch
      if (batch < EXPIRED_BATCH) break
    }
    return removed === 0 ? 0 : this.#conn.flushed(removed)
  }
}
