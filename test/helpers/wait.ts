/**
 * Waiting in tests without guessing how fast the machine is: poll until a condition holds (with a generous
 * deadline) instead of sleeping a constant and asserting, and wait until a computed moment has passed on the
 * clock the code under test reads, instead of sleeping "a bit more" than a delay.
 */

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * Calls `check` every `everyMs` until it holds or `ms` passed; true if it held. The deadline only bounds a
 * failing test: a passing one returns as soon as the condition holds, however slow the machine.
 */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 10_000, everyMs = 20): Promise<boolean> {
  const deadline = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > deadline) return false
    await pause(everyMs)
  }
}

/**
 * Resolves once `clock()` is past `at` (by default Date.now, the clock of key and job expiry). A timer alone
 * may fire a little before a moment read on another clock, and says nothing of a moment computed elsewhere.
 */
export async function pastMoment(at: number, clock: () => number = Date.now): Promise<void> {
  for (let left = at - clock(); left >= 0; left = at - clock()) await pause(Math.min(Math.ceil(left) + 1, 50))
}
