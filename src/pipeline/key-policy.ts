/**
 * The key's own constraints (spec §5): its trust tier applies to every request and cannot be weakened, and its
 * allowed models bound what it may call. Runs after the body's `provider` object was merged.
 */
import type { Principal } from '../auth/principal.js'
import { RouterError } from '../errors.js'
import { UNSET, type RoutingPrefs } from '../routing/preferences.js'
import { tierName } from '../vocabulary/trust.js'

export function applyKeyPolicy(principal: Principal, prefs: RoutingPrefs, model: string): RouterError | null {
  if (principal.allowedModels !== null && !principal.allowedModels.has(model)) {
    return new RouterError('model_not_allowed', `this key may not use model ${model}`)
  }
  if (principal.tier >= 0) {
    if (prefs.tier === UNSET) prefs.tier = principal.tier
    else if (prefs.tier < principal.tier) {
      return new RouterError('trust_mode_mismatch', `trust mode mismatch: key=${tierName(principal.tier)}, request=${tierName(prefs.tier)}`)
    }
  }
  return null
}
