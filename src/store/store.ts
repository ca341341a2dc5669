/**
 * The durable state of the router behind one interface (DESIGN.md §1), split by concern so that an
 * implementation can provide one part at a time (the PostgreSQL store of a later issue): accounts
 * (accounts.ts), `sk-`/`mk-` keys (keys.ts), the ledger (ledger.ts), async jobs (jobs.ts), stored responses
 * (responses.ts) and what other writers changed (changes.ts). SQLite is the embedded implementation (sqlite/); every implementation must pass the one
 * contract suite (test/store/contract.ts).
 *
 * Every method returns a Promise so that a networked store fits; callers on the hot path never await one on a
 * cache hit (src/auth/key-cache.ts). Money is bigint atto-USD everywhere in this interface; implementations
 * store it as exact integers (SQLite: TEXT, PostgreSQL: NUMERIC), never as floating point, and never let the
 * database add it up.
 */
import type { AccountStore } from './accounts.js'
import type { ChangeFeed } from './changes.js'
import type { JobStore } from './jobs.js'
import type { KeyStore } from './keys.js'
import type { LedgerStore } from './ledger.js'
import type { ResponseStore } from './responses.js'

export * from './accounts.js'
export * from './changes.js'
export * from './jobs.js'
export * from './keys.js'
export * from './ledger.js'
export * from './responses.js'

export interface Store {
  readonly accounts: AccountStore
  readonly keys: KeyStore
  readonly ledger: LedgerStore
  /** Changes committed by other writers, for the caches of this process. */
  readonly changes: ChangeFeed
  /** Async image jobs (DESIGN.md §4: stored, resumed after a restart, billed once). */
  readonly jobs: JobStore
  /** Stored Responses-API conversation state (issue 32: `store`, `previous_response_id`), kept a configured time. */
  readonly responses: ResponseStore
  close(): Promise<void>
}

/** A write that would break a uniqueness rule of the store (e.g. a second charge for one request). */
export class StoreConflictError extends Error {
  override name = 'StoreConflictError'
}

/** The store was written by a newer svc-router than this one: refuse rather than guess. */
export class SchemaTooNewError extends Error {
  override name = 'SchemaTooNewError'
}
