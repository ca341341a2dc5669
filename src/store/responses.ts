/**
 * Stored conversation state of the Responses surface (issue 32, `POST /v1/responses` with `store`): what a
 * later request continues from (`previous_response_id`, `item_reference`) and what `GET /v1/responses/{id}`
 * answers. A response belongs to one account: every read and delete names the account, and another account's
 * response is answered exactly as an unknown one (null / false). A response is kept until `expiresAt`; expired
 * ones are never returned, and removeExpired() deletes them.
 *
 * Records are self-contained (one read resolves a continuation, on any replica): `input` holds the whole
 * history the response was made from, with the previous responses' items already resolved. The items are
 * JSON text, as the surface wrote them; the store never looks inside them.
 */

/** One stored response. Times are epoch milliseconds. */
export interface StoredResponse {
  /** `resp_…`, minted by the router; unique. */
  readonly id: string
  readonly accountId: string
  readonly model: string
  readonly createdAt: number
  readonly expiresAt: number
  /** JSON array: the input items the response answered, history included (instructions are not items). */
  readonly input: string
  /** JSON array: the response's output items. */
  readonly output: string
  /** The response object as the client received it (x_svc_trace included), JSON: what GET answers. */
  readonly response: string
  /**
   * The output items by their `id` (JSON text each), for `item_reference` inputs of later requests. An id seen
   * again within the account (a provider that reuses ids) names the newest item.
   */
  readonly items: ReadonlyArray<{ readonly id: string; readonly item: string }>
}

export interface ResponseStore {
  /** Stores a response durably; a second put of one id is refused (StoreConflictError). */
  putResponse(response: StoredResponse): Promise<void>
  /**
   * The account's response `id`, or null when it is unknown, another account's or expired at `now`. Its
   * `items` are not read back (an empty array): getItems() finds items by id.
   */
  getResponse(accountId: string, id: string, now: number): Promise<StoredResponse | null>
  /**
   * The account's stored output items of these ids that have not expired at `now`, as item id → item JSON
   * (ids not found are absent from the map).
   */
  getItems(accountId: string, ids: readonly string[], now: number): Promise<Map<string, string>>
  /** Deletes the account's response `id` and its items; false when there was none (unknown, another account's or expired). */
  deleteResponse(accountId: string, id: string, now: number): Promise<boolean>
  /** Deletes the responses (and their items) that expired at or before `now`; returns how many. */
  removeExpiredResponses(now: number): Promise<number>
}

/** A `responses` row as both stores read it. */
export interface ResponseRow {
  id: string
  account_id: string
  model: string
  created_at: number
  expires_at: number
  input: string
  output: string
  response: string
}

/** The stored response of a `responses` row, its items not yet read. */
export function toResponse(row: ResponseRow): StoredResponse {
  return {
    id: row.id,
    accountId: row.account_id,
    model: row.model,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    input: row.input,
    output: row.output,
    response: row.response,
    items: [],
  }
}
