/**
 * What the router owes each chain provider and what the provider took (DESIGN.md §8, src/settlement/), kept in
 * the store so that a restart, another replica and the operator's CLI see the same books. Amounts are neuron.
 * What was served is added by the ledger in each charge's own transaction (a charge's `neuron`, ledger.ts), so a
 * crash never loses it; only the funding replica writes what was settled and the flag.
 */
export interface SettlementRow {
  readonly provider: string
  /** Neuron served: the sum of the provider's charges' `neuron`, every replica's. */
  readonly served: bigint
  /** Neuron the provider took (the sub-account's falls in balance). */
  readonly settled: bigint
  /** The sub-account balance last read (neuron), null before the first. */
  readonly lastBalance: bigint | null
  /** The pending refund read with that balance: what leaves both through a refund paid out is no settlement. */
  readonly lastPendingRefund: bigint | null
  /** The block that balance was read at: the settlement events counted are those up to it (null before the first). */
  readonly lastBlock: bigint | null
  /** It settled more than it served: not routed, not funded, until the operator clears it. */
  readonly flagged: boolean
}

/** What the funding replica writes after reading a sub-account: one row, in one statement. */
export type SettledRecord = Omit<SettlementRow, 'provider' | 'served'>

export interface SettlementStore {
  rows(): Promise<SettlementRow[]>
  /**
   * The funding replica's view of what was settled, with the balance and the block it read it at, and the flag.
   * Written together: the next read (this process after a restart, or another replica) counts the events after
   * `lastBlock` and the balance's fall from `lastBalance`, which is exactly what `settled` does not hold yet.
   */
  record(provider: string, r: SettledRecord): Promise<void>
  /**
   * Clears the flag and takes what was settled beyond what was served as accepted (settled = served); false when
   * the provider is not flagged (an unflagged one's settled may be below served: raising it would forget what the
   * provider is still owed, and flag it falsely at its next settlement).
   */
  clearFlag(provider: string): Promise<boolean>
}

/** A books row as both stores read it: integers as decimal text (NUMERIC::text, SQLite TEXT), the flag as 0/1 or a boolean. */
export interface SettlementText {
  readonly provider: string
  readonly served: string
  readonly settled: string
  readonly last_balance: string | null
  readonly last_block: string | null
  readonly last_pending_refund: string | null
  readonly flagged: boolean | number
}

const bigOrNull = (v: string | null): bigint | null => (v === null ? null : BigInt(v))

/** The row of either store as the settlement reads it. */
export function settlementRowOf(r: SettlementText): SettlementRow {
  return {
    provider: r.provider,
    served: BigInt(r.served),
    settled: BigInt(r.settled),
    lastBalance: bigOrNull(r.last_balance),
    lastBlock: bigOrNull(r.last_block),
    lastPendingRefund: bigOrNull(r.last_pending_refund),
    flagged: r.flagged === true || r.flagged === 1,
  }
}
