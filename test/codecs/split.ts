/** Ways to cut a byte stream into chunks, as TCP and undici may deliver it, for split-invariance tests. */

import { seeded } from '../helpers/seeded.js'

export { seeded }

/** The stream cut at the given offsets (ascending, inside the stream). */
export function cutAt(bytes: Buffer, offsets: readonly number[]): Buffer[] {
  const parts: Buffer[] = []
  let from = 0
  for (const at of offsets) {
    parts.push(bytes.subarray(from, at))
    from = at
  }
  parts.push(bytes.subarray(from))
  return parts
}

/** Every two-way cut of the stream. */
export function* everyCut(bytes: Buffer): Generator<{ readonly label: string; readonly parts: Buffer[] }> {
  for (let at = 1; at < bytes.length; at++) yield { label: `cut at ${at}`, parts: cutAt(bytes, [at]) }
}

/** `count` random cuts into 2–12 pieces, and one byte at a time. */
export function* randomCuts(bytes: Buffer, count: number, seed: number): Generator<{ readonly label: string; readonly parts: Buffer[] }> {
  const random = seeded(seed)
  for (let i = 0; i < count; i++) {
    const n = 1 + Math.floor(random() * 11)
    const offsets = [...new Set(Array.from({ length: n }, () => 1 + Math.floor(random() * (bytes.length - 1))))].sort((a, b) => a - b)
    yield { label: `cuts at ${offsets.join(',')}`, parts: cutAt(bytes, offsets) }
  }
  yield { label: 'one byte at a time', parts: Array.from(bytes, (_, i) => bytes.subarray(i, i + 1)) }
}

/** Bytes that look like SSE often enough to reach every branch: line endings, colons, field names, JSON bits. */
export function garbage(random: () => number, length: number): Buffer {
  const pieces = ['\r', '\n', '\r\n', ':', ' ', 'data', 'data:', 'data: ', 'event:', '[DONE]', '{', '}', '"usage"', '"id"', '"', '[]', 'null', '"choices"', ',', '\t', 'x', 'é', '\u0000', '\uffff']
  const out: Buffer[] = []
  let size = 0
  while (size < length) {
    const piece = random() < 0.1 ? Buffer.from([Math.floor(random() * 256)]) : Buffer.from(pieces[Math.floor(random() * pieces.length)])
    out.push(piece)
    size += piece.length
  }
  return Buffer.concat(out)
}
