/**
 * UTC calendar days as the ledger keys them (YYYY-MM-DD), and where a key's `reset_period` starts
 * (DESIGN.md §4: resets at 00:00 UTC, weeks start on Monday).
 */
import type { ResetPeriod } from './store.js'

const DAY_MS = 86_400_000

/** The last day utcDay formatted, and the epoch-ms range it covers: a run of charges mostly shares one day. */
let lastDay = ''
let lastStart = 0
let lastEnd = -1

/** The UTC day of an epoch-ms instant. */
export function utcDay(ms: number): string {
  if (ms >= lastStart && ms <= lastEnd) return lastDay
  lastDay = new Date(ms).toISOString().slice(0, 10)
  lastStart = Math.floor(ms / DAY_MS) * DAY_MS
  lastEnd = lastStart + DAY_MS - 1
  return lastDay
}

/** A YYYY-MM-DD string that names a real calendar day, as epoch ms of its 00:00 UTC; null otherwise. */
export function parseDay(text: string): number | null {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) return null
  const ms = Date.parse(text + 'T00:00:00Z')
  if (!Number.isFinite(ms) || utcDay(ms) !== text) return null
  return ms
}

/** The first day of the period that contains `now`; null for `never` (all time). */
export function periodStartDay(period: ResetPeriod, now: number): string | null {
  const d = new Date(now)
  switch (period) {
    case 'never':
      return null
    case 'daily':
      return utcDay(now)
    case 'weekly': {
      const sinceMonday = (d.getUTCDay() + 6) % 7
      return utcDay(now - sinceMonday * DAY_MS)
    }
    case 'monthly':
      return utcDay(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1))
  }
}

export function addDays(day: string, n: number): string {
  return utcDay(Date.parse(day + 'T00:00:00Z') + n * DAY_MS)
}
