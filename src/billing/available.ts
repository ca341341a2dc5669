/**
 * What an account can still spend (DESIGN.md §4, budgets): deposited + credited − spent − reserved. The one
 * copy of the formula, for the budget check, the funds endpoint and the operator's `accounts show`.
 */
import type { AccountTotals } from '../store/ledger.js'

/** atto-USD; negative only if the books were overdrawn, which admission never lets happen. */
export function availableFunds(totals: AccountTotals, reserved = 0n): bigint {
  return totals.deposited + totals.credited - totals.spent - reserved
}
