/**
 * The request-independent half of routing: for every model and every tier floor, the offers at or above the
 * floor sorted by price and by latency. Pure and plain-data in and out, so it runs the same inline (start-up)
 * and in the piscina worker (every rebuild after that, off the event loop).
 */

/** Column-wise description of every offer, by position in the offer set. */
export interface IndexInput {
  readonly modelCount: number
  /** Model number of each offer (0..modelCount-1). */
  readonly model: Int32Array
  /** Tier rank of each offer (0..2). */
  readonly tier: Uint8Array
  readonly sortPrice: Float64Array
  /** EWMA time to first byte in ms, NaN when never observed. */
  readonly latency: Float64Array
}

/** Per model: offer positions for floors 0, 1, 2, sorted by price and by latency. */
export interface IndexOutput {
  readonly price: Int32Array[][]
  readonly latency: Int32Array[][]
}

export const FLOORS = 3

function latencyKey(v: number): number {
  return Number.isNaN(v) ? Number.POSITIVE_INFINITY : v
}

export function buildIndex(input: IndexInput): IndexOutput {
  const { modelCount, model, tier, sortPrice, latency } = input
  const members: number[][] = Array.from({ length: modelCount }, () => [])
  for (let i = 0; i < model.length; i++) members[model[i]!]!.push(i)

  const byPrice = (a: number, b: number): number =>
    sortPrice[a]! - sortPrice[b]! || latencyKey(latency[a]!) - latencyKey(latency[b]!) || a - b
  // Offers never observed sort after every observed one (Infinity); Infinity - Infinity is NaN, hence `|| 0`.
  const byLatency = (a: number, b: number): number =>
    (latencyKey(latency[a]!) - latencyKey(latency[b]!) || 0) || sortPrice[a]! - sortPrice[b]! || a - b

  const price: Int32Array[][] = []
  const lat: Int32Array[][] = []
  for (let m = 0; m < modelCount; m++) {
    const sortedByPrice = members[m]!.slice().sort(byPrice)
    const sortedByLatency = members[m]!.slice().sort(byLatency)
    const p: Int32Array[] = []
    const l: Int32Array[] = []
    for (let floor = 0; floor < FLOORS; floor++) {
      p.push(Int32Array.from(sortedByPrice.filter((i) => tier[i]! >= floor)))
      l.push(Int32Array.from(sortedByLatency.filter((i) => tier[i]! >= floor)))
    }
    price.push(p)
    lat.push(l)
  }
  return { price, latency: lat }
}
