/**
 * One try against one provider: an undici dispatch handler. It knows nothing of retries, billing or traces
 * (undici's retry handler wraps a handler that knows nothing of retries): it sorts the provider's answer into
 * what the failover loop decides on (a miss before any byte reached the client, a client error to pass
 * through, an answer relayed through the plan's codec, a break after the first byte) and reports it to its
 * owner.
 *
 * Backpressure both ways: a slow receiver pauses the upstream read (and so, through TCP, the provider).
 *
 * It speaks undici's first handler interface (onConnect, onHeaders with the raw header list, onData returning
 * false to pause), which undici 7 still takes as it is. A handler of the newer interface is wrapped per request
 * in two more objects and given every response header parsed into an object (and the trailers too): the three
 * headers the router reads are picked from the raw list instead (responseHead()).
 */
import type { Dispatcher } from 'undici'
import type { Usage } from '../billing/cost.js'
import type { Attempt } from '../billing/trace.js'
import { GrowingBody } from '../codecs/body-chunks.js'
import type { HealthBook, HealthSettings } from '../health/health.js'
import type { Offer } from '../routing/offers.js'
import { attemptStart, type AttemptStartEvent } from '../telemetry/events.js'
import type { ClientTrace } from '../telemetry/trace-context.js'
import type { TeeRecorder } from '../tee/verify.js'
import { isHeaderSafeId, type ResponseHead } from '../codecs/codec.js'
import { classifyUpstreamError, INCOMPLETE_STREAM, isProviderFault, isRetryableStatus, STREAM_ERROR, type UpstreamFailure } from './failures.js'
import type { AttemptPlan } from './plan.js'
import type { UpstreamPools } from './pools.js'
import type { ResponseSink } from './sink.js'
import type { ProviderPayer } from '../settlement/settlement.js'

const MAX_ERROR_BODY = 64 * 1024
/** A held answer larger than this is a broken provider, not a completion (the router must hold it whole). */
const MAX_HELD_RESPONSE = 64 * 1024 * 1024
/**
 * A stream event longer than this is a broken provider. An event is held until it ends and then written whole,
 * to a client that may not be reading: at the JSON bound, six streams of one endless event each took the router
 * from 129 MB to 954 MB. A chat chunk is a token or a few; an image inlined as a data URL is a few MiB.
 */
export const MAX_STREAM_EVENT = 8 * 1024 * 1024

function tooLarge(bound = MAX_HELD_RESPONSE): Error {
  return Object.assign(new Error(`provider response exceeds ${bound} bytes`), { code: 'UND_ERR_RES_EXCEEDED_MAX_SIZE' })
}

/** A request body as an attempt sends it: bytes, a stream, or an upload's reader (request-body.ts). */
export type UpstreamBody = Dispatcher.DispatchOptions['body'] | AsyncIterable<Buffer>

/** Why an attempt produced no answer, as the loop decides on it. */
export const enum MissKind {
  Failure,
  Timeout,
  /** The provider answered 429. */
  RateLimited,
}

/** What an attempt reports to the loop that runs it. */
export interface AttemptOwner {
  readonly sink: ResponseSink
  /** Failed before anything reached the receiver: the loop may try the next candidate. */
  missed(a: AttemptHandler, attempt: Attempt, kind: MissKind, retryAfter: string): void
  /** A provider error other than 5xx/429, passed through as it is. */
  passThrough(a: AttemptHandler, contentType: string, body: Buffer): void
  /** A streamed answer's first bytes are about to go out: the response head is written now. */
  beginStream(a: AttemptHandler): void
  /** The answer is whole (a stream ended, or a held answer was read). */
  answered(a: AttemptHandler): void
  /** A streamed answer broke after its first byte reached the receiver. */
  broke(a: AttemptHandler, failure: UpstreamFailure): void
  /** The receiver went away. `produced`: the provider did work worth billing (relayed events or a whole answer). */
  abandoned(a: AttemptHandler, produced: boolean): void
  /** Our own code threw while handling this attempt. */
  crashed(a: AttemptHandler, err: unknown): void
}

export interface AttemptSettings {
  readonly pools: UpstreamPools
  readonly book: HealthBook
  readonly health: HealthSettings
  /** Pays the providers of a chain registry (src/settlement/); absent or null: providers are not paid by the router. */
  readonly payer?: ProviderPayer | null
}

