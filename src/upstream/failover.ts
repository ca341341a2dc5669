/**
 * The one failover loop (DESIGN.md §4, §5): every surface's request runs here. It tries candidates in order,
 * asking the surface for a plan per candidate; connect errors, resets and timeouts before the first byte, 5xx,
 * 429 and answers of the wrong kind move on to the next candidate when fallbacks are allowed; any other 4xx goes
 * back with its status (its body in the envelope of the client's format: codec.errorBody); once a byte has
 * reached the receiver, a failure ends the answer with the codec's error event.
 *
 * Billing: the loop owns the request's budget. Before each attempt the reservation is (re)priced for that
 * candidate; an answer's last byte (the codec's completion, which carries the trace) goes out only once its
 * charge is durable; a request that fails, is refused or is abandoned before the provider produced anything
 * releases its reservation. Nothing thrown inside the loop escapes it: the request gets a 500 (or an error event)
 * and every other request carries on.
 */
import type { Budget } from '../billing/budget.js'
import type { ResponseCodec } from '../codecs/codec.js'
import { mayHoldTrace, stripTraces } from '../codecs/foreign-trace.js'
import { spliceTrace } from '../codecs/trace-splice.js'
import { usageCounts, type Cost, type Usage, type UsageCounts } from '../billing/cost.js'
import type { BilledCost } from '../billing/budget.js'
import { traceObject, ZERO_COST, type Attempt } from '../billing/trace.js'
import { RouterError } from '../errors.js'
import { log } from '../log.js'
import type { Offer } from '../routing/offers.js'
import type { Selection } from '../routing/select.js'
import type { EngineSurface, SurfaceRequest } from '../surfaces/surface.js'
import { attemptEnd, requestEnd, requestStart, settled } from '../telemetry/events.js'
import type { ClientTrace } from '../telemetry/trace-context.js'
import { AttemptHandler, MissKind, type AttemptOwner, type AttemptSettings, type UpstreamBody } from './attempt.js'
import type { UpstreamFailure } from './failures.js'
import type { HeaderList, ResponseSink } from './sink.js'
import { decimalDigits } from '../vocabulary/http.js'
import { TeeRecorder, within, type TeeOutcome, type TeeVerifier } from '../tee/verify.js'

/** What the loop needs from the server for its whole life. */
export interface EngineContext extends AttemptSettings {
  readonly maxAttempts: number
  /** Checks TEE providers' signatures on answers (src/tee/); absent: a request that asks gets tee_verified false. */
  readonly tee?: TeeVerifier | null
}

/** One admitted request, as the loop runs it. */
export interface EngineRequest<R extends SurfaceRequest, U extends Usage = Usage> {
  readonly requestId: string
  /** performance.now() at arrival. */
  readonly startedAt: number
  readonly surface: EngineSurface<R, U>
  readonly request: R
  /** Headers every answer of this request carries (request id, rate limit). */
  readonly baseHeaders: HeaderList
  readonly selection: Selection
  readonly budget: Budget
  /** The client's W3C trace context, passed to the provider on every attempt. */
  readonly trace: ClientTrace
}

const JSON_TYPE = ['Content-Type', 'application/json']

/** The longest wait passed on from a provider's Retry-After (a day): a date years ahead is no advice. */
export const MAX_RETRY_AFTER_S = 86_400

/** The day names an HTTP-date starts with (IMF-fixdate and asctime "Sun", RFC 850 "Sunday"), case-sensitive. */
const DAY_NAMES: readonly string[] = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun']

/**
 * Retry-After as seconds (RFC 9110 §10.2.3): the provider's delta-seconds, or its HTTP-date turned into seconds,
 * at most a day; 1 when unusable. Delta-seconds of any length count (past a day, a day). Only a value that
 * starts with a day name and has a time of day (hh:mm:ss) is handed to Date.parse, which reads "-5", "1.5",
 * "120, 5" or "soon x" as dates long past (a wait of 0).
 */
