/** utcDay keeps the last day it formatted: every instant still gets its own UTC day, across day boundaries. */
import t from 'tap'
import { utcDay } from '../../src/store/days.js'

const reference = (ms: number): string => new Date(ms).toISOString().slice(0, 10)

t.test('day boundaries, in either order, and before 1970', async (t) => {
  const edges = [0, 86_399_999, 86_400_000, -1, -86_400_000, -86_400_001, Date.UTC(2024, 1, 29, 23, 59, 59, 999), Date.UTC(2024, 2, 1), Date.UTC(2024, 1, 29)]
  for (const ms of [...edges, ...edges.reverse()]) t.equal(utcDay(ms), reference(ms), String(ms))
})

t.test('random instants agree with Date', async (t) => {
  let seed = 42
  const next = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31)
  let mismatches = 0
  for (let i = 0; i < 20_000; i++) {
    const ms = (next() - 2 ** 30) * 2_000 + (next() % 1000)
    if (utcDay(ms) !== reference(ms)) mismatches++
  }
  t.equal(mismatches, 0)
})