const enum Phase {
  /** Waiting for the response status. */
  Pending,
  /** Retryable status: the body is drained and dropped while the next candidate runs. */
  Draining,
  /** A 2xx the codec cannot read: the request was aborted, nothing more is looked at. */
  Rejected,
  /** A client error passed through as it is. */
  Passthrough,
  /** 2xx, relaying or holding the answer. */
  Relaying,
  Done,
}

export class AttemptHandler implements Dispatcher.DispatchHandler {
  readonly offer: Offer
  readonly plan: AttemptPlan<Usage>
  /** The provider's HTTP status, 0 until it arrives. */
  status = 0
  readonly #owner: AttemptOwner
  readonly #settings: AttemptSettings
  /** undici's abort for this request, from onConnect; null before it. */
  #abortRequest: ((err?: Error) => void) | null = null
  /** undici's resume for a read paused by onData returning false, from onHeaders. */
  #resumeRead: (() => void) | null = null
  #phase = Phase.Pending
  #startedAt = 0
  #ttfbMs = -1
  /** A held answer (or refusal), in one growing buffer; its first read kept as it came (most answers are one). */
  readonly #held = new GrowingBody(MAX_HELD_RESPONSE)
  #contentType = ''
  #abortReason: Error | null = null
  /** The request's total time ran out: a provider failure (a timeout), unlike #abortReason (we gave up). */
  #expired: Error | null = null
  /** performance.now() by which the whole request must be over: the pools fail the attempt then (pools.ts). */
  deadline = Infinity
  /** Its slot among the pools' attempts under way (ActiveAttempts), -1 when not there. */
  activeSlot = -1
  #inflight = false
  /** This try is its provider's half-open trial (health.ts): released with the attempt. */
  #trial = false
  #crashed = false
  /** False once a write to the receiver reported backpressure, until it drains (the upstream read waits). */
  #writable = true
  readonly #emit = (bytes: Buffer): void => this.#emitToReceiver(bytes)
  /**
   * Set before dispatch when the answer's TEE signature is to be checked (asked for, or sampled): every byte of
   * the provider's answer is hashed as it arrives. Null for every other request, which pays nothing.
   */
  recorder: TeeRecorder | null = null
  /** The payer's session token sent to a paid provider (`Authorization`), '' for a provider the router does not pay. */
  authorization = ''
  /** The provider's chat id from its ZG-Res-Key header ('' when absent or unusable): preferred as SVC-Res-Key. */
  resKey = ''

  constructor(owner: AttemptOwner, settings: AttemptSettings, offer: Offer, plan: AttemptPlan<Usage>) {
    this.#owner = owner
    this.#settings = settings
    this.offer = offer
    this.plan = plan
  }

  /** Time to the response's first byte in ms, -1 before it. */
  get ttfbMs(): number {
    return this.#ttfbMs
  }

  /**
   * `deadline`: performance.now() by which the whole request must be over (upstream.total_timeout_ms).
   * `trace`: the client's trace context, sent on as is unless a subscriber of attempt:start replaces it.
   */
  dispatch(requestId: string, body: UpstreamBody, deadline: number, trace: ClientTrace): void {
    const pools = this.#settings.pools
    this.#startedAt = performance.now()
    this.#trial = this.offer.provider.health.claimTrial(this.#startedAt)
    this.offer.stats.inflight++
    this.#inflight = true
    this.deadline = deadline
    pools.watch(this)
    if (pools.drainError !== null) this.fail(pools.drainError)
    try {
      this.#send(requestId, body, trace)
    } catch (err) {
      // Refused synchronously (a header undici will not send): nothing is under way.
      this.#phase = Phase.Done
      this.#release()
      throw err
    }
  }

