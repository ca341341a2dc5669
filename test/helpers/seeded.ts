/**
 * mulberry32: a small, fast seeded generator, the same sequence on every run and in every thread, so a test's
 * random cuts or a benchmark's fixture reproduce exactly.
 */
export function seeded(seed: number): () => number {
  let a = seed >>> 0
  return function next(): number {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
