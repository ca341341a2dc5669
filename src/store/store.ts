/**
 * The durable state of the router behind one interface (DESIGN.md §1), split by concern so that an
 * implementation can provide one part at a time (SQLite in sqlite/, PostgreSQL in postgres/): accounts
 * (accounts.ts), `sk-`/`mk-` keys (keys.ts), the ledger (ledger.ts), async jobs (jobs.ts), stored responses
 * (responses.ts) and what other writers changed (changes.ts). SQLite is the embedded implementation (sqlite/); every implementation must pass the one
 * contract suite (test/store/contract.ts).
 *
 * Every method returns a Promise so that a networked store fits; callers on the hot path never await one on a
 * cache hit (src/auth/key-cache.ts). Money is bigint atto-USD everywhere in this interface; implementations
 * store it as exact integers (SQLite: TEXT, PostgreSQL: NUMERIC), never as floating point, and never let the
 * database add it up.
 */
import type { SettlementStore } from './settlement.js'
import type { AccountStore } from './accounts.js'
import type { ChangeFeed } from './changes.js'
import type { JobStore } from './jobs.js'
import type { KeyStore } from './keys.js'
import type { LeaseStore } from './leases.js'
import type { LedgerStore } from './ledger.js'
import type { ResponseStore } from './responses.js'

export * from './accounts.js'
export * from './changes.js'
export * from './jobs.js'
export * from './keys.js'
export * from './leases.js'
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
  /** What the router served and settled per chain provider (src/settlement/). */
  readonly settlement: SettlementStore
  /**
   * Budget leases, on a store that several replicas share (PostgreSQL): then the billing ledger takes budget in
   * leases (billing/leased-ledger.ts) instead of holding the whole of it in memory.
   */
  readonly leases?: LeaseStore
  /** This process's place among the replicas, on a shared store opened to serve (store/postgres/replicas.ts). */
  readonly replica?: ReplicaHandle
  close(): Promise<void>
}

/** What the rest of the router needs of the replica registry. */
export interface ReplicaHandle {
  readonly id: string
  /** Whether the key cache may answer from memory now (synchronous, no I/O). */
  readonly trusted: () => boolean
  /** Replicas alive now, this one included. */
  readonly live: number
  /** The ids of the replicas registered now (not yet removed as dead), this one included. */
  liveIds(): Promise<string[]>
  /** Calls `listener` when this replica learns it was presumed dead and its budget leases were released. */
  onLeasesLost(listener: () => void): () => void
}

/** A write that would break a uniqueness rule of the store (e.g. a second charge for one request). */
export class StoreConflictError extends Error {
  override name = 'StoreConflictError'
}

/** The store was written by a newer svc-router than this one: refuse rather than guess. */
export class SchemaTooNewError extends Error {
  override name = 'SchemaTooNewError'
}

/**
 * A networked store (PostgreSQL) could not be reached or did not answer within its deadline: down, frozen,
 * overloaded, or the connection broke mid-way. Nothing is known to have been written unless the caller can
 * tell otherwise (a COMMIT whose answer was lost may have committed); the store reconnects by itself.
 */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError'
}
