/**
 * The ResponseStore on PostgreSQL: the `responses` and `response_items` tables (migration 3), so a conversation
 * stored through one replica is continued, fetched or deleted through any. Every read names the account and
 * the time: another account's row, or an expired one, is as absent as a missing one.
 */
import { toResponse, type ResponseRow, type ResponseStore, type StoredResponse } from '../responses.js'
import { StoreConflictError } from '../store.js'
import { isUniqueViolation, type PgConnection } from './connection.js'

export const RESPONSES_MIGRATION = `
CREATE TABLE responses (
  id          text PRIMARY KEY,
  account_id  text NOT NULL,
  model       text NOT NULL,
  created_at  bigint NOT NULL,
  expires_at  bigint NOT NULL,
  input       text NOT NULL,
  output      text NOT NULL,
  response    text NOT NULL
);
CREATE INDEX responses_expiry ON responses (expires_at);
-- Output items by id, for item_reference inputs; deleted with their response. A provider may reuse an item
-- id: the newest response's item is the one a reference names.
CREATE TABLE response_items (
  account_id   text NOT NULL,
  id           text NOT NULL,
  response_id  text NOT NULL,
  item         text NOT NULL,
  PRIMARY KEY (account_id, id)
);
CREATE INDEX response_items_by_response ON response_items (response_id);
`

export const RESPONSE_SQL = {
  insert: `INSERT INTO responses (id, account_id, model, created_at, expires_at, input, output, response)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
  insertItems: `INSERT INTO response_items (account_id, id, response_id, item)
    SELECT $1, id, $2, item FROM unnest($3::text[], $4::text[]) AS i(id, item)
    ON CONFLICT (account_id, id) DO UPDATE SET response_id = EXCLUDED.response_id, item = EXCLUDED.item`,
  byId: 'SELECT id, account_id, model, created_at, expires_at, input, output, response FROM responses WHERE id = $1 AND account_id = $2 AND expires_at > $3',
  items: `SELECT i.id, i.item FROM response_items i JOIN responses r ON r.id = i.response_id
    WHERE i.account_id = $1 AND r.expires_at > $2 AND i.id = ANY($3::text[])`,
  /** The response and its items in one statement: a response deleted is never left with items, nor the reverse. */
  remove: `WITH gone AS (DELETE FROM responses WHERE id = $1 AND account_id = $2 AND expires_at > $3 RETURNING id),
    items AS (DELETE FROM response_items WHERE response_id IN (SELECT id FROM gone))
    SELECT count(*)::int AS n FROM gone`,
  /** A bounded batch of expired responses and their items, so a backlog never holds locks for long. */
  removeExpired: `WITH gone AS (
      DELETE FROM responses WHERE id IN (SELECT id FROM responses WHERE expires_at <= $1 LIMIT $2) RETURNING id
    ), items AS (DELETE FROM response_items WHERE response_id IN (SELECT id FROM gone))
    SELECT count(*)::int AS n FROM gone`,
} as const

/** Expired responses deleted per statement. */
const EXPIRED_BATCH = 500

export class PgResponses implements ResponseStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  async putResponse(r: StoredResponse): Promise<void> {
    // One item per id (the last given wins, as the later of two writes would): one row may be written once a statement.
    const items = new Map<string, string>()
    for (const { id, item } of r.items) items.set(id, item)
    try {
      await this.#conn.transaction(async (client) => {
        await client.query(RESPONSE_SQL.insert, [r.id, r.accountId, r.model, r.createdAt, r.expiresAt, r.input, r.output, r.response])
        if (items.size > 0) await client.query(RESPONSE_SQL.insertItems, [r.accountId, r.id, [...items.keys()], [...items.values()]])
      })
    } catch (err) {
      if (isUniqueViolation(err)) throw new StoreConflictError(`response ${r.id} exists already`)
      throw err
    }
  }

  async getResponse(accountId: string, id: string, now: number): Promise<StoredResponse | null> {
    const { rows } = await this.#conn.query<ResponseRow>(RESPONSE_SQL.byId, [id, accountId, now])
    return rows[0] === undefined ? null : toResponse(rows[0])
  }

  async getItems(accountId: string, ids: readonly string[], now: number): Promise<Map<string, string>> {
    const found = new Map<string, string>()
    if (ids.length === 0) return found
    const { rows } = await this.#conn.query<{ id: string; item: string }>(RESPONSE_SQL.items, [accountId, now, [...new Set(ids)]])
    for (const row of rows) found.set(row.id, row.item)
    return found
  }

  async deleteResponse(accountId: string, id: string, now: number): Promise<boolean> {
    const { rows } = await this.#conn.query<{ n: number }>(RESPONSE_SQL.remove, [id, accountId, now])
    return rows[0]!.n > 0
  }

  async removeExpiredResponses(now: number): Promise<number> {
    let removed = 0
    for (;;) {
      const { rows } = await this.#conn.query<{ n: number }>(RESPONSE_SQL.removeExpired, [now, EXPIRED_BATCH])
      removed += rows[0]!.n
      if (rows[0]!.n < EXPIRED_BATCH) return removed
    }
  }
}