export function retryAfterSeconds(value: string, now = Date.now()): string {
  const v = value.trim()
  const seconds = decimalDigits(v, 10)
  if (seconds >= 0) return String(Math.min(seconds, MAX_RETRY_AFTER_S))
  if (v.length > 10 && decimalDigits(v, v.length) >= 0) return String(MAX_RETRY_AFTER_S)
  if (!DAY_NAMES.includes(v.slice(0, 3)) || !hasTimeOfDay(v)) return '1'
  const at = Date.parse(v)
  if (Number.isFinite(at)) return String(Math.min(MAX_RETRY_AFTER_S, Math.max(0, Math.ceil((at - now) / 1000))))
  return '1'
}

/** Whether `v` holds two digits, a colon, two digits, a colon and two digits (the time of an HTTP-date). */
function hasTimeOfDay(v: string): boolean {
  const digit = (i: number): boolean => v.charCodeAt(i) >= 48 && v.charCodeAt(i) <= 57
  for (let i = v.indexOf(':'); i >= 2 && i + 5 < v.length; i = v.indexOf(':', i + 1)) {
    if (digit(i - 2) && digit(i - 1) && digit(i + 1) && digit(i + 2) && v[i + 3] === ':' && digit(i + 4) && digit(i + 5)) return true
  }
  return false
}

/** Whether a body is a JSON object. */
function isJsonObject(body: Buffer): boolean {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'))
    return value !== null && typeof value === 'object' && !Array.isArray(value)
  } catch {
    return false
  }
}

/**
 * An error body (a JSON object) with `trace` as its only `x_svc_trace` member: spliced in before the closing
 * brace; when the provider's own object may hold one in any spelling (foreign-trace.ts), parsed, every such
 * member removed, and written again with ours last.
 */
function withTrace(envelope: string | Buffer, trace: Record<string, unknown>): string | Buffer {
  const body = typeof envelope === 'string' ? Buffer.from(envelope) : envelope
  if (mayHoldTrace(body)) {
    try {
      const value: unknown = JSON.parse(body.toString('utf8'))
      if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
        stripTraces(value)
        return JSON.stringify({ ...value, x_svc_trace: trace })
      }
    } catch {
      // Not JSON, or too deep to write back: what a reader would take for its trace is unknown, so the
      // provider's body does not go out at all.
    }
    return JSON.stringify({ error: { message: 'the provider answered with an error body the router does not relay', type: 'provider_error' }, x_svc_trace: trace })
  }
  return spliceTrace(body, ',"x_svc_trace":' + JSON.stringify(trace)) ?? envelope
}

/**
 * What an answer owes a chain provider at its own prices (neuron, exact): prompt and completion tokens at its input
 * and output price; images, and audio seconds (rounded up to whole milliseconds' worth), at its output price.
 */
export function neuronOwed(price: { readonly input: string; readonly output: string }, counts: UsageCounts): bigint {
  const input = BigInt(price.input)
  const output = BigInt(price.output)
  return (
    BigInt(counts.promptTokens) * input +
    BigInt(counts.completionTokens) * output +
    BigInt(counts.images) * output +
    (BigInt(counts.audioMs) * output + 999n) / 1000n
  )
}

export class Failover<R extends SurfaceRequest, U extends Usage = Usage> implements AttemptOwner {
  readonly sink: ResponseSink
  readonly #ctx: EngineContext
  readonly #req: EngineRequest<R, U>
  readonly #attempts: Attempt[] = []
  #current: AttemptHandler | null = null
  #lastKind = MissKind.Failure
  #lastRetryAfter = ''
  #finished = false
  /** Telemetry only: set once the request's end was published, and what was billed (atto-USD). */
  #ended = false
  #billed = 0n
  /** Candidates skipped because their concurrency cap and queue were full. */
  #busy = 0
  /** A provider's refusal of the payer's token was answered with a renewed one (once per request). */
  #renewed = false
  /** Candidates that could not serve the request (AttemptPlan.refusal), and the last such refusal. */
  #refused = 0
  #refusal: RouterError | null = null
  /** An attempt whose whole answer waits for the request's body to be judged (answerWhen). */
  #held: AttemptHandler | null = null

