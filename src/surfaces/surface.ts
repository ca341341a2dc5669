/**
 * A surface is a record of what differs between inference APIs (DESIGN.md §5): how its request is read, how an
 * attempt to one candidate is planned, what it may cost, how its answers and errors look. Admission and the
 * failover loop are the same for every surface; a new API is a new record, never a copy of the engine.
 */
import type { ChatUsage, Cost, Usage } from '../billing/cost.js'
import type { JsonBody } from '../codecs/json-body.js'
import type { FormHead, RequiredParts } from '../codecs/multipart.js'
import type { RequestBody } from '../upstream/request-body.js'
import type { RouterError } from '../errors.js'
import type { ModelType } from '../registry/types.js'
import type { Offer } from '../routing/offers.js'
import type { RequestHead } from '../server/request-head.js'
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
  /** The client asked for the answer's TEE signature to be checked (X-SVC-Verify-TEE, or body verify_tee). */
  readonly verifyTee?: boolean
}

/**
 * What the engine (failover loop) needs of a surface once its request was read. `U`: the usage the surface's
 * answers are billed by; cost() takes that kind.
 */
export interface EngineSurface<R extends SurfaceRequest, U extends Usage = ChatUsage> {
  /** Short name for telemetry and logs. */
  readonly name: string
  /** The catalog type of the models it serves. */
  readonly modelType: ModelType
  /** Which price ceilings apply (routing/select.ts DIMENSION_*). */
  readonly dimension: number
  /** How to try `offer`: path, headers, body and the codec of its answer. */
  plan(req: R, offer: Offer): AttemptPlan<U>
  /** The most this request can cost at `offer`: what is reserved before trying it. */
  worstCase(req: R, offer: Offer): bigint
  /** The exact cost of `usage` at `offer`'s prices. */
  cost(offer: Offer, usage: U): Cost
  readonly renderError: ErrorRenderer
}

/** A JSON surface: its request is the whole body, parsed here. */
export interface Surface<R extends SurfaceRequest, U extends Usage = ChatUsage> extends EngineSurface<R, U> {
  /** Validates the body; the RouterError says what is wrong. `head`: the request's copied headers. */
  parse(body: JsonBody, head: RequestHead): R | RouterError
}

/**
 * A multipart surface (spec §4.7: routing by headers only): its request is built from the fields that came
 * before `model` (codecs/multipart.ts) and the upload, which streams on as the attempts' body.
 */
export interface MultipartSurface<R extends SurfaceRequest, U extends Usage = ChatUsage> extends EngineSurface<R, U> {
  /** A file field whose first bytes the request wants (an audio header), '' for none. */
  readonly fileField: string
  /** The form is read to its end (within upstream.replay_buffer_bytes) before admission: see ScanOptions. */
  readonly wholeForm?: boolean
  /** Parts the router acts on, which may come once: a repeat anywhere in the upload is a 400 (PartWatch). */
  readonly singleParts: ReadonlySet<string>
  /**
   * Parts the form must have: one missing is a 400 before any provider is tried (at the upload's end when the
   * form is larger than the part of it read before routing).
   */
  readonly requiredParts?: RequiredParts
  fromForm(form: FormHead, upload: Upload, head: RequestHead): R | RouterError
}

/** The client's upload as a multipart surface sends it on. */
export interface Upload {
  readonly body: RequestBody
  /** Bytes of the upload received so far. */
  readonly received: () => number
  /** The client's Content-Length, -1 when it sent none (chunked). */
  readonly declaredLength: number
  /** The largest upload admitted (server.max_multipart_body_bytes). */
  readonly maxBytes: number
}
