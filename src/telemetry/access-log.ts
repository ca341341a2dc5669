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
import { log } from '../log.js'
import type { RequestBodyEvent, RequestEndEvent } from './events.js'

const ATTO_PER_USD = 10n ** 18n

/** atto-USD as an exact decimal USD string (e.g. 1234n → "0.000000000000001234"). */
export function attoToUsd(atto: bigint): string {
  const sign = atto < 0n ? '-' : ''
  const abs = atto < 0n ? -atto : atto
  const whole = abs / ATTO_PER_USD
  const frac = (abs % ATTO_PER_USD).toString().padStart(18, '0').replace(/0+$/, '')
  return sign + whole.toString() + (frac === '' ? '' : '.' + frac)
}

function round3(ms: number): number {
  return Math.round(ms * 1000) / 1000
}

/** Subscribes the access log; returns the unsubscribe. */
export function startAccessLog(): () => void {
  const onEnd = (m: unknown): void => {
    const e = m as RequestEndEvent
    log.info('request', {
      request_id: e.requestId,
      surface: e.surface,
      model: e.model,
      provider: e.provider,
      status: e.status,
      attempts: e.attempts,
      ttfb_ms: e.ttfbMs === null ? null : round3(e.ttfbMs),
      duration_ms: round3(e.durationMs),
      cost_usd: attoToUsd(e.cost),
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
