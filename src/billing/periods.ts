/**
 * Where a key's `reset_period` starts and ends (DESIGN.md §4: 00:00 UTC, weeks start on Monday, months on the
 * 1st), as epoch-ms bounds the ledger compares its clock with.
 */
import { periodStartDay } from '../store/days.js'
import type { ResetPeriod } from '../store/store.js'

const DAY_MS = 86_400_000

export interface PeriodBounds {
  /** 00:00 UTC of the period's first day; -Infinity for `never`. */
  readonly start: number
  /** 00:00 UTC of the next period's first day; Infinity for `never`. */
  readonly end: number
  /** The first day as YYYY-MM-DD, what the store's spendByKey takes; null for `never` (all time). */
  readonly startDay: string | null
}

export function periodBounds(period: ResetPeriod, now: number): PeriodBounds {
  const startDay = periodStartDay(period, now)
  if (startDay === null) return { start: -Infinity, end: Infinity, startDay }
  const start = Date.parse(startDay + 'T00:00:00Z')
  switch (period) {
    case 'daily':
      return { start, end: start + DAY_MS, startDay }
    case 'weekly':
      return { start, end: start + 7 * DAY_MS, startDay }
    case 'monthly': {
      const d = new Date(start)
      return { start, end: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1), startDay }
    }
    case 'never':
      return { start: -Infinity, end: Infinity, startDay }
  }
}
