/**
 * Which TEE providers failed their last signature check (DESIGN.md §7: trust is lowered by failed checks, never
 * raised). A provider whose answer's signature did not hold (wrong signer, hashes that do not match what was
 * relayed, no signature) is routed as `standard` until a later check passes: it leaves the verified and
 * private floors, and /v1/providers shows the tier it is routed on.
 */
import type { RegistryProvider, RegistrySnapshot } from '../registry/types.js'

export class TeeStanding {
  readonly #failing = new Set<string>()
  readonly #onChange: () => void

  /** `onChange`: the set changed; the routing table is to be rebuilt from lower(snapshot). */
  constructor(onChange: () => void) {
    this.#onChange = onChange
  }

  isFailing(address: string): boolean {
    return this.#failing.has(address)
  }

  /** A check's outcome for `address`; only a change of standing rebuilds the table. */
  record(address: string, passed: boolean): void {
    const was = this.#failing.has(address)
    if (passed === !was) return
    if (passed) this.#failing.delete(address)
    else this.#failing.add(address)
    this.#onChange()
  }

  /** `snapshot` with every failing provider lowered to `standard` (the same object when none is). */
  lower(snapshot: RegistrySnapshot, version: number): RegistrySnapshot {
    let providers: readonly RegistryProvider[] = snapshot.providers
    if (this.#failing.size > 0) {
      providers = snapshot.providers.map((p) => (this.#failing.has(p.address) && p.trust_mode !== 'standard' ? Object.freeze({ ...p, trust_mode: 'standard' as const }) : p))
    }
    return Object.freeze({ providers, version })
  }
}
