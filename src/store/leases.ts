/**
 * Budget leases (DESIGN.md §6, "holds never oversubscribe"): the part of a networked Store that lets several
 * replicas share an account's funds and a key's credit limit exactly. A replica takes a slice of what is
 * available (a lease) with one conditional update, spends it locally without a round trip, and gives back what
 * it did not spend; a charge recorded with `leased: true` is paid out of the lease of the handle that records it.
 * The sum of every lease on an account is never more than it has available, and on a key never more than its
 * credit limit leaves in the current period: each grant is checked against both in the same transaction.
 *
 * A lease belongs to one replica (one store handle, `replicaId`); a replica that stops heartbeating
 * (replicas.ts) loses its leases to the others after the configured time, so a crash strands nothing.
 * The embedded SQLite store has no leases: one process holds the whole of every budget (billing/ledger.ts).
 */

/** One request for budget: at least `min`, at most `want`, for one key of one account. */
export interface LeaseAsk {
  readonly accountId: string
  readonly keyId: string
  /** Epoch ms at which the key's current reset period started (0 for `never`): older spend no longer counts. */
  readonly periodStart: number
  readonly min: bigint
  readonly want: bigint
}

/** What a lease request got, and the figures a refusal quotes. */
export interface LeaseGrant {
  /** 0n when not even `min` fitted; then nothing was taken. */
  readonly granted: bigint
  /** The account's deposits + credits − spend − every lease, before this grant. */
  readonly accountRoom: bigint
  /** The key's credit limit (null: none), its spend this period and what every replica holds of it, before this grant. */
  readonly keyLimit: bigint | null
  readonly keyUsed: bigint
  readonly keyLeased: bigint
}

export interface LeaseStore {
  /** This handle's replica id: the owner of the leases it takes. */
  readonly replicaId: string
  acquire(ask: LeaseAsk): Promise<LeaseGrant>
  /** Gives back `amount` of this replica's lease on the key (never more than it holds; null: all of it). */
  giveBack(accountId: string, keyId: string, amount: bigint | null): Promise<void>
}

/** A charge recorded with `leased: true` found neither its lease nor free room to pay from: nothing was written. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError'
}
