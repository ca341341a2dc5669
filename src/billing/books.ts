/**
 * What admission, the job runner and the account endpoints ask of the billing ledger, whichever keeps the
 * books: one process alone on its store (ledger.ts: the whole budget in memory) or a replica among several
 * (leased-ledger.ts: slices of it leased from PostgreSQL). compose/table.ts picks one.
 */
import type { Principal } from '../auth/principal.js'
import type { ResetPeriod } from '../store/store.js'
import { FreeBudget, type Budget } from './budget.js'

export interface Books {
  /** Requests waiting for room in a budget. */
  readonly waiting: number
  /** null when the principal's request can be held at once; otherwise a Promise that resolves once it can. */
  prepare(principal: Principal): Promise<void> | null
  /** A request's budget, empty until its first hold. */
  open(principal: Principal, requestId: string): Budget
  /** The key was revoked: its requests waiting for room, and any later hold, are refused with 401. */
  keyRevoked(keyId: string): void
  /** The key's terms changed (credit limit, reset period): budget taken under the old ones is not used for new holds. */
  keyChanged?(keyId: string): void
  /**
   * The key's credit limit is now `creditLimit` (changed here or by another process): its requests waiting for
   * room, and later holds of requests already admitted (a failover's re-pricing), are held against it.
   */
  keyLimitChanged?(keyId: string, creditLimit: bigint | null): void
  /** Whether a book of the key is kept here (keyRevoked has something to mark). */
  hasKey(keyId: string): boolean
  /**
   * What this process's requests in flight hold of the account (alone on its store: the funds endpoint's
   * `reserved`; among replicas the store reports every replica's leases instead: LedgerStore.totalsWithLeases).
   */
  reserved(accountId: string): bigint
  /** The key's spend in its current period as the books know it, or null: then the store's figure is exact. */
  used(keyId: string, period: ResetPeriod): bigint | null
  /** Re-reads what another process changed (a deposit, or anything: `refresh`). */
  refresh(): Promise<void>
  refreshAccount(accountId: string): Promise<void>
}

/** The budget of a request of `principal`: its key's reservation in the ledger, or nothing for no key. */
export function budgetFor(ledger: Books, principal: Principal, requestId: string): Budget {
  return principal.keyId === null ? new FreeBudget() : ledger.open(principal, requestId)
}
