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

/**
 * `text` with one to four random edits: one of `inserts` put in, a few characters dropped, the rest cut off, or a
 * random character put in (a fuzz test's valid input made invalid in the ways a parser meets).
 */
export function mutate(random: () => number, text: string, inserts: readonly string[]): string {
  let out = text
  const edits = 1 + Math.floor(random() * 4)
  for (let e = 0; e < edits; e++) {
    const at = Math.floor(random() * (out.length + 1))
    const kind = random()
    if (kind < 0.35) out = out.slice(0, at) + inserts[Math.floor(random() * inserts.length)] + out.slice(at)
    else if (kind < 0.6) out = out.slice(0, at) + out.slice(at + 1 + Math.floor(random() * 8))
    else if (kind < 0.8) out = out.slice(0, at)
    else out = out.slice(0, at) + String.fromCharCode(Math.floor(random() * 0x2fff)) + out.slice(at)
  }
  return out
}