  #send(requestId: string, body: UpstreamBody, trace: ClientTrace): void {
    const provider = this.offer.provider
    const pools = this.#settings.pools
    let traceparent = trace.traceparent
    let tracestate = trace.tracestate
    if (attemptStart.hasSubscribers) {
      const e: AttemptStartEvent = { requestId, provider: provider.address, traceparent, tracestate }
      attemptStart.publish(e)
      traceparent = e.traceparent
      tracestate = e.tracestate
    }
    // One array of its final length, filled in place: spreads of the plan's list and then of that copy made two
    // arrays per request (and a literal's spread grows its store as it goes).
    const planned = this.plan.headers
    const authorization = this.authorization
    const n = planned.length
    const extra = (authorization === '' ? 0 : 2) + 2 + (traceparent === '' ? 0 : tracestate === '' ? 2 : 4)
    const headers = new Array<string>(n + extra)
    for (let i = 0; i < n; i++) headers[i] = planned[i]!
    let at = n
    if (authorization !== '') {
      headers[at++] = 'authorization'
      headers[at++] = authorization
    }
    headers[at++] = 'x-request-id'
    headers[at++] = requestId
    if (traceparent !== '') {
      headers[at++] = 'traceparent'
      headers[at++] = traceparent
      if (tracestate !== '') {
        headers[at++] = 'tracestate'
        headers[at] = tracestate
      }
    }
    const upstream = pools.upstream(provider.url)
    // No per-request headersTimeout / bodyTimeout: the pool was made with the same settings (pools.ts).
    // undici's types leave out async iterables, which its Request takes (and writes chunk by chunk, asking for
    // the next once the last is with the socket: request-body.ts UploadReader relies on it).
    const payload = body as Dispatcher.DispatchOptions['body']
    upstream.pool.dispatch({ path: upstreamPath(upstream.basePath, provider.record.api_path, this.plan.path), method: 'POST', headers, body: payload }, this)
  }

  abort(reason: Error): void {
    this.#abortReason = reason
    this.#abortRequest?.(reason)
  }

  onConnect(abort: (err?: Error) => void): void {
    this.#abortRequest = abort
    if (this.#abortReason !== null) abort(this.#abortReason)
    else if (this.#expired !== null) abort(this.#expired)
  }

  /** Ends the attempt as a provider failure (`err.code` as failures.ts classifies it), unlike abort(). */
  fail(err: Error): void {
    if (this.#phase === Phase.Done || this.#expired !== null) return
    this.#expired = err
    this.#abortRequest?.(err)
  }

  /** Returns false to pause the read (never here); undici's `resume` restarts a read paused by onData. */
  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    // An interim response (102 Processing, 103 Early Hints) comes through here too: the final one follows.
    if (statusCode < 200) return true
    this.#resumeRead = resume
    try {
      this.#start(statusCode, responseHead(rawHeaders))
    } catch (err) {
      this.#crash(err)
    }
    return true
  }

  /** False while the receiver is slow: undici stops reading until it drains (#data asks to be told). */
  onData(chunk: Buffer): boolean {
    try {
      this.#data(chunk)
    } catch (err) {
      this.#crash(err)
    }
    return this.#writable
  }

  onComplete(): void {
    try {
      this.#end()
    } catch (err) {
      this.#crash(err)
    }
  }

  onError(err: Error): void {
    try {
      this.#error(err)
    } catch (thrown) {
      this.#crash(thrown)
    }
  }

  #crash(err: unknown): void {
    if (this.#crashed) return
    this.#crashed = true
    this.#phase = Phase.Done
    this.#release()
    this.abort(new Error('attempt abandoned after an internal error'))
    this.#owner.crashed(this, err)
  }

  #record(): Attempt {
    return { provider: this.offer.provider.address, status: this.status === 0 ? null : this.status }
  }

  #start(statusCode: number, head: ResponseHead): void {
    this.status = statusCode
    this.#contentType = head.contentType
    const health = this.offer.provider.health
    const address = this.offer.provider.address
    if (isRetryableStatus(statusCode)) {
      this.#phase = Phase.Draining
      if (isProviderFault(statusCode)) health.recordFailure(performance.now(), this.#settings.health, this.#trial)
      const kind = statusCode === 429 ? MissKind.RateLimited : MissKind.Failure
      this.#owner.missed(this, { provider: address, status: statusCode, error: `http_${statusCode}` }, kind, head.retryAfter)
      return
    }
    if ((statusCode === 401 || statusCode === 402) && this.authorization !== '') {
      // A paid provider refused the token or the balance: not the client's error, a miss (failover.ts renews or moves on).
      this.#phase = Phase.Draining
      this.#owner.missed(this, { provider: address, status: statusCode, error: statusCode === 401 ? 'payment_token_refused' : 'payment_required' }, MissKind.Failure, '')
      return
    }
    if (statusCode >= 400) {
      health.recordSuccess(performance.now(), this.#trial)
      this.#phase = Phase.Passthrough
      return
    }
    if (!this.plan.codec.accepts(this.#contentType)) {
      // A success that is not what was asked for (HTML, JSON for a stream): never relayed as if it were.
      this.#phase = Phase.Rejected
      this.#release()
      health.recordFailure(performance.now(), this.#settings.health, this.#trial)
      this.#abortRequest?.(new Error('unexpected content type'))
      this.#owner.missed(this, { provider: address, status: statusCode, error: 'unexpected_content_type' }, MissKind.Failure, '')
      return
    }
    health.recordSuccess(performance.now(), this.#trial)
    this.plan.codec.onHeaders?.(head)
    if (head.resKey !== '' && isHeaderSafeId(head.resKey)) this.resKey = head.resKey
    this.#phase = Phase.Relaying
  }

  #data(chunk: Buffer): void {
    const phase = this.#phase
    if (phase === Phase.Draining || phase === Phase.Rejected || phase === Phase.Done) return
    if (phase === Phase.Relaying && this.#ttfbMs < 0) {
      this.#ttfbMs = performance.now() - this.#startedAt
      this.offer.stats.observeTtfb(this.#ttfbMs, this.#settings.health.ewmaAlpha)
      this.#settings.book.latencyEpoch++
    }
    const codec = this.plan.codec
    if (phase === Phase.Relaying && this.recorder !== null) this.recorder.received(chunk)
    if (phase === Phase.Relaying && codec.streaming) {
      codec.push(chunk, this.#emit)
      if (codec.terminated === true) return this.#endEarly()
      if (codec.pendingBytes > MAX_STREAM_EVENT) {
        // One event that never ends is a broken provider: held without bound it would be memory without bound.
        this.#abortRequest?.(tooLarge(MAX_STREAM_EVENT))
        return
      }
      if (!this.#writable) {
        this.#owner.sink.onWritable(() => {
          this.#writable = true
          this.#resumeRead?.()
        })
      }
      return
    }
    const size = this.#held.size
    if (phase === Phase.Passthrough && size + chunk.length > MAX_ERROR_BODY) return
    if (size + chunk.length > MAX_HELD_RESPONSE) {
      this.#abortRequest?.(tooLarge())
      return
    }
    // One growing buffer, not a list of reads: a provider sending its answer a byte at a time must not cost an
    // object per byte (codecs/body-chunks.ts).
    this.#held.keep(chunk)
  }

  #emitToReceiver(bytes: Buffer): void {
    const sink = this.#owner.sink
    if (sink.started) {
      if (!sink.write(bytes)) this.#writable = false
      return
    }
    // The head leaves with the first bytes, in one write: begun on its own, uWS sends the head by itself (a
    // system call more per stream, and a head split across two segments).
    sink.cork(() => {
      this.#owner.beginStream(this)
      if (!sink.write(bytes)) this.#writable = false
    })
  }

  #body(): Buffer {
    return this.#held.bytes()
  }

  /** A stream whose body ended without the provider's end marker: counted against the provider, and which failure it was. */
  #unended(): UpstreamFailure {
    this.offer.provider.health.recordFailure(performance.now(), this.#settings.health, this.#trial)
    return this.plan.codec.streamError === true ? STREAM_ERROR : INCOMPLETE_STREAM
  }

  #end(): void {
    const phase = this.#phase
    this.#phase = Phase.Done
    this.#release()
    if (phase === Phase.Draining || phase === Phase.Rejected || phase === Phase.Done) return
    const owner = this.#owner
    const codec = this.plan.codec
    if (phase === Phase.Passthrough) {
      if (owner.sink.aborted) return owner.abandoned(this, false)
      return owner.passThrough(this, this.#contentType, this.#body())
    }
    if (codec.streaming) {
      if (owner.sink.aborted) {
        codec.finish(noop)
        return owner.abandoned(this, true)
      }
      if (owner.sink.started) {
        codec.finish(this.#emit)
        if (codec.ended) return owner.answered(this)
        // Cut short with a clean end of body, or an error reported inside: bytes reached the receiver, so it
        // ends as any broken stream.
        return owner.broke(this, this.#unended())
      }
      // Nothing reached the receiver yet: what the body's end flushes is held until it is known to be whole,
      // so a stream that ended before its end marker is still a miss the loop can fail over from.
      const tail: Buffer[] = []
      codec.finish((bytes) => tail.push(bytes))
      if (!codec.ended) return owner.missed(this, { ...this.#record(), error: this.#unended().reason }, MissKind.Failure, '')
      for (const bytes of tail) this.#emitToReceiver(bytes)
      return owner.answered(this)
    }
    const valid = codec.read(this.#body())
    if (owner.sink.aborted) return owner.abandoned(this, valid)
    if (!valid) {
      this.offer.provider.health.recordFailure(performance.now(), this.#settings.health, this.#trial)
      return owner.missed(this, { ...this.#record(), error: 'invalid_json' }, MissKind.Failure, '')
    }
    owner.answered(this)
  }

  /**
   * The provider sent its stream's last event: the answer ends now, as if its body had ended. What the body
   * still holds is read and dropped (Draining), so that a provider which ends its response as it should keeps
   * its connection for the next request; one that keeps it open is cut by the pool's body timeout, unheard.
   */
  #endEarly(): void {
    // The read must go on for the rest to be dropped: a receiver's backpressure no longer holds it.
    this.#writable = true
    this.#end()
    this.#phase = Phase.Draining
  }

  #error(err: Error): void {
    const phase = this.#phase
    this.#phase = Phase.Done
    this.#release()
    if (phase === Phase.Draining || phase === Phase.Rejected || phase === Phase.Done) return
    const owner = this.#owner
    if (this.#abortReason !== null || owner.sink.aborted) {
      const codec = this.plan.codec
      return owner.abandoned(this, phase === Phase.Relaying && codec.streaming && codec.produced)
    }
    const failure = classifyUpstreamError(err)
    this.offer.provider.health.recordFailure(performance.now(), this.#settings.health, this.#trial)
    if (!owner.sink.started) {
      return owner.missed(this, { ...this.#record(), error: failure.reason }, failure.timeout ? MissKind.Timeout : MissKind.Failure, '')
    }
    // Bytes already reached the receiver: no failover, no fake success (DESIGN.md §4).
    owner.broke(this, failure)
  }

  #release(): void {
    if (!this.#inflight) return
    if (this.#trial) {
      this.#trial = false
      this.offer.provider.health.endTrial()
    }
    this.#settings.pools.forget(this)
    this.#settings.pools.limiter.release(this.offer.provider.address)
    this.#inflight = false
    this.offer.stats.inflight--
  }
}

function noop(): void {}

/**
 * The path of a plan's route (`/v1/…`) at a provider: below its URL's path, with `/v1` where the provider keeps
 * it (registry/types.ts api_path). A file registry's '/v1' costs nothing more than the concatenation.
 */
export function upstreamPath(basePath: string, apiPath: string, planPath: string): string {
  return apiPath === '/v1' ? basePath + planPath : basePath + apiPath + planPath.slice(3)
}

/** Whether `name` is `lower` (lowercase ASCII) in any case, compared byte by byte. */
function isHeader(name: Buffer, lower: string): boolean {
  if (name.length !== lower.length) return false
  for (let i = 0; i < name.length; i++) {
    if ((name[i]! | 0x20) !== lower.charCodeAt(i)) return false
  }
  return true
}

/** The three headers out of undici's raw list (name, value, name, value…), with nothing built for the rest. */
export function responseHead(raw: readonly Buffer[]): ResponseHead {
  // undefined: not seen. A second copy of a header makes it '' (a repeated Content-Type means nothing).
  let contentType: string | undefined
  let retryAfter: string | undefined
  let requestId: string | undefined
  let resKey: string | undefined
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!
    // Lengths first: most headers are none of the three and cost one comparison.
    const n = name.length
    if (n === 12) {
      if (isHeader(name, 'content-type')) contentType = contentType === undefined ? raw[i + 1]!.toString('latin1') : ''
      else if (isHeader(name, 'x-request-id')) requestId = requestId === undefined ? raw[i + 1]!.toString('latin1') : ''
    } else if (n === 11 && isHeader(name, 'retry-after')) retryAfter = retryAfter === undefined ? raw[i + 1]!.toString('latin1') : ''
    else if (n === 10 && isHeader(name, 'zg-res-key')) resKey = resKey === undefined ? raw[i + 1]!.toString('latin1') : ''
  }
  return { contentType: contentType ?? '', retryAfter: retryAfter ?? '', requestId: requestId ?? '', resKey: resKey ?? '' }
}
