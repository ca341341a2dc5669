/**
 * What other writers changed: the part of the Store (store.ts) that lets caches in this process drop exactly
 * what went stale when another process (the operator CLI, another replica) wrote to the same store. Writes
 * made through this handle are never reported: the code that made them updates its caches in the same step
 * (auth/credentials.ts).
 *
 * Charges are never reported: the router writes thousands a second, and each process keeps its own in-memory
 * books (billing/ledger.ts).
 */
import { log } from '../log.js'

/** One change by another writer; consumers drop what they hold of it and read it again when needed. */
export type StoreChange =
  /** An sk- or mk- key was created, changed, revoked or deleted. */
  | { readonly kind: 'key'; readonly accountId: string; readonly keyId: string }
  /** A deposit or credit changed the account's funds. */
  | { readonly kind: 'funds'; readonly accountId: string }
  /** The account was created or its settings (rate limit) changed. */
  | { readonly kind: 'account'; readonly accountId: string }
  /** Something may have changed that can no longer be told (e.g. the reader fell too far behind): drop everything. */
  | { readonly kind: 'unknown' }
// Jobs (async images, a later issue) will add their own kind here.

export type ChangeListener = (change: StoreChange) => void

export interface ChangeFeed {
  /**
   * Calls `listener` for each change another writer commits after this call, in commit order. Returns the
   * unsubscribe function.
   */
  subscribe(listener: ChangeListener): () => void
  /**
   * Resolves once every other process that serves from this store has applied every change written through
   * this handle, so that a write answered is in force everywhere (spec §3: revocation at once everywhere;
   * replicas: store/postgres/replicas.ts; SQLite: the operator CLI waits out the one server's poll, see
   * store/sqlite/changes.ts). Rejects when that cannot be known in time. Absent where no other process keeps a
   * cache that must hear it first.
   */
  settled?(): Promise<void>
  /**
   * A networked store's subscription takes effect once its listener is connected (PostgreSQL: LISTEN, then the
   * feed's position): resolves then. A change committed after ready() resolved is reported to every listener
   * subscribed before it. Absent where subscribe() takes effect at once (SQLite).
   */
  ready?(): Promise<void>
  /**
   * Stores shared by processes over a network (PostgreSQL, postgres/changes.ts) only; absent elsewhere.
   * `current`: true only while this process's listener is connected and caught up, so that every change
   * committed before the last confirmed read has been reported (a synchronous getter: no I/O). `lastSeq`: the
   * highest change seq this process has read; `ownSeq`: the highest seq of a change this handle wrote (a
   * replica that wrote a revocation can wait until the others' lastSeq reaches it).
   */
  readonly current?: boolean
  readonly lastSeq?: number
  readonly ownSeq?: number
  /** Reads what is committed now and resolves to lastSeq once every change before the call was reported. */
  catchUp?(): Promise<number>
}

/** A `changes` row as both stores read it. */
export interface ChangeRow {
  seq: number
  kind: 'account' | 'key' | 'funds'
  account_id: string
  key_id: string | null
}

/** The change a row records. */
export function toChange(row: ChangeRow): StoreChange {
  switch (row.kind) {
    case 'key':
      return { kind: 'key', accountId: row.account_id, keyId: row.key_id ?? '' }
    case 'funds':
      return { kind: 'funds', accountId: row.account_id }
    case 'account':
      return { kind: 'account', accountId: row.account_id }
  }
}

export const UNKNOWN_CHANGE: StoreChange = Object.freeze({ kind: 'unknown' })

/** The listener set every ChangeFeed implementation keeps; one listener that throws never stops the others. */
export class ChangeListeners {
  readonly #listeners = new Set<ChangeListener>()

  get size(): number {
    return this.#listeners.size
  }

  add(listener: ChangeListener): () => void {
    // A wrapper per subscription: the same function subscribed twice is two subscriptions.
    const entry: ChangeListener = (change) => listener(change)
    this.#listeners.add(entry)
    return () => {
      this.#listeners.delete(entry)
    }
  }

  emit(change: StoreChange): void {
    for (const listener of this.#listeners) {
      try {
        listener(change)
      } catch (err) {
        log.error('store change listener failed', { change: change.kind, err: String(err) })
      }
    }
  }

  clear(): void {
    this.#listeners.clear()
  }
}
