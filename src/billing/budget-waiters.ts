/**
 * Requests that wait for room in a budget instead of being refused at once. A key's credit limit or an
 * account's balance can be taken up by the reservations of requests in flight, each of which holds its worst
 * case while it will most likely cost far less: refusing a burst there would leave most of the budget unspent.
 * A request whose reservation does not fit beside the holds in flight (but would fit beside what is settled)
 * waits, in arrival order, until a hold is released or settled, for at most the configured time; then it is
 * refused with the 402 it would have had. Admission stays exact: every check and the hold it guards still
 * happen in one synchronous turn.
 */
import type { RouterError } from '../errors.js'

/** What a waiting request tries each time room may have appeared: null once held, the final 402, or 'blocked'. */
export type HoldAttempt = () => RouterError | null | 'blocked'

interface Waiter {
  readonly attempt: HoldAttempt
  readonly resolve: (refused: RouterError | null) => void
  readonly timer: NodeJS.Timeout
}

export class BudgetWaiters {
  #list: Waiter[] = []
  #waking = false

  get size(): number {
    return this.#list.length
  }

  /**
   * Resolves with null once `attempt` held its amount, or with a 402 once it never can or `waitMs` passed: then
   * `refusal()`, the 402 as things stand at that moment (its figures are the budget's then, not at arrival).
   */
  wait(attempt: HoldAttempt, waitMs: number, refusal: () => RouterError): Promise<RouterError | null> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.#settle(waiter, refusal()), waitMs)
      const waiter: Waiter = { attempt, resolve, timer }
      this.#list.push(waiter)
    })
  }

  /** Room may have appeared (a hold was released or settled, funds were added): let waiters try, in order. */
  wake(): void {
    if (this.#list.length === 0 || this.#waking) return
    this.#waking = true
    try {
      for (const waiter of [...this.#list]) {
        const outcome = waiter.attempt()
        if (outcome !== 'blocked') this.#settle(waiter, outcome)
      }
    } finally {
      this.#waking = false
    }
  }

  /** Ends `waiter`'s wait (once) with `outcome`: held (null) or refused. */
  #settle(waiter: Waiter, outcome: RouterError | null): void {
    const at = this.#list.indexOf(waiter)
    if (at === -1) return
    this.#list.splice(at, 1)
    clearTimeout(waiter.timer)
    waiter.resolve(outcome)
  }
}
