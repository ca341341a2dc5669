/**
 * A cap on concurrent upstream requests per provider (issue #13 §3): at most `max` attempts run against one
 * provider; the next `queue` wait their turn for up to `queueTimeoutMs`; beyond that, or past the wait, the
 * attempt is refused and the failover loop moves on (every candidate busy: 503 no_available_provider).
 */

interface Waiter {
  run: () => void
  refuse: () => void
  timer: NodeJS.Timeout
}

interface Slot {
  active: number
  readonly waiting: Waiter[]
}

export interface LimiterSettings {
  readonly max: number
  readonly queue: number
  readonly queueTimeoutMs: number
}

/** Slots kept before the idle ones are dropped (one per provider with attempts since; a few dozen bytes each). */
const MAX_SLOTS = 1024

export class ProviderLimiter {
  readonly #slots = new Map<string, Slot>()
  readonly #settings: LimiterSettings
  /** The number of slots past which a release that leaves one idle sweeps the idle ones (#sweep). */
  #sweepAbove = MAX_SLOTS

  constructor(settings: LimiterSettings) {
    this.#settings = settings
  }

  /**
   * Takes a slot of `provider` when one is free now (true): the caller runs at once, and no callback was made
   * for a wait that does not happen. False: the caller goes through acquire(). No slot is free while requests
   * wait (release() hands a slot straight to the first of them), so a newcomer never passes the queue.
   */
  tryAcquire(provider: string): boolean {
    const slot = this.#slot(provider)
    if (slot.active >= this.#settings.max) return false
    slot.active++
    return true
  }

  /** Calls `run` now or once a slot frees, or `refuse` when the queue is full or the wait ran out. */
  acquire(provider: string, run: () => void, refuse: () => void): void {
    if (this.tryAcquire(provider)) return run()
    const s = this.#slot(provider)
    if (s.waiting.length >= this.#settings.queue) return refuse()
    const waiter: Waiter = {
      run,
      refuse,
      timer: setTimeout(() => {
        const i = s.waiting.indexOf(waiter)
        if (i >= 0) s.waiting.splice(i, 1)
        refuse()
      }, this.#settings.queueTimeoutMs),
    }
    s.waiting.push(waiter)
  }

  #slot(provider: string): Slot {
    let slot = this.#slots.get(provider)
    if (slot === undefined) {
      slot = { active: 0, waiting: [] }
      this.#slots.set(provider, slot)
    }
    return slot
  }

  /** One attempt against `provider` is over: the next waiter runs. */
  release(provider: string): void {
    const slot = this.#slots.get(provider)
    if (slot === undefined) return
    const next = slot.waiting.shift()
    if (next !== undefined) {
      clearTimeout(next.timer)
      next.run()
      return
    }
    slot.active--
    // An idle slot stays for the provider's next attempt: deleting it and making it again at every request
    // (one attempt at a time) churned the Map, and a churned Map leaves garbage the scavenger cannot see through
    // (pools.ts, ActiveAttempts). Idle slots go only when there are many, as providers come and go.
    if (slot.active === 0 && this.#slots.size > this.#sweepAbove) this.#sweep()
  }

  /**
   * Drops every slot with nothing running or waiting. The next sweep waits for the Map to double what is left,
   * so a release costs O(1) amortised even with more than MAX_SLOTS providers busy at once.
   */
  #sweep(): void {
    for (const [provider, slot] of this.#slots) if (slot.active === 0 && slot.waiting.length === 0) this.#slots.delete(provider)
    this.#sweepAbove = Math.max(MAX_SLOTS, 2 * this.#slots.size)
  }

  /** Providers with a slot kept (running, waiting or idle). */
  get providers(): number {
    return this.#slots.size
  }

  /** Attempts running and waiting against `provider`. */
  load(provider: string): { active: number; waiting: number } {
    const slot = this.#slots.get(provider)
    return { active: slot?.active ?? 0, waiting: slot?.waiting.length ?? 0 }
  }
}
