/**
 * Served against settled, per provider (issue 44): each read of a sub-account by the funding replica counts what
 * the provider took since the last read, from two sources over the same window of blocks: the fall of the
 * balance, and the TEESettlementResult events of its settlements (settlement-events.ts). Each is a lower bound (a
 * top-up in the window hides a settlement from the balance; a window too long is not read for events), and both
 * count the same takes: the window adds the larger, never their sum. A provider whose settled exceeds served by
 * more than the tolerance is flagged. The books (store/settlement.ts) get the block with the balance and what
 * was settled, in one row write, every read; they are the truth between rounds, every replica's.
 */
import type { LocalAccount, PublicClient } from 'viem'
import { log } from '../log.js'
import type { SettlementStore } from '../store/settlement.js'
import { format0g, SERVING_PAYMENT_ABI, type SubAccount } from './abi.js'
import type { Entry } from './entry.js'
import { errorText } from './sender.js'
import type { SettlementEvents, SettlementResult } from './settlement-events.js'

/** The longest range of blocks one getLogs asks for (RPC nodes cap getLogs ranges). */
const MAX_EVENT_BLOCKS = 5_000n
/** The most getLogs ranges one read of a sub-account reads on from the books' last block. */
const MAX_EVENT_WINDOWS = 20n

export class Reconciler {
  /** Whether this replica funds in the round under way (only the funder reconciles and writes the books' settled side). */
  funding = false
  readonly #client: PublicClient
  readonly #serving: `0x${string}`
  readonly #payer: LocalAccount
  readonly #books: SettlementStore
  readonly #events: SettlementEvents
  readonly #tolerance: bigint

  constructor(client: PublicClient, serving: `0x${string}`, payer: LocalAccount, books: SettlementStore, events: SettlementEvents, tolerance: bigint) {
    this.#client = client
    this.#serving = serving
    this.#payer = payer
    this.#books = books
    this.#events = events
    this.#tolerance = tolerance
  }

  /**
   * Reads `e`'s sub-account; on the funding replica, unless `reconcile` is false, also reconciles what the
   * provider took since the last read. The router takes funds back only from a flagged provider, whose
   * settlements are not counted.
   */
  async readAccount(e: Entry, reconcile = true): Promise<SubAccount | null> {
    const client = this.#client
    const block = this.funding && reconcile ? await client.getBlockNumber({ cacheTime: 0 }) : undefined
    let account: SubAccount | null
    try {
      const a = await client.readContract({ address: this.#serving, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [this.#payer.address, e.address], blockNumber: block })
      account = { balance: a.balance, pendingRefund: a.pendingRefund, acknowledged: a.acknowledged, generation: a.generation, revokedBitmap: a.revokedBitmap, nonce: a.nonce }
    } catch (err) {
      if (!errorText(err).startsWith('AccountNotExists')) throw err
      account = null
    }
    if (block === undefined) return account
    const evented = await this.#taken(e, block)
    const balance = account?.balance ?? 0n
    const before = { settled: e.settled, lastBalance: e.lastBalance, lastPendingRefund: e.lastPendingRefund, lastBlock: e.lastBlock, flagged: e.flagged }
    const pending = account?.pendingRefund ?? 0n
    // A refund paid out takes the same amount from the balance and from the pending refund: not the provider's.
    // (A settlement that cancels pending refunds also lowers both: then this is short of it, a lower bound still.)
    const refunded = e.lastPendingRefund !== null && pending < e.lastPendingRefund ? e.lastPendingRefund - pending : 0n
    const dropped = e.lastBalance !== null && balance < e.lastBalance ? e.lastBalance - balance : 0n
    const fell = dropped > refunded ? dropped - refunded : 0n
    if (!e.flagged) e.settled += fell > evented ? fell : evented
    e.lastBalance = balance
    e.lastPendingRefund = pending
    e.lastBlock = block
    if (!e.flagged && e.settled > e.served + this.#tolerance) {
      e.flagged = true
      log.error('settlement: provider settled more than it served; flagged, unfunded, refund requested', {
        provider: e.address,
        served_0g: format0g(e.served),
        settled_0g: format0g(e.settled),
      })
    }
    if (
      before.settled !== e.settled ||
      before.lastBalance !== e.lastBalance ||
      before.lastPendingRefund !== e.lastPendingRefund ||
      before.flagged !== e.flagged ||
      before.lastBlock !== e.lastBlock
    ) {
      await this.#books.record(e.address, { settled: e.settled, lastBalance: e.lastBalance, lastPendingRefund: e.lastPendingRefund, lastBlock: e.lastBlock, flagged: e.flagged })
    }
    return account
  }

  /**
   * What `e`'s settlements took after the books' last block up to `block`, read in pieces a node answers getLogs
   * for. A window longer than MAX_EVENT_WINDOWS pieces (the books not written for days), or events the node does
   * not answer for, count nothing: the balance's fall alone counts, a lower bound still.
   */
  async #taken(e: Entry, block: bigint): Promise<bigint> {
    if (e.lastBlock === null || block <= e.lastBlock || block - e.lastBlock > MAX_EVENT_BLOCKS * MAX_EVENT_WINDOWS) return 0n
    const provider = e.address.toLowerCase()
    const noted: SettlementResult[] = []
    let evented = 0n
    try {
      for (let from = e.lastBlock + 1n; from <= block; from += MAX_EVENT_BLOCKS) {
        const to = from + MAX_EVENT_BLOCKS - 1n < block ? from + MAX_EVENT_BLOCKS - 1n : block
        for (const r of await this.#events.results(from, to)) {
          if (r.provider !== provider) continue
          evented += r.taken
          noted.push(r)
        }
      }
    } catch (err) {
      log.warn('settlement: reading settlement events failed; this window counts the balance only', { provider: e.address, err: errorText(err) })
      return 0n
    }
    for (const r of noted) noteResult(e, r)
    return evented
  }

  /**
   * The books (every replica's charges, the flags) into memory. What was served is written with each charge
   * (store/settlement.ts), so a crash loses none of it; the meter only adds what was served since this read.
   * A charge metered while the read is under way may be in both until the next read: served is over-counted
   * for a moment (a top-up a little early), never under-counted (which could flag a provider falsely).
   */
  async syncBooks(entries: Iterable<Entry>): Promise<void> {
    const all = [...entries]
    for (const e of all) e.metered = 0n
    const rows = new Map((await this.#books.rows()).map((r) => [r.provider, r]))
    for (const e of all) {
      const r = rows.get(e.address)
      e.served = (r?.served ?? 0n) + e.metered
      if (r === undefined) continue
      e.settled = r.settled
      e.lastBalance = r.lastBalance
      e.lastPendingRefund = r.lastPendingRefund
      e.lastBlock = r.lastBlock
      if (e.flagged && !r.flagged) log.info('settlement: flag cleared by the operator', { provider: e.address })
      e.flagged = r.flagged
    }
  }
}

/** Counts a settlement's status (/metrics); one that did not take the whole fee is logged. */
function noteResult(e: Entry, r: SettlementResult): void {
  e.results.set(r.status, (e.results.get(r.status) ?? 0) + 1)
  if (r.status === 'success') return
  const fields = { provider: e.address, status: r.status, fee_0g: format0g(r.totalFee), unsettled_0g: format0g(r.unsettled), tx: r.tx }
  if (r.status === 'partial') log.warn('settlement: a provider settled only part of its fee (the sub-account fell short)', fields)
  else log.warn('settlement: the contract refused a provider\'s settlement', fields)
}
