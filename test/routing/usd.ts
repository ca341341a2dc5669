/** Exact USD amounts for the routing tests, in the unit of the price ceilings and offer prices. */
import { parseUsd } from '../../src/billing/money.js'

/** A decimal USD amount as atto-USD, read by the ledger's own parser; throws on a typo instead of passing null. */
export function usd(decimal: string): bigint {
  const atto = parseUsd(decimal)
  if (atto === null) throw new Error(`not a USD amount: ${decimal}`)
  return atto
}
