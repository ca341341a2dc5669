/**
 * A surface is a record of what differs between inference APIs (DESIGN.md §5): how its request is read, how an
 * attempt to one candidate is planned, what it may cost, how its answers and errors look. Admission and the
 * failover loop are the same for every surface; a new API is a new record, never a copy of the engine.
 */
import type { ChatUsage, Cost, Usage } from '../billing/cost.js'
import type { JsonBody } from '../codecs/json-body.js'
import type { RouterError } from '../errors.js'
import type { ModelType } from '../registry/types.js'
import type { Offer } from '../routing/offers.js'
import type { AttemptPlan } from '../upstream/plan.js'

/** Renders the error envelope of a surface's API. */
export type ErrorRenderer = (err: RouterError, requestId: string, trace?: Record<string, unknown>) => string

/** What admission needs from any surface's request once its body was read. */
export interface SurfaceRequest {
  readonly model: string
  readonly stream: boolean
  /** Bits of the sampling/reasoning parameters the request sets (routing/params.ts). */
  readonly paramMask: number
  /** Requested maximum output length, -1 when unset. */
  readonly maxOutput: number
  /** The deprecated body `provider` object, merged into the routing preferences (undefined when absent). */
  readonly provider: unknown
  /** Bytes of the request that stand for the prompt, for the reservation and the usage estimate. */
  readonly promptBytes: number
}

/** `U`: the usage the surface's answers are billed by; cost() takes that kind. */
export interface Surface<R extends SurfaceRequest, U extends Usage = ChatUsage> {
  /** Short name for telemetry and logs. */
  readonly name: string
  /** The catalog type of the models it serves. */
  readonly modelType: ModelType
  /** Which price ceilings apply (routing/select.ts DIMENSION_*). */
  readonly dimension: number
  /** Validates the body; the RouterError says what is wrong. */
  parse(body: JsonBody): R | RouterError
  /** How to try `offer`: path, headers, body and the codec of its answer. */
  plan(req: R, offer: Offer): AttemptPlan<U>
  /** The most this request can cost at `offer`: what is reserved before trying it. */
  worstCase(req: R, offer: Offer): bigint
  /** The exact cost of `usage` at `offer`'s prices. */
  cost(offer: Offer, usage: U): Cost
  readonly renderError: ErrorRenderer
}
