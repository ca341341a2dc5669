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
  /** It settled more than it served: not routed, not funded, until the operator clears it. */
  readonly flagged: boolean
}

export interface SettlementStore {
  rows(): Promise<SettlementRow[]>
  /** The funding replica's view of what was settled, the balance it saw, and the flag. */
  record(provider: string, settled: bigint, lastBalance: bigint | null, flagged: boolean): Promise<void>
  /** Clears the flag and takes what was settled beyond what was served as accepted (settled = served); false when unknown. */
  clearFlag(provider: string): Promise<boolean>
}
