/**
 * Trust tiers (spec §2.6): ordered standard < verified < private; a requested tier is a floor. The one copy of
 * this vocabulary: the registry, keys, routing and the store all name tiers through it.
 */

export type TrustMode = 'standard' | 'verified' | 'private'

/** In rank order: a tier's index is its rank. */
export const TRUST_MODES: readonly TrustMode[] = ['standard', 'verified', 'private']

export const TIER_RANK: Readonly<Record<TrustMode, number>> = { standard: 0, verified: 1, private: 2 }

/** The rank of a tier name, -1 for anything else (exact lower case, spec §4.7). */
export function tierRank(value: string): number {
  if (value === 'standard') return 0
  if (value === 'verified') return 1
  if (value === 'private') return 2
  return -1
}

/** The name of a rank; 'none' for -1 (a key without a tier). */
export function tierName(rank: number): string {
  return TRUST_MODES[rank] ?? 'none'
}

export function isTrustMode(value: unknown): value is TrustMode {
  return typeof value === 'string' && tierRank(value) !== -1
}
