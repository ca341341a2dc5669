/**
 * One provider's part of a settlement round (DESIGN.md §8): read its sub-account, and on the funding replica
 * move funds into it when its free balance fell below `min` (up to `target`), acknowledge its TEE signer, start
 * a new token generation when every id is revoked, and ask a flagged provider's sub-account back. Every replica
 * signs its token. Transactions go through the one sender (sender.ts); none is ever on a request's path.
 */
import type { LocalAccount, PublicClient } from 'viem'
import { log } from '../log.js'
import { format0g, LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI, type PayerLedger } from './abi.js'
import { free, type Entry } from './entry.js'
import type { Reconciler } from './reconciliation.js'
import { errorText, type TxSender } from './sender.js'
import type { TokenBook } from './token-book.js'

export interface FundingDeps {
  readonly client: PublicClient
  readonly payer: LocalAccount
  readonly sender: TxSender
  /** The InferenceServing contract. */
  readonly serving: `0x${string}`
  readonly reconciler: Reconciler
  readonly tokens: TokenBook
  /** Neuron: a sub-account is topped up to `target` when its free balance is below `min`. */
  readonly min: bigint
  readonly target: bigint
  /** The LedgerManager address and the service name; '' for the contract's own (read once, at the first round). */
  readonly ledger: string
  readonly serviceName: string
}

export class FundingRound {
  /** The payer's ledger as last read (null: it has none, or not read yet). */
  payerLedger: PayerLedger | null = null
  readonly #d: FundingDeps
  #ledger: `0x${string}` | null
  #serviceName: string

  constructor(deps: FundingDeps) {
    this.#d = deps
    this.#ledger = deps.ledger === '' ? null : (deps.ledger as `0x${string}`)
    this.#serviceName = deps.serviceName
  }

  /** The ledger's address and the service's name, from the contracts when not configured (read once). */
  async resolveNames(): Promise<void> {
    const client = this.#d.client
    this.#ledger ??= await client.readContract({ address: this.#d.serving, abi: SERVING_PAYMENT_ABI, functionName: 'ledgerAddress' })
    if (this.#serviceName === '') {
      const [version] = await client.readContract({ address: this.#ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getRecommendedService', args: ['inference'] })
      this.#serviceName = `inference-${version}`
    }
  }

  async refreshLedger(): Promise<void> {
    this.payerLedger = await this.#readLedger()
  }

  async #readLedger(): Promise<PayerLedger | null> {
    try {
      const l = await this.#d.client.readContract({ address: this.#ledger!, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [this.#d.payer.address] })
      return { availableBalance: l.availableBalance, totalBalance: l.totalBalance }
    } catch (err) {
      if (errorText(err).startsWith('LedgerNotExists')) return null
      throw err
    }
  }

  /** Asks the flagged provider's sub-account back (retrieveFund: released to the ledger after the lock time). */
  async #retrieve(e: Entry): Promise<void> {
    if (e.account === null || e.account.balance === e.account.pendingRefund) return
    await this.#d.sender.send({ address: this.#ledger!, abi: LEDGER_MANAGER_ABI, functionName: 'retrieveFund', args: [[e.address], this.#serviceName] })
    e.account = await this.#d.reconciler.readAccount(e)
  }

  /** Funds, acknowledges and signs for one provider; returns why it is not routable, or null. */
  async provider(e: Entry, funder: boolean): Promise<string | null> {
    const { sender, reconciler, tokens, min, target } = this.#d
    e.account = await reconciler.readAccount(e)
    if (e.flagged) {
      if (funder) await this.#retrieve(e).catch((err: unknown) => log.warn('settlement: retrieving a flagged sub-account failed', { provider: e.address, err: errorText(err) }))
      return 'flagged: it settled more than the router served (svc-router chain clear-flag)'
    }
    if (free(e) < min || e.account === null) {
      if (!funder) return e.account === null ? 'no sub-account yet (another replica funds)' : 'sub-account below min (another replica funds)'
      const need = target - free(e)
      const available = this.payerLedger?.availableBalance ?? 0n
      if (this.payerLedger === null) return 'the payer has no ledger (svc-router chain deposit)'
      const cost = e.account === null ? need : need > e.account.pendingRefund ? need - e.account.pendingRefund : 0n
      if (available < cost) return `the ledger holds ${format0g(available)} 0G, ${format0g(cost)} needed to fund it`
      try {
        await sender.send({ address: this.#ledger!, abi: LEDGER_MANAGER_ABI, functionName: 'transferFund', args: [e.address, this.#serviceName, need] })
      } catch (err) {
        return `funding failed: ${errorText(err)}`
      }
      log.info('settlement: sub-account funded', { provider: e.address, amount_0g: format0g(need) })
      this.payerLedger = await this.#readLedger()
      e.account = await reconciler.readAccount(e)
      if (e.account === null || free(e) < min) return 'sub-account below min after funding'
    }
    if (!e.account.acknowledged) {
      if (!funder) return 'signer not acknowledged (another replica funds)'
      try {
        await sender.send({ address: this.#d.serving, abi: SERVING_PAYMENT_ABI, functionName: 'acknowledgeTEESigner', args: [e.address, true] })
      } catch (err) {
        return `acknowledging failed: ${errorText(err)}`
      }
      e.account = await reconciler.readAccount(e)
      if (e.account === null || !e.account.acknowledged) return 'signer not acknowledged'
    }
    if (!(await tokens.ensure(e, false))) {
      if (!funder) return 'every session token id is revoked (another replica funds)'
      try {
        await sender.send({ address: this.#d.serving, abi: SERVING_PAYMENT_ABI, functionName: 'revokeAllTokens', args: [e.address] })
      } catch (err) {
        return `starting a new token generation failed: ${errorText(err)}`
      }
      e.account = await reconciler.readAccount(e)
      if (!(await tokens.ensure(e, true))) return 'every session token id is revoked'
    }
    return null
  }
}
