/**
 * The access log (spec §8): one structured line per inference request, written when the engine publishes the
 * request's end (requests refused by admission included: no provider, 0 attempts, model '' when the body was
 * not read that far). It carries identifiers, outcome and timings, never a key, a header or a prompt (the
 * events hold none). Costs are exact atto-USD written as a decimal USD string.
 *
 * Prompts are logged only when the operator sets both `log.level: debug` and `log.prompts: true`: then
 * startPromptLog writes each inference request's body as a debug line (`msg: "request body"`). Either alone
 * logs no prompt. Headers (Authorization, x-api-key, cookies) are never logged, at any level.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { formatUsd } from '../billing/money.js'
import { infoEnabled, log } from '../log.js'
import type { RequestBodyEvent, RequestEndEvent } from './events.js'

function round3(ms: number): number {
  return Math.round(ms * 1000) / 1000
}

/** Subscribes the access log; returns the unsubscribe. */
export function startAccessLog(): () => void {
  const onEnd = (m: unknown): void => {
    // At level warn or error the line would be dropped: do not build it (the hot path pays one level check).
    if (!infoEnabled()) return
    const e = m as RequestEndEvent
    log.access({
      request_id: e.requestId,
      surface: e.surface,
      model: e.model,
      provider: e.provider,
      status: e.status,
      attempts: e.attempts,
      ttfb_ms: e.ttfbMs === null ? null : round3(e.ttfbMs),
      duration_ms: round3(e.durationMs),
      cost_usd: formatUsd(e.cost),
      error: e.error,
    })
  }
  subscribe('svc-router:request:end', onEnd)
  return () => unsubscribe('svc-router:request:end', onEnd)
}

/** Subscribes the prompt logger (debug lines with each inference request's body); returns the unsubscribe. */
export function startPromptLog(): () => void {
  const onBody = (m: unknown): void => {
    const e = m as RequestBodyEvent
    log.debug('request body', { request_id: e.requestId, surface: e.surface, body: e.body.toString('utf8') })
  }
  subscribe('svc-router:request:body', onBody)
  return () => unsubscribe('svc-router:request:body', onBody)
}
