/**
 * What providers took from the payer's sub-accounts, read from their settlements on chain (issue 44): each
 * `settleFeesWithTEE(settlements)` transaction emits one `TEESettlementResult(user, status, unsettledAmount)` per
 * entry, in entry order. The event names neither the provider nor the fee, so the transaction's own entries give
 * them: an entry for the payer with status SUCCESS or PARTIAL took `totalFee - unsettledAmount` from its
 * sub-account with `entry.provider`; any other status took nothing (the contract refused the entry).
 */
import { decodeFunctionData, getAbiItem, parseEventLogs, type PublicClient } from 'viem'
import { SERVING_PAYMENT_ABI } from './abi.js'

/** SettlementStatus of InferenceServing, by its uint8 value; the label of the metric. */
export const SETTLEMENT_STATUSES = ['success', 'partial', 'provider_mismatch', 'no_tee_signer', 'invalid_nonce', 'invalid_signature'] as const
export type SettlementStatus = (typeof SETTLEMENT_STATUSES)[number] | 'unknown'

export interface SettlementResult {
  /** Lower case. */
  readonly provider: string
  readonly status: SettlementStatus
  readonly totalFee: bigint
  readonly unsettled: bigint
  /** What the entry took from the sub-account (neuron). */
  readonly taken: bigint
  readonly tx: `0x${string}`
}

const RESULT_EVENT = getAbiItem({ abi: SERVING_PAYMENT_ABI, name: 'TEESettlementResult' })
/** Transactions decoded, kept for the next provider's window over the same blocks. */
const CACHE_MAX = 256

export class SettlementEvents {
  readonly #client: PublicClient
  readonly #serving: `0x${string}`
  readonly #payer: `0x${string}`
  readonly #byTx = new Map<string, SettlementResult[]>()

  constructor(client: PublicClient, serving: `0x${string}`, payer: `0x${string}`) {
    this.#client = client
    this.#serving = serving
    this.#payer = payer
  }

  /** The payer's settlement results in blocks `from` to `to` (inclusive), in chain order. */
  async results(from: bigint, to: bigint): Promise<SettlementResult[]> {
    if (to < from) return []
    const logs = await this.#client.getLogs({ address: this.#serving, event: RESULT_EVENT, args: { user: this.#payer }, fromBlock: from, toBlock: to })
    const out: SettlementResult[] = []
    const seen = new Set<string>()
    for (const log of logs) {
      const hash = log.transactionHash
      if (hash === null || seen.has(hash)) continue
      seen.add(hash)
      out.push(...(await this.#ofTx(hash)))
    }
    return out
  }

  /** The payer's entries of one settlement transaction, each with its event's status and what was left. */
  async #ofTx(hash: `0x${string}`): Promise<SettlementResult[]> {
    const cached = this.#byTx.get(hash)
    if (cached !== undefined) return cached
    const [tx, receipt] = await Promise.all([this.#client.getTransaction({ hash }), this.#client.getTransactionReceipt({ hash })])
    const out: SettlementResult[] = []
    let entries: readonly { user: string; provider: string; totalFee: bigint }[] = []
    try {
      const call = decodeFunctionData({ abi: SERVING_PAYMENT_ABI, data: tx.input })
      if (call.functionName === 'settleFeesWithTEE') entries = call.args[0]
    } catch {
      // Not a direct call (a contract calling InferenceServing): no entries to pair the events with.
    }
    const events = parseEventLogs({ abi: SERVING_PAYMENT_ABI, logs: receipt.logs, eventName: 'TEESettlementResult' }).filter(
      (l) => l.address.toLowerCase() === this.#serving.toLowerCase(),
    )
    const payer = this.#payer.toLowerCase()
    for (let i = 0; i < events.length; i++) {
      const ev = events[i]!
      if (ev.args.user.toLowerCase() !== payer) continue
      const entry = entries.length === events.length ? entries[i] : undefined
      // Without its entry the provider is the sender (a provider settles only its own fees) and the fee unknown.
      const provider = (entry?.provider ?? tx.from).toLowerCase()
      const status: SettlementStatus = SETTLEMENT_STATUSES[ev.args.status] ?? 'unknown'
      const totalFee = entry?.totalFee ?? ev.args.unsettledAmount
      const took = (status === 'success' || status === 'partial') && totalFee > ev.args.unsettledAmount
      out.push({ provider, status, totalFee, unsettled: ev.args.unsettledAmount, taken: took ? totalFee - ev.args.unsettledAmount : 0n, tx: hash })
    }
    if (this.#byTx.size >= CACHE_MAX) this.#byTx.delete(this.#byTx.keys().next().value!)
    this.#byTx.set(hash, out)
    return out
  }
}