  constructor(ctx: EngineContext, req: EngineRequest<R, U>, sink: ResponseSink) {
    this.#ctx = ctx
    this.#req = req
    this.sink = sink
    sink.onAborted(() => this.#onReceiverGone())
  }

  start(): void {
    const req = this.#req
    if (requestStart.hasSubscribers) {
      requestStart.publish({
        requestId: req.requestId,
        surface: req.surface.name,
        model: req.request.model,
        stream: req.request.stream,
        startedAt: req.startedAt,
        traceparent: req.trace.traceparent,
        tracestate: req.trace.tracestate,
      })
    }
    this.#tryNext()
  }

  /**
   * Ends the request with `err` whatever attempt is under way (an upload broke a limit mid-way): the attempt is
   * cancelled and nothing is billed. Too late once the answer began: then only the attempt is cancelled.
   */
  cancel(err: RouterError): void {
    if (this.#finished && this.#current === null) return
    const answer = !this.#finished && !this.sink.started
    this.#finished = true
    const current = this.#current
    this.#current = null
    // Answered first: the abort below may report the attempt abandoned at once, and then nothing is left to say.
    if (answer) this.#sendFailure(err)
    current?.abort(new Error(err.message))
  }

  /**
   * More of the request's body was read, which may lower its worst case (an edit's `n` came after its image):
   * the hold of the attempt under way follows it down, so that room goes back to the key and the account now.
   */
  repriced(): void {
    const current = this.#current
    const req = this.#req
    const budget = req.budget
    if (current === null || !budget.open || budget.lower === undefined) return
    try {
      budget.lower(req.surface.worstCase(req.request, current.offer))
    } catch (err) {
      this.#crash(null, err)
    }
  }

  #tryNext(): void {
    if (this.#finished || this.sink.aborted) return
    const req = this.#req
    // A candidate that could not serve the request (a refusal) was never sent it: it is no try.
    const offer = this.#attempts.length - this.#refused < this.#ctx.maxAttempts ? req.selection.next() : null
    if (offer === null) return this.#failAll()
    this.#reserve(offer)
  }

  /** The hold for `offer`, then the attempt (tried again when the surface may learn it costs less: #afterReserve). */
  #reserve(offer: Offer): void {
    if (this.#finished || this.sink.aborted) return
    const req = this.#req
    let refused
    let amount: bigint
    try {
      // Re-priced for this candidate: the previous one's hold is given back first.
      amount = req.surface.worstCase(req.request, offer)
      refused = req.budget.hold(amount)
    } catch (err) {
      return this.#crash(null, err)
    }
    if (refused instanceof Promise) {
      // Waiting for room that requests in flight hold (billing/budget-waiters.ts).
      refused.then(
        (outcome) => this.#afterReserve(offer, outcome, amount),
        (err: unknown) => this.#crash(null, err),
      )
      return
    }
    this.#afterReserve(offer, refused, amount)
  }

  #afterReserve(offer: Offer, refused: RouterError | null, amount: bigint): void {
    const req = this.#req
    if (this.#finished || this.sink.aborted) {
      // The receiver went away while this request waited: what it holds now goes back.
      if (req.budget.open) req.budget.release()
      return
    }
    if (refused !== null) {
      // More of the body may lower the worst case (an edit's `n`): the hold is tried again once it was read, or
      // at once when it was read while this hold waited for room.
      const surface = req.surface
      if (surface.retryHoldWhen !== undefined) {
        let lower = false
        try {
          lower = surface.worstCase(req.request, offer) < amount
        } catch (err) {
          return this.#crash(null, err)
        }
        if (lower) return this.#reserve(offer)
        if (surface.retryHoldWhen(req.request, () => this.#reserve(offer))) return
      }
      this.#finished = true
      return this.#sendFailure(refused)
    }
    const payer = this.#ctx.payer
    let authorization = ''
    if (payer != null) {
      // Never a request the router has not paid for: a provider whose token is not ready is skipped, unsent.
      const token = payer.authorization(offer.provider.address)
      if (token === null) {
        this.#attempts.push({ provider: offer.provider.address, status: null, error: 'provider_unpaid' })
        return this.#tryNext()
      }
      authorization = token
    }
    let handler: AttemptHandler
    let body: UpstreamBody | null
    try {
      const plan = req.surface.plan(req.request, offer)
      if (plan.refusal !== undefined) {
        // Not sent: this candidate cannot serve what the request asks; another may.
        this.#attempts.push({ provider: offer.provider.address, status: null, error: plan.refusal.code })
        this.#refused++
        this.#refusal = plan.refusal
        return this.#tryNext()
      }
      body = plan.body.take()
      if (body === null) {
        // A streamed body past its replay buffer cannot be sent again: failover ends here.
        this.#attempts.push({ provider: offer.provider.address, status: null, error: 'request_body_not_replayable' })
        return this.#failAll()
      }
      handler = new AttemptHandler(this, this.#ctx, offer, plan)
      handler.authorization = authorization
      // Hashing only for an attempt whose signature will be checked: asked for, or a background sample.
      const tee = this.#ctx.tee
      if (tee != null && Buffer.isBuffer(body)) {
        const asked = req.request.verifyTee === true
        if (asked || tee.sample(offer.provider.record)) handler.recorder = new TeeRecorder(body, !asked)
      }
    } catch (err) {
      return this.#crash(null, err)
    }
    this.#current = handler
    // The per-provider cap (limiter.ts): run now, after a wait in its queue, or move on to the next candidate.
    const limiter = this.#ctx.pools.limiter
    if (limiter.tryAcquire(offer.provider.address)) return this.#dispatch(handler, body)
    const run = (): void => this.#dispatch(handler, body)
    limiter.acquire(offer.provider.address, run, () => {
      if (this.#current !== handler) return this.#unsent()
      this.#busy++
      this.missed(handler, { provider: offer.provider.address, status: null, error: 'provider_busy' }, MissKind.Failure, '')
    })
  }

  missed(a: AttemptHandler, attempt: Attempt, kind: MissKind, retryAfter: string): void {
    this.#attempts.push(attempt)
    this.#publishAttempt(a, attempt)
    this.#lastKind = kind
    this.#lastRetryAfter = retryAfter
    if (a !== this.#current) return
    this.#current = null
    const payer = this.#ctx.payer
    if (payer != null && (attempt.status === 401 || attempt.status === 402) && a.authorization !== '') {
      const refusal = payer.refused(a.offer.provider.address, attempt.status)
      if (attempt.status === 401 && !this.#renewed) {
        // Re-read the account, renew the token, and try the same provider once more before moving on.
        this.#renewed = true
        const offer = a.offer
        refusal.then(
          (renewed) => (renewed ? this.#reserve(offer) : this.#tryNext()),
          (err: unknown) => this.#crash(null, err),
        )
        return
      }
    }
    this.#tryNext()
  }

  passThrough(a: AttemptHandler, contentType: string, body: Buffer): void {
    const req = this.#req
    req.budget.release()
    this.#answeredBy(a, `http_${a.status}`)
    const codec = a.plan.codec
    if (codec.errorBody !== undefined) {
      // The provider's error in the envelope of the format the client speaks, whatever the provider wrote, with
      // the trace every inference answer carries (spec §2.5): who answered, nothing billed, every try.
      const out = withTrace(codec.errorBody(a.status, body, req.requestId), this.#trace(a, null, null))
      this.sink.send(a.status, [...JSON_TYPE, ...req.baseHeaders], out)
    } else {
      // Relayed as the provider wrote it (an Anthropic-native error on /v1/messages), but for the trace: a JSON
      // object, whatever Content-Type it came under (SDKs parse an error body that parses), gets ours and loses
      // any of the provider's.
      const ct = contentType === '' ? 'application/json' : contentType
      const out = isJsonObject(body) ? withTrace(body, this.#trace(a, null, null)) : body
      this.sink.send(a.status, ['Content-Type', ct, ...req.baseHeaders], out)
    }
    this.#publishEnd(a.status, a, `http_${a.status}`)
  }

  beginStream(a: AttemptHandler): void {
    this.sink.begin(200, this.#answerHeaders(a))
  }

  answered(a: AttemptHandler): void {
    const req = this.#req
    // A body still judged as it streams (a form's later fields) holds the answer back until it passed: what a
    // refusal of it meanwhile answers instead (cancel), and a receiver that leaves, are never billed.
    if (req.surface.answerWhen?.(req.request, () => this.#judged(a)) === false) {
      this.#held = a
      return
    }
    const codec = a.plan.codec
    this.#answeredBy(a, null)
    const streaming = codec.streaming
    if (streaming && !this.sink.started) {
      // The provider sent no event at all before ending: still a well-formed (empty) stream for the receiver.
      this.beginStream(a)
    }
    const usage = codec.usage(req.request.promptBytes)
    // A verification asked for runs beside the charge; the trace waits for both (bounded: tee.verify_timeout_ms).
    const verifying = req.request.verifyTee === true ? this.#verifyTee(a) : null
    // The last bytes, which carry the trace, wait for the durable charge: a delivered answer is a billed one.
    this.#bill(a, usage, (billed, err) => {
      if (err !== null) {
        const trace = this.#trace(a, usage, null)
        if (streaming) this.sink.end(codec.fail(err, req.requestId, trace))
        else this.sink.send(err.status, [...JSON_TYPE, ...req.baseHeaders], req.surface.renderError(err, req.requestId, trace))
        return this.#publishEnd(err.status, a, err.code)
      }
      if (verifying !== null) {
        verifying.then(
          (outcome) => {
            try {
              if (this.sink.aborted) return this.#publishEnd(499, a, 'client_closed')
              const trace = this.#trace(a, usage, billed)
              trace.tee_verified = outcome.verified
              if (outcome.reason !== undefined) trace.tee_reason = outcome.reason
              this.#deliver(a, trace)
            } catch (thrown) {
              this.#crash(a, thrown)
            }
          },
          (thrown: unknown) => this.#crash(a, thrown),
        )
        return
      }
      this.#deliver(a, this.#trace(a, usage, billed))
      const recorder = a.recorder
      // A background sample: checked once the client has its answer, so it costs the client nothing.
      if (recorder !== null && recorder.sampled) void this.#ctx.tee?.verify(a.offer.provider.record, req.request.model, this.#chatId(a), recorder)
    })
  }

  /** Sends `handler`'s request, once it holds a slot of its provider. */
  #dispatch(handler: AttemptHandler, body: UpstreamBody): void {
    const req = this.#req
    try {
      handler.dispatch(req.requestId, body, req.startedAt + this.#ctx.pools.settings.totalTimeoutMs, req.trace)
    } catch (err) {
      // undici refuses some requests synchronously (a header it will not send): that candidate failed.
      this.missed(handler, { provider: handler.offer.provider.address, status: null, error: 'request_rejected' }, MissKind.Failure, '')
      log.warn('upstream dispatch refused the request', { request_id: req.requestId, err: String(err) })
    }
  }

  /**
   * A billed answer goes out. The surface may keep it first (stored responses): the client's last byte waits for
   * that too, and whatever keeping it does, it is delivered (it is billed already). A method, not a closure per
   * request: only a surface that keeps answers makes closures here.
   */
  #deliver(a: AttemptHandler, trace: Record<string, unknown>): void {
    const req = this.#req
    const keep = req.surface.keep
    if (keep === undefined) return this.#complete(a, trace)
    let kept: Promise<void> | null = null
    try {
      kept = keep.call(req.surface, req.request, a.plan.codec as ResponseCodec<U>, trace) ?? null
    } catch (err) {
      this.#notKept(err)
    }
    if (kept === null) return this.#complete(a, trace)
    const guarded = (): void => {
      try {
        this.#complete(a, trace)
      } catch (thrown) {
        this.#crash(a, thrown)
      }
    }
    kept.then(guarded, (err: unknown) => {
      this.#notKept(err)
      guarded()
    })
  }

  #notKept(err: unknown): void {
    log.error('keeping an answer failed; it is sent all the same', { request_id: this.#req.requestId, err: String(err) })
  }

  /** The body `a`'s answer waited for passed: the answer goes out, unless the request ended meanwhile. */
  #judged(a: AttemptHandler): void {
    if (this.#held !== a) return
    this.#held = null
    if (this.#finished || this.sink.aborted || this.#current !== a) return
    try {
      this.answered(a)
    } catch (err) {
      this.#crash(a, err)
    }
  }

  /** The answer's last bytes (the trace in them) and the request's end. */
  #complete(a: AttemptHandler, trace: Record<string, unknown>): void {
    const codec = a.plan.codec
    const out = codec.complete(trace)
    // A success is the router's 200, as a stream's head is: a provider's 201 or 203 says nothing the client asked.
    if (codec.streaming) this.sink.end(out)
    else this.sink.send(200, this.#answerHeaders(a), out)
    this.#publishEnd(200, a, null)
  }

  /** The chat id the provider signs its answer under: its ZG-Res-Key header, else the answer's own id. */
  #chatId(a: AttemptHandler): string {
    return a.resKey !== '' ? a.resKey : a.plan.codec.id
  }

  #verifyTee(a: AttemptHandler): Promise<TeeOutcome> {
    const tee = this.#ctx.tee
    const recorder = a.recorder
    if (tee == null || recorder === null) return Promise.resolve({ verified: false, reason: 'unsupported' })
    const check = tee.verify(a.offer.provider.record, this.#req.request.model, this.#chatId(a), recorder)
    // The deadline counts from when the recovery worker is up (at once but after a start, tee/verify.ts ready).
    return tee.ready().then(() => within(check, tee.timeoutMs, { verified: false, reason: 'timeout' }))
  }

  broke(a: AttemptHandler, failure: UpstreamFailure): void {
    const req = this.#req
    this.#answeredBy(a, failure.reason)
    const down = failure.reason === 'shutting_down'
    const code = down ? 'no_available_provider' : failure.timeout ? 'provider_timeout' : 'provider_error'
    const message = down ? 'the router is shutting down' : failure.timeout ? 'the provider stalled mid-stream' : 'the provider stream broke mid-response'
    const codec = a.plan.codec
    if (!codec.produced) {
      // Nothing but comments reached the receiver: no work to bill, as for a receiver that left (abandoned).
      req.budget.release()
      this.sink.end(codec.fail(new RouterError(code, message), req.requestId, this.#trace(a, null, null)))
      return this.#publishEnd(a.status, a, code)
    }
    // What the provider produced is billed (the codec's estimate), then the answer ends with the error event.
    const usage = codec.usage(req.request.promptBytes)
    this.#bill(a, usage, (billed, err) => {
      const trace = this.#trace(a, usage, err === null ? billed : null)
      this.sink.end(codec.fail(new RouterError(code, message), req.requestId, trace))
      this.#publishEnd(a.status, a, code)
    })
  }

  /** The receiver went away while the attempt waited for room at its provider (limiter.ts): it was never sent. */
  #unsent(): void {
    this.#finished = true
    this.#current = null
    const budget = this.#req.budget
    if (budget.open) budget.release()
    this.#publishEnd(499, null, 'client_closed')
  }

  abandoned(a: AttemptHandler, produced: boolean): void {
    const budget = this.#req.budget
    // The provider was asked: the attempt counts, in the request's end event and the access log.
    this.#answeredBy(a, 'client_closed')
    if (!budget.open) return this.#publishEnd(499, a, 'client_closed')
    // A provider that produced something (events relayed, or a whole answer) did the work: it is billed.
    if (!produced) {
      budget.release()
      return this.#publishEnd(499, a, 'client_closed')
    }
    this.#bill(a, a.plan.codec.usage(this.#req.request.promptBytes), () => this.#publishEnd(499, a, 'client_closed'))
  }

  crashed(a: AttemptHandler, err: unknown): void {
    this.#crash(a, err)
  }

  /** Our own code threw: the request ends with a 500 (or an error event), its hold is given back, nothing else is touched. */
  #crash(a: AttemptHandler | null, err: unknown): void {
    const req = this.#req
    log.error('request failed inside the router', { request_id: req.requestId, err: String((err as Error)?.stack ?? err) })
    this.#finished = true
    const current = this.#current
    this.#current = null
    if (current !== null && current !== a) current.abort(new Error('request failed inside the router'))
    if (req.budget.open) req.budget.release()
    const failure = new RouterError('server_error', 'internal error')
    try {
      const trace = this.#trace(a, null, null)
      if (!this.sink.started) {
        this.sink.send(500, [...JSON_TYPE, ...req.baseHeaders], req.surface.renderError(failure, req.requestId, trace))
      } else {
        this.sink.end(a === null ? undefined : a.plan.codec.fail(failure, req.requestId, trace))
      }
    } catch (thrown) {
      log.error('could not answer a failed request', { request_id: req.requestId, err: String(thrown) })
      this.sink.end()
    }
    this.#publishEnd(500, a, 'server_error')
  }

  /** The attempt that ends the request (answered, passed through, or left by the receiver), recorded. */
  #answeredBy(a: AttemptHandler, error: string | null): void {
    // No status when the receiver left before the provider's head came.
    const status = a.status === 0 ? null : a.status
    const attempt: Attempt = error === null ? { provider: a.offer.provider.address, status } : { provider: a.offer.provider.address, status, error }
    this.#attempts.push(attempt)
    this.#publishAttempt(a, attempt)
    this.#finished = true
    this.#current = null
  }

  #answerHeaders(a: AttemptHandler): string[] {
    const id = this.#chatId(a)
    const base = this.#req.baseHeaders
    const own = a.plan.codec.responseHeaders
    return id === '' ? [...own, ...base] : [...own, 'SVC-Res-Key', id, ...base]
  }

  #onReceiverGone(): void {
    const wasFinished = this.#finished
    this.#finished = true
    const current = this.#current
    this.#current = null
    const held = this.#held
    if (held !== null && held === current) {
      // An answer waiting for the rest of the upload, which will not come: its attempt is over, so nothing
      // else gives the hold back. Not billed: the request it answers never came whole.
      this.#held = null
      this.#answeredBy(held, 'client_closed')
      if (this.#req.budget.open) this.#req.budget.release()
      return this.#publishEnd(499, held, 'client_closed')
    }
    // The attempt under way settles or releases when its abort lands; with none, nothing was produced.
    if (current !== null) current.abort(new Error('client disconnected'))
    else {
      if (this.#req.budget.open) this.#req.budget.release()
      if (!wasFinished) this.#publishEnd(499, null, 'client_closed')
    }
  }

  #failAll(): void {
    this.#finished = true
    const tried = this.#attempts.length
    const model = this.#req.request.model
    let err: RouterError
    if (tried === 0) err = new RouterError('no_available_provider', `no provider is available for model ${model}`)
    else if (this.#refused === tried && this.#refusal !== null) err = this.#refusal
    else if (this.#busy === tried) err = new RouterError('no_available_provider', `every provider of model ${model} is at its concurrency limit (${tried} tried)`)
    else if (this.#lastKind === MissKind.RateLimited) {
      err = new RouterError('provider_rate_limited', `the provider is rate limiting requests (${tried} tried)`, {
        'Retry-After': retryAfterSeconds(this.#lastRetryAfter),
      })
    } else if (this.#lastKind === MissKind.Timeout) err = new RouterError('provider_timeout', `the provider did not answer in time (${tried} tried)`)
    else err = new RouterError('provider_error', `every provider tried failed (${tried} tried)`)
    this.#sendFailure(err)
  }

  /** An error answer before any byte went out: nothing is billed, the reservation is given back. */
  #sendFailure(err: RouterError): void {
    const req = this.#req
    req.budget.release()
    const extra = err.headers === undefined ? [] : Object.entries(err.headers).flat()
    const trace = this.#trace(null, null, null)
    this.sink.send(err.status, [...JSON_TYPE, ...req.baseHeaders, ...extra], req.surface.renderError(err, req.requestId, trace))
    this.#publishEnd(err.status, null, err.code)
  }

  /**
   * Settles the request at `a`'s prices for `usage`; `then` runs once the charge is durable, with the billed
   * amount, or with the error that kept it from being recorded.
   */
  #bill(a: AttemptHandler, usage: Usage, then: (billed: BilledCost, err: RouterError | null) => void): void {
    const req = this.#req
    const budget = req.budget
    const counts = usageCounts(usage)
    // A chain provider's own price of the answer, recorded with the charge; null (one field) for the others.
    const price = a.offer.model.neuron_price
    const neuron = price === undefined ? null : neuronOwed(price, counts)
    const guarded = (billed: BilledCost, err: RouterError | null): void => {
      if (err === null) this.#billed = billed.input + billed.output
      if (settled.hasSubscribers) {
        settled.publish({ requestId: req.requestId, provider: a.offer.provider.address, cost: billed.input + billed.output, durable: err === null, ...(neuron !== null && { neuron }) })
      }
      try {
        then(billed, err)
      } catch (thrown) {
        this.#crash(a, thrown)
      }
    }
    if (!budget.open) {
      // Released already (the receiver went away meanwhile): nothing is recorded, so nothing is delivered.
      return guarded({ ...ZERO_COST, capped: false }, new RouterError('server_error', 'the request was no longer billable'))
    }
    let cost: Cost
    try {
      // The attempt's codec is the one this surface planned, so its usage is the surface's own kind.
      cost = req.surface.cost(a.offer, usage as U)
    } catch (err) {
      return this.#crash(a, err)
    }
    // Named one by one, not a spread of `counts`: a literal of one shape, built in one allocation.
    budget.settle(
      {
        model: req.request.model,
        provider: a.offer.provider.address,
        promptTokens: counts.promptTokens,
        completionTokens: counts.completionTokens,
        images: counts.images,
        audioMs: counts.audioMs,
        cost,
        neuron,
      },
      guarded,
    )
  }

  /** The trace block; `billed` null: nothing was recorded, so it shows a zero cost. */
  #trace(a: AttemptHandler | null, usage: Usage | null, billed: BilledCost | null): Record<string, unknown> {
    const req = this.#req
    return traceObject({
      requestId: req.requestId,
      provider: a === null ? null : a.offer.provider.address,
      model: req.request.model,
      cost: billed ?? ZERO_COST,
      capped: billed?.capped === true,
      usage,
      attempts: this.#attempts,
      startedAt: req.startedAt,
      notes: a?.plan.notes,
    })
  }

  #publishAttempt(a: AttemptHandler, attempt: Attempt): void {
    if (!attemptEnd.hasSubscribers) return
    attemptEnd.publish({
      requestId: this.#req.requestId,
      provider: attempt.provider,
      status: attempt.status,
      error: attempt.error ?? null,
      ttfbMs: a.ttfbMs < 0 ? null : a.ttfbMs,
    })
  }

  #publishEnd(status: number, a: AttemptHandler | null, error: string | null): void {
    if (this.#ended) return
    this.#ended = true
    if (!requestEnd.hasSubscribers) return
    const req = this.#req
    requestEnd.publish({
      requestId: req.requestId,
      admitted: true,
      surface: req.surface.name,
      model: req.request.model,
      catalogModel: true,
      provider: a === null ? null : a.offer.provider.address,
      status,
      attempts: this.#attempts.length,
      durationMs: performance.now() - req.startedAt,
      error,
      ttfbMs: a === null || a.ttfbMs < 0 ? null : a.ttfbMs,
      cost: this.#billed,
      traceparent: req.trace.traceparent,
      tracestate: req.trace.tracestate,
    })
  }
}

