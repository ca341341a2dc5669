/**
 * What the failover loop knows of billing (DESIGN.md §5, budget): reserve before each attempt, settle or release
 * after. The loop owns a request's budget from admission to its end. The ledger's Reservation is the
 * implementation for a key's request; settlement is asynchronous (`done` runs once the charge is durable), so a
 * networked store fits behind it.
 */
import type { RouterError } from '../errors.js'
import type { Cost } from './cost.js'

/** What a settled request is billed for, with the cost at the served offer's prices. */
export interface Bill {
  readonly model: string
  readonly provider: string
  readonly promptTokens: number
  readonly completionTokens: number
  readonly images: number
  readonly audioMs: number
  readonly cost: Cost
  /** What the answer owes a chain provider at its own prices (neuron, exact); null for other providers. */
  readonly neuron?: bigint | null
}

/** The amount actually billed: the cost, or the reservation when the cost exceeded it (`capped`). */
export interface BilledCost extends Cost {
  readonly capped: boolean
}

/** Called once the charge is durable (`err` null), or could not be recorded. */
export type Settled = (billed: BilledCost, err: RouterError | null) => void

export interface Budget {
  /** Whether neither settle nor release has run yet. */
  readonly open: boolean
  /**
   * Holds `amount` in place of what was held before; the 402 to answer with when it does not fit, or a promise
   * of either when the request waits for room held by requests in flight.
   */
  hold(amount: bigint): RouterError | null | Promise<RouterError | null>
  /** Turns the hold into the charge of `bill`; `done` runs once it is durable. Returns what is billed. */
  settle(bill: Bill, done: Settled): BilledCost
  /** Gives the hold back without a charge. */
  release(): void
  /**
   * Lowers the hold in place to `amount` when that is less (never raises it, never fails): the request's worst
   * case fell while it ran. Absent: the hold stays until settle or release.
   */
  lower?(amount: bigint): void
}

/** The budget of a request no key pays for: nothing is held and nothing recorded. */
export class FreeBudget implements Budget {
  #open = true

  get open(): boolean {
    return this.#open
  }

  hold(): RouterError | null {
    return null
  }

  settle(bill: Bill, done: Settled): BilledCost {
    this.#open = false
    const billed: BilledCost = { ...bill.cost, capped: false }
    queueMicrotask(() => done(billed, null))
    return billed
  }

  release(): void {
    this.#open = false
  }
}
