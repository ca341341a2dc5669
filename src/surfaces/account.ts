/**
 * Account state for an `mk-` key with `account:read` (spec §4.1): GET /v1/account/balance, /funds and
 * /usage/stats. Everything is read from the ledger (journal totals, the daily usage roll-up); amounts are
 * exact decimal strings in USD.
 *
 * `reserved` (money held by in-flight requests) lives in the billing ledger's memory, not in the store, and
 * comes from `deps.reserved` (serve() wires it to the ledger).
 */
import type { MgmtAuthenticator } from '../auth/authenticate.js'
import { beginManagement, type ManagementStart } from '../auth/management-stage.js'
import { availableFunds } from '../billing/available.js'
import { formatUsd } from '../billing/money.js'
import { RouterError } from '../errors.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendJson } from '../server/respond.js'
import { addDays, parseDay, utcDay } from '../store/days.js'
import type { AccountTotals, Store, UsageRow } from '../store/store.js'
import { CURRENCY } from './api-keys.js'

export interface AccountDeps {
  readonly authenticate: MgmtAuthenticator
  readonly store: Pick<Store, 'keys' | 'ledger'>
  /** atto-USD held by the account's in-flight requests. */
  readonly reserved: (accountId: string) => bigint
  readonly now?: () => number
}

type Handler = (head: RequestHead, reply: Reply) => void

/** Days covered by usage stats when the caller gives no start_date. */
export const DEFAULT_USAGE_DAYS = 30

/**
 * Balances from the journal totals. Charges draw on credits (operator grants) before deposits, so
 * `credit_balance` is what is left of the credits and `deposit_balance` what is left of the deposits.
 */
export function balances(t: AccountTotals): { deposit: bigint; credit: bigint; total: bigint } {
  const fromCredit = t.spent < t.credited ? t.spent : t.credited
  const credit = t.credited - fromCredit
  const deposit = t.deposited - (t.spent - fromCredit)
  return { deposit, credit, total: availableFunds(t) }
}

interface Metrics {
  requests: number
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  images: number
  audio_seconds: number
  spend: bigint
}

function emptyMetrics(): Metrics {
  return { requests: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, images: 0, audio_seconds: 0, spend: 0n }
}

function addRow(m: Metrics, r: UsageRow): void {
  m.requests += r.requests
  m.prompt_tokens += r.promptTokens
  m.completion_tokens += r.completionTokens
  m.total_tokens += r.promptTokens + r.completionTokens
  m.images += r.images
  // Summed in ms (integers), converted once: no float drift.
  m.audio_seconds += r.audioMs
  m.spend += r.cost
}

function metricsJson(m: Metrics): Record<string, unknown> {
  return { ...m, audio_seconds: m.audio_seconds / 1000, spend: formatUsd(m.spend) }
}

/** Metrics summed per group, groups in ascending order of their key. */
function groupBy(rows: readonly UsageRow[], keyOf: (r: UsageRow) => string): [string, Metrics][] {
  const out = new Map<string, Metrics>()
  for (const r of rows) {
    const k = keyOf(r)
    let m = out.get(k)
    if (m === undefined) out.set(k, (m = emptyMetrics()))
    addRow(m, r)
  }
  return [...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
}

interface UsageQuery {
  startDate: string
  endDate: string
  apiKeyId: string | null
  model: string | null
}

function parseUsageQuery(query: string, now: number): UsageQuery {
  const params = new URLSearchParams(query)
  const day = (name: string): string | null => {
    const v = params.get(name)?.trim() ?? ''
    if (v === '') return null
    if (parseDay(v) === null) throw new RouterError('invalid_request', `${name} must be a date as YYYY-MM-DD (got ${JSON.stringify(v)})`)
    return v
  }
  const endDate = day('end_date') ?? utcDay(now)
  const startDate = day('start_date') ?? addDays(endDate, -(DEFAULT_USAGE_DAYS - 1))
  if (startDate > endDate) throw new RouterError('invalid_request', `start_date (${startDate}) is after end_date (${endDate})`)
  const apiKeyId = params.get('api_key_id')?.trim() || null
  const model = params.get('model')?.trim() || null
  return { startDate, endDate, apiKeyId, model }
}

export interface AccountSurface {
  readonly balance: Handler
  readonly funds: Handler
  readonly usageStats: Handler
}

export function createAccount(deps: AccountDeps): AccountSurface {
  const now = deps.now ?? Date.now

  async function balance({ reply, principal, headers }: ManagementStart): Promise<void> {
    const b = balances(await deps.store.ledger.totals(principal.accountId))
    const body = {
      deposit_balance: formatUsd(b.deposit),
      credit_balance: formatUsd(b.credit),
      total_balance: formatUsd(b.total),
      currency: CURRENCY,
    }
    sendJson(reply, 200, JSON.stringify(body), headers)
  }

  async function funds({ reply, principal, headers }: ManagementStart): Promise<void> {
    // A store shared by replicas reports what they hold with the totals, read together (store/leases.ts).
    const ledger = deps.store.ledger
    const leased = ledger.totalsWithLeases === undefined ? null : await ledger.totalsWithLeases(principal.accountId)
    const t = leased ?? (await ledger.totals(principal.accountId))
    const reserved = leased !== null ? leased.leased : deps.reserved(principal.accountId)
    const body = {
      deposit: formatUsd(t.deposited),
      credit: formatUsd(t.credited),
      reserved: formatUsd(reserved),
      spent: formatUsd(t.spent),
      available: formatUsd(availableFunds(t, reserved)),
      currency: CURRENCY,
    }
    sendJson(reply, 200, JSON.stringify(body), headers)
  }

  async function usageStats({ head, reply, principal, headers }: ManagementStart): Promise<void> {
    const q = parseUsageQuery(head.query, now())
    if (q.apiKeyId !== null && (await deps.store.keys.getApiKey(principal.accountId, q.apiKeyId)) === null) {
      throw new RouterError('api_key_not_found', `no API key ${JSON.stringify(q.apiKeyId)} in this account`)
    }
    const rows = await deps.store.ledger.usage(principal.accountId, {
      fromDay: q.startDate,
      toDay: q.endDate,
      ...(q.apiKeyId !== null && { keyId: q.apiKeyId }),
      ...(q.model !== null && { model: q.model }),
    })
    const totals = emptyMetrics()
    for (const r of rows) addRow(totals, r)
    const body = {
      object: 'usage_stats',
      start_date: q.startDate,
      end_date: q.endDate,
      api_key_id: q.apiKeyId,
      model: q.model,
      currency: CURRENCY,
      totals: metricsJson(totals),
      by_day: groupBy(rows, (r) => r.day).map(([date, m]) => ({ date, ...metricsJson(m) })),
      by_model: groupBy(rows, (r) => r.model).map(([model, m]) => ({ model, ...metricsJson(m) })),
      by_key: groupBy(rows, (r) => r.keyId).map(([api_key_id, m]) => ({ api_key_id, ...metricsJson(m) })),
      data: rows.map((r) => {
        const m = emptyMetrics()
        addRow(m, r)
        return { date: r.day, model: r.model, api_key_id: r.keyId, ...metricsJson(m) }
      }),
    }
    sendJson(reply, 200, JSON.stringify(body), headers)
  }

  return {
    balance: (head, reply) => beginManagement(deps.authenticate, head, reply, 'account:read', false, balance),
    funds: (head, reply) => beginManagement(deps.authenticate, head, reply, 'account:read', false, funds),
    usageStats: (head, reply) => beginManagement(deps.authenticate, head, reply, 'account:read', false, usageStats),
  }
}
