/**
 * A surface is a record of what differs between inference APIs (DESIGN.md §5): how its request is read, how an
 * attempt to one candidate is planned, what it may cost, how its answers and errors look. Admission and the
 * failover loop are the same for every surface; a new API is a new record, never a copy of the engine.
 */
import type { Principal } from '../auth/principal.js'
import type { ChatUsage, Cost, Usage } from '../billing/cost.js'
import type { ResponseCodec } from '../codecs/codec.js'
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
  /**
   * After the hold of worstCase(req, offer) was refused: true when more of the request's body may still lower
   * that worst case (an edit's `n` not come yet), and `retry` runs once more of it was read, to hold again at
   * what it then is. Absent or false: the refusal is the answer.
   */
  retryHoldWhen?(req: R, retry: () => void): boolean
  /**
   * For a body judged as it streams (a multipart form's later fields): true when an answer may go out now,
   * else false, and `go` runs once it may (never, when the body is refused or the client leaves first).
   * Absent: at once.
   */
  answerWhen?(req: R, go: () => void): boolean
  /**
   * Optional: runs once a whole answer's charge is durable, before its last bytes (which carry `trace`) go out;
   * the Responses surface stores the answer here, so a client that continues from it at once finds it. The loop
   * waits for the promise; a failure is logged and the answer goes out all the same (it is billed).
   */
  keep?(req: R, codec: ResponseCodec<U>, trace: Record<string, unknown>): Promise<void> | null
}

/** A JSON surface: its request is the whole body, parsed here. */
export interface Surface<R extends SurfaceRequest, U extends Usage = ChatUsage> extends EngineSurface<R, U> {
  /** Validates the body; the RouterError says what is wrong. `head`: the request's copied headers. */
  parse(body: JsonBody, head: RequestHead): R | RouterError
  /**
   * Optional: what the request needs of the store before it is routed (the Responses surface reads the
   * conversation it continues). Null when there is nothing to wait for; a RouterError refuses the request.
   */
  prepare?(req: R, principal: Principal): Promise<RouterError | null> | RouterError | null
}

/**
 * A multipart surface (spec §4.7: routing by headers only): its request is built from the fields that came
 * before `model` (codecs/multipart.ts) and the upload, which streams on as the attempts' body.
 */
export interface MultipartSurface<R extends SurfaceRequest, U extends Usage = ChatUsage> extends EngineSurface<R, U> {
  /** A file field whose first bytes the request wants (an audio header), '' for none. */
  readonly fileField: string
  /**
   * Whether the file's first bytes so far already tell all the request needs of them, for an upload of
   * `declaredLength` (-1: unknown): the scan then stops there rather than at ScanOptions.fileHeadBytes.
   */
  headEnough?(head: Buffer, declaredLength: number): boolean
  /**
   * A spooled upload (async, src/jobs/spool.ts) is read to its end (within upstream.replay_buffer_bytes) before
   * admission: see ScanOptions. A streamed one is always routed at `model`; lateFields tell it the rest.
   */
  readonly wholeForm?: boolean
  /**
   * Fields whose values count wherever they come, also past where the scan stopped (PartWatch.valued): each
   * value goes to lateField before the bytes that end it go on to the provider, and formEnded runs at the
   * form's closing delimiter.
   */
  readonly lateFields?: ReadonlySet<string>
  /** A value of a lateFields name (null: longer than VALUE_BYTES): the 400 when it breaks a rule; may update `req`. */
  lateField?(req: R, name: string, value: string | null): RouterError | null
  /** The form's closing delimiter passed: a field that did not come takes its default. */
  formEnded?(req: R): void
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
  /**
   * A streamed upload (absent when it was whole before the request ran): true when it all came and passed every
   * check of the form, else false, and `go` runs once it has (never, if it is refused or abandoned).
   */
  readonly whenWhole?: (go: () => void) => boolean
  /**
   * A streamed upload: true when more of the form can still be read before an attempt takes it (it is neither
   * whole nor past the replay buffer), and `go` runs once more was: a late field's value, the form's end, or
   * the buffer's end. False: nothing more can be known first.
   */
  readonly whenMore?: (go: () => void) => boolean
}
