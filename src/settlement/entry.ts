/**
 * What the settlement keeps in memory per provider of the chain registry (settlement.ts), and the sums read
 * from it. One entry per provider, made at its first round and dropped when the registry no longer names it.
 */
import type { RegistryProvider } from '../registry/types.js'
import type { SubAccount } from './abi.js'
import type { SessionToken } from './session-token.js'
import type { SettlementStatus } from './settlement-events.js'

export interface Entry {
  readonly address: `0x${string}`
  record: RegistryProvider
  account: SubAccount | null
  token: SessionToken | null
  reason: string | null
  served: bigint
  settled: bigint
  flagged: boolean
  /** The balance last read, to see what the provider took since (null before the first read). */
  lastBalance: bigint | null
  /**
   * The pending refund read with it: what leaves the balance through a refund (an operator's `chain retrieve`,
   * processed) is no settlement. Kept in the books with the balance.
   */
  lastPendingRefund: bigint | null
  /** The block that balance was read at, where the next window of settlement events starts (null: never read). */
  lastBlock: bigint | null
  results: Map<SettlementStatus, number>
  /** Served by this replica since the books were last read (the books hold it already: it is durable with each charge). */
  metered: bigint
  /** A renewal under way (401), shared by the requests that met it. */
  renewing: Promise<boolean> | null
}

export function newEntry(p: RegistryProvider): Entry {
  return {
    address: p.address as `0x${string}`,
    record: p,
    account: null,
    token: null,
    reason: 'not funded yet',
    served: 0n,
    settled: 0n,
    flagged: false,
    lastBalance: null,
    lastPendingRefund: null,
    lastBlock: null,
    results: new Map(),
    metered: 0n,
    renewing: null,
  }
}

/** Neuron served and not yet matched by a settlement. */
export function unsettled(e: Entry): bigint {
  return e.served > e.settled ? e.served - e.settled : 0n
}

/** What the sub-account holds beyond its pending refund and what the provider served and has not settled. */
export function free(e: Entry): bigint {
  const a = e.account
  if (a === null) return 0n
  return a.balance - a.pendingRefund - unsettled(e)
}
