/**
 * The engine's telemetry (DESIGN.md §5): it publishes on diagnostics_channel and never calls metrics or logs
 * itself. A channel with no subscriber costs one property read (`hasSubscribers`), and the message object is
 * only built behind that check. Metrics and access logs subscribe from their own folder.
 */
import { channel } from 'node:diagnostics_channel'
import type { RequestHead } from '../server/request-head.js'
import { clientTrace } from './trace-context.js'

/** An inference request passed admission and its first candidate is about to be tried. */
export interface RequestStartEvent {
  readonly requestId: string
  readonly surface: string
  readonly model: string
  readonly stream: boolean
  /** performance.now() at arrival. */
  readonly startedAt: number
  /** The client's W3C traceparent, validated (trace-context.ts); '' when absent or malformed. */
  readonly traceparent: string
  /** The client's tracestate, '' when absent, malformed, or without a valid traceparent. */
  readonly tracestate: string
}

/**
 * One try against one provider is about to be sent. Published synchronously before the request leaves: a
 * subscriber may replace `traceparent` / `tracestate` (the client's, or '') with what the provider must get,
 * e.g. a trace context naming its own span (tracing.ts).
 */
export interface AttemptStartEvent {
  readonly requestId: string
  readonly provider: string
  traceparent: string
  tracestate: string
}

/** One try against one provider ended (answered, failed over, or broke). */
export interface AttemptEvent {
  readonly requestId: string
  readonly provider: string
  /** The provider's HTTP status, null when none arrived. */
  readonly status: number | null
  readonly error: string | null
  /** Time to the response's first byte in ms, null when none arrived. */
  readonly ttfbMs: number | null
}

/** A request's charge was recorded (or failed to be). */
export interface SettleEvent {
  readonly requestId: string
  readonly provider: string
  /** atto-USD billed. */
  readonly cost: bigint
  readonly durable: boolean
  /** What the answer cost at the provider's own chain prices (neuron), for a provider read from the chain. */
  readonly neuron?: bigint
}

/**
 * A request's answer ended: what the client got. Published once per started request; a client that went away
 * ends it with status 499 and error 'client_closed'. Also published, with `admitted` false and no start before
 * it, for an inference request refused before the failover loop (401, 429, 400, 404, 413, …).
 */
export interface RequestEndEvent {
  readonly requestId: string
  /** False: refused by admission, no start event was published for it. */
  readonly admitted: boolean
  readonly surface: string
  /** The model the client asked for ('' when the body was not read that far); may be outside the catalog. */
  readonly model: string
  /**
   * Whether `model` is in the catalog (always, for an admitted request). Metrics label only such models: a
   * client's made-up names would otherwise grow the label set, and /metrics' memory, without bound.
   */
  readonly catalogModel: boolean
  readonly provider: string | null
  readonly status: number
  readonly attempts: number
  /** ms since arrival. */
  readonly durationMs: number
  /** The error code when the answer was an error (before or after its first byte). */
  readonly error: string | null
  /** Time to the answering attempt's first byte in ms, null when no provider answered. */
  readonly ttfbMs: number | null
  /** atto-USD recorded for this request, 0n when nothing was billed. */
  readonly cost: bigint
  /** As in RequestStartEvent (a refused request has no start event to carry them). */
  readonly traceparent: string
  readonly tracestate: string
}

/** One group-commit transaction of the charge writer (billing/charge-writer.ts) ended. */
export interface LedgerCommitEvent {
  /** Charges in the transaction. */
  readonly charges: number
  /** From the store call to its outcome, in ms. */
  readonly durationMs: number
  /** False: the transaction failed and its charges were not recorded. */
  readonly ok: boolean
}

/**
 * An inference request's body as it arrived (the prompt), published before it is parsed. Only the prompt
 * logger subscribes, and only when the operator asked for it (log.prompts with log.level debug).
 */
export interface RequestBodyEvent {
  readonly requestId: string
  readonly surface: string
  readonly body: Buffer
}

/** A registry source read its source again (the chain source's sweeps). */
export interface RegistryRefreshEvent {
  readonly source: 'chain'
  readonly outcome: 'ok' | 'error'
  /** Providers of the new snapshot; -1 when nothing changed or the read failed. */
  readonly providers: number
}

/** A TEE signature check ended (src/tee/): asked by a client, or sampled in the background. */
export interface TeeVerifyEvent {
  readonly provider: string
  /** 'verified', or the reason it was not (tee/verify.ts TeeReason). */
  readonly outcome: string
  readonly sampled: boolean
}

/** A request refused by a throttle of its source (auth/source-limit.ts) or of everyone: a 429 before any key lookup. */
export interface ThrottleEvent {
  readonly throttle: 'auth_failures' | 'sign_in_source' | 'sign_in_global'
}

/** The events of the throttles, one object each (published as they are: nothing is allocated per refusal). */
export const THROTTLED = {
  authFailures: { throttle: 'auth_failures' } as ThrottleEvent,
  signInSource: { throttle: 'sign_in_source' } as ThrottleEvent,
  signInGlobal: { throttle: 'sign_in_global' } as ThrottleEvent,
} as const

export const registryRefresh = channel('svc-router:registry:refresh')
export const throttled = channel('svc-router:throttle')
export const teeVerify = channel('svc-router:tee:verify')
export const requestBody = channel('svc-router:request:body')
export const requestStart = channel('svc-router:request:start')
export const attemptStart = channel('svc-router:attempt:start')
export const attemptEnd = channel('svc-router:attempt:end')
export const settled = channel('svc-router:settle')
export const requestEnd = channel('svc-router:request:end')
export const ledgerCommit = channel('svc-router:ledger:commit')

/**
 * Publishes the end of an inference request refused before the failover loop (no start event): `model` is
 * '' when the body was not read as far as the model. Nothing is computed when nobody listens.
 */
export function publishRefused(head: RequestHead, surface: string, model: string, catalogModel: boolean, status: number, error: string): void {
  if (!requestEnd.hasSubscribers) return
  const trace = clientTrace(head.traceparent, head.tracestate)
  const e: RequestEndEvent = {
    requestId: head.requestId,
    admitted: false,
    surface,
    model,
    catalogModel,
    provider: null,
    status,
    attempts: 0,
    durationMs: performance.now() - head.startedAt,
    error,
    ttfbMs: null,
    cost: 0n,
    traceparent: trace.traceparent,
    tracestate: trace.tracestate,
  }
  requestEnd.publish(e)
}
