/**
 * A part of the running router and the lifecycle of them all (STYLE.md "A composition root that is a list"):
 * a factory builds each part from its config section and the parts built before it, and returns what the part
 * offers and how to stop it. serve.ts adds the parts in dependency order; stopping runs their stops in reverse,
 * so nothing stops before what was built on it.
 */
export type Stop = () => void | Promise<void>

export interface Part<T> {
  readonly offers: T
  /** Absent: nothing to stop. */
  readonly stop?: Stop
}

export function part<T>(offers: T, stop?: Stop): Part<T> {
  return stop === undefined ? { offers } : { offers, stop }
}

export class Lifecycle {
  readonly #stops: Stop[] = []

  /** The part's offer, once built; its stop runs before those of every part added earlier. */
  async add<T>(building: Part<T> | Promise<Part<T>>): Promise<T> {
    const built = await building
    if (built.stop !== undefined) this.#stops.push(built.stop)
    return built.offers
  }

  /** Stops what was built, the last part first; a stop that throws ends it there, as a close would. */
  async stop(): Promise<void> {
    for (let stop = this.#stops.pop(); stop !== undefined; stop = this.#stops.pop()) await stop()
  }
}
