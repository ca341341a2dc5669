/**
 * The engine's telemetry (DESIGN.md §5): it publishes on diagnostics_channel and never calls metrics or logs
 * itself. A channel with no subscriber costs one property read (`hasSubscribers`), and the message object is
 * only built behind that check. Metrics and access logs subscribe from their own folder.
 */
import { channel } from 'node:diagnostics_channel'

/** An inference request passed admission and its first candidate is about to be tried. */
export interface RequestStartEvent {
  readonly requestId: string
  readonly surface: string
  readonly model: string
  readonly stream: boolean
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
}

/**
 * A request's answer ended: what the client got. Published once per started request; a client that went away
 * ends it with status 499 and error 'client_closed'.
 */
export interface RequestEndEvent {
  readonly requestId: string
  readonly surface: string
  readonly model: string
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
}

export const requestStart = channel('svc-router:request:start')
export const attemptEnd = channel('svc-router:attempt:end')
export const settled = channel('svc-router:settle')
export const requestEnd = channel('svc-router:request:end')
