/**
 * One inference request's trip upstream: try candidates in order, relay the answer (JSON or SSE) with the
 * trace, and account for every try. Failover follows DESIGN.md §4: connect errors, resets and timeouts before
 * the first byte, 5xx and 429 move on to the next candidate when fallbacks are allowed; any other 4xx goes back
 * as it is; once a byte has reached the client, a failure ends the stream with an SSE error event and no [DONE].
 *
 * Billing (DESIGN.md §4): before each attempt the request's reservation is (re)priced for that candidate; a
 * response's last byte (`[DONE]`, the end of the JSON) goes out only once its charge is durable; a request that
 * fails, is refused or is abandoned before the provider produced anything releases its reservation.
 *
 * Backpressure both ways: a slow client pauses the upstream read (and so, through TCP, the provider); a client
 * that goes away aborts the upstream request at once.
 */
import type { Dispatcher } from 'undici'
import { chatCost, chatWorstCase, meteredUsage, type ChatUsage, type Cost } from '../billing/cost.js'
import type { BilledCost, Ledger, Reservation } from '../billing/ledger.js'
import { spliceTrace, traceMember, traceObject, ZERO_COST, type Attempt, type TraceFields } from '../billing/trace.js'
import { renderError, RouterError } from '../errors.js'
import type { HealthBook, HealthSettings } from '../health/health.js'
import type { Offer } from '../routing/offers.js'
import type { Selection } from '../routing/select.js'
import type { HeaderList, Reply } from '../server/reply.js'
import { sendError } from '../server/respond.js'
import { classifyUpstreamError, isRetryableStatus } from './failures.js'
import { basePath, type UpstreamPools } from './pools.js'
import { SseRelay } from './sse-relay.js'

/** What an exchange needs from the server for its whole life. */
export interface ExchangeContext {
  readonly pools: UpstreamPools
  readonly book: HealthBook
  readonly health: HealthSettings
  readonly maxAttempts: number
  /** Budgets and charges; surfaces open each request's reservation from it. */
  readonly ledger: Ledger
}

export interface ExchangeRequest {
  readonly requestId: string
  readonly startedAt: number
  readonly model: string
  /** Upstream path below the provider's base URL, e.g. /v1/chat/completions */
  readonly path: string
  readonly body: Buffer
  readonly stream: boolean
  /** The client asked for stream usage itself (otherwise the router's usage chunk is withheld). */
  readonly clientWantsUsage: boolean
  /** Headers every response of this request carries (request id, rate limit). */
  readonly baseHeaders: HeaderList
  /** max_tokens / max_completion_tokens as sent, -1 when absent (bounds the reservation). */
  readonly maxOutput: number
  /** The request's hold on its account and key; null when nothing is billed (no key). */
  readonly billing: Reservation | null
}

const UPSTREAM_HEADERS_BASE = ['content-type', 'application/json', 'accept', 'application/json, text/event-stream']
const SSE_HEADERS = ['Content-Type', 'text/event-stream; charset=utf-8', 'Cache-Control', 'no-cache']
const JSON_HEADERS = ['Content-Type', 'application/json']
const DONE_EVENT = Buffer.from('data: [DONE]\n\n')
const MAX_ERROR_BODY = 64 * 1024
/** A JSON answer larger than this is a broken provider, not a completion (the router must hold it whole). */
const MAX_JSON_RESPONSE = 64 * 1024 * 1024

function responseTooLarge(): Error {
  return Object.assign(new Error(`provider response exceeds ${MAX_JSON_RESPONSE} bytes`), { code: 'UND_ERR_RES_EXCEEDED_MAX_SIZE' })
}

/** Outcome of one attempt that did not produce the answer. */
interface Miss {
  readonly attempt: Attempt
  readonly timeout: boolean
}

export class Exchange {
  readonly #ctx: ExchangeContext
  readonly #req: ExchangeRequest
  readonly #reply: Reply
  readonly #selection: Selection
  readonly #attempts: Attempt[] = []
  #current: AttemptHandler | null = null
  #lastTimedOut = false
  #finished = false

  constructor(ctx: ExchangeContext, req: ExchangeRequest, reply: Reply, selection: Selection) {
    this.#ctx = ctx
    this.#req = req
    this.#reply = reply
    this.#selection = selection
    reply.onAborted(() => this.#onClientAbort())
  }

  get request(): ExchangeRequest {
    return this.#req
  }

  get reply(): Reply {
    return this.#reply
  }

  get ctx(): ExchangeContext {
    return this.#ctx
  }

  start(): void {
    this.#tryNext()
  }

  #tryNext(): void {
    if (this.#finished || this.#reply.aborted) return
    const offer = this.#attempts.length < this.#ctx.maxAttempts ? this.#selection.next() : null
    if (offer === null) {
      this.#failAll()
      return
    }
    const billing = this.#req.billing
    if (billing !== null) {
      // Re-priced for this candidate: the previous one's hold is given back first.
      const refused = billing.reserve(chatWorstCase(offer, this.#req.body.length, this.#req.maxOutput))
      if (refused !== null) {
        this.#finished = true
        this.#sendFailure(refused)
        return
      }
    }
    const handler = new AttemptHandler(this, offer)
    this.#current = handler
    handler.dispatch()
  }

  /** An attempt failed before anything reached the client: record it and try the next candidate. */
  missed(handler: AttemptHandler, miss: Miss): void {
    this.#attempts.push(miss.attempt)
    this.#lastTimedOut = miss.timeout
    if (handler !== this.#current) return
    this.#current = null
    this.#tryNext()
  }

  /** Records the attempt that answered (successfully or with a client error passed through). */
  answered(attempt: Attempt): void {
    this.#attempts.push(attempt)
  }

  get attempts(): readonly Attempt[] {
    return this.#attempts
  }

  finish(): void {
    this.#finished = true
    this.#current = null
  }

  #onClientAbort(): void {
    this.#finished = true
    const handler = this.#current
    this.#current = null
    // The attempt under way settles or releases when its abort lands; with none, nothing was produced.
    if (handler !== null) handler.abort(new Error('client disconnected'))
    else this.#req.billing?.release()
  }

  #failAll(): void {
    this.#finished = true
    const tried = this.#attempts.length
    const err =
      tried === 0
        ? new RouterError('no_available_provider', `no provider is available for model ${this.#req.model}`)
        : this.#lastTimedOut
          ? new RouterError('provider_timeout', `the provider did not answer in time (${tried} tried)`)
          : new RouterError('provider_error', `every provider tried failed (${tried} tried)`)
    this.#sendFailure(err)
  }

  /** An error answer before any byte went out: nothing is billed, the reservation is given back. */
  #sendFailure(err: RouterError): void {
    this.#req.billing?.release()
    const trace = traceObject({
      requestId: this.#req.requestId,
      provider: null,
      model: this.#req.model,
      cost: ZERO_COST,
      usage: null,
      attempts: this.#attempts,
      startedAt: this.#req.startedAt,
    })
    sendError(this.#reply, err, this.#req.requestId, this.#req.baseHeaders, trace)
  }
}

const enum Phase {
  /** Waiting for the response status. */
  Pending,
  /** Retryable status: the body is drained and dropped while the next candidate runs. */
  Draining,
  /** A client error passed through as it is. */
  Passthrough,
  /** 2xx, relaying. */
  Relaying,
  Done,
}

/** One try against one provider; an undici dispatch handler with the controller lifecycle. */
class AttemptHandler implements Dispatcher.DispatchHandler {
  readonly #x: Exchange
  readonly #offer: Offer
  #controller: Dispatcher.DispatchController | null = null
  #phase = Phase.Pending
  #status = 0
  #startedAt = 0
  #firstByte = true
  #parts: Buffer[] = []
  #size = 0
  #contentType = ''
  #relay: SseRelay | null = null
  #abortReason: Error | null = null
  #settled = false
  /** False once a client write reported backpressure, until the client drains. */
  #writable = true
  readonly #emit = (bytes: Buffer): void => this.#emitToClient(bytes)

  constructor(exchange: Exchange, offer: Offer) {
    this.#x = exchange
    this.#offer = offer
  }

  dispatch(): void {
    const req = this.#x.request
    const provider = this.#offer.provider
    this.#startedAt = performance.now()
    this.#offer.stats.inflight++
    const pools = this.#x.ctx.pools
    pools.get(provider.url).dispatch(
      {
        path: basePath(provider.url) + req.path,
        method: 'POST',
        headers: [...UPSTREAM_HEADERS_BASE, 'x-request-id', req.requestId],
        body: req.body,
        headersTimeout: pools.settings.headersTimeoutMs,
        bodyTimeout: pools.settings.bodyTimeoutMs,
      },
      this,
    )
  }

  abort(reason: Error): void {
    this.#abortReason = reason
    this.#controller?.abort(reason)
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#abortReason !== null) controller.abort(this.#abortReason)
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.#status = statusCode
    const ct = headers['content-type']
    this.#contentType = typeof ct === 'string' ? ct : ''
    const health = this.#offer.provider.health
    if (isRetryableStatus(statusCode)) {
      this.#phase = Phase.Draining
      if (statusCode >= 500) health.recordFailure(performance.now(), this.#x.ctx.health)
      this.#x.missed(this, { attempt: { provider: this.#offer.provider.address, status: statusCode, error: `http_${statusCode}` }, timeout: false })
      return
    }
    health.recordSuccess()
    if (statusCode >= 300) {
      this.#phase = Phase.Passthrough
      return
    }
    this.#phase = Phase.Relaying
    const req = this.#x.request
    if (req.stream) this.#relay = new SseRelay(!req.clientWantsUsage)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#phase === Phase.Draining) return
    if (this.#firstByte) {
      this.#firstByte = false
      if (this.#phase === Phase.Relaying) {
        this.#offer.stats.observeTtfb(performance.now() - this.#startedAt, this.#x.ctx.health.ewmaAlpha)
        this.#x.ctx.book.latencyEpoch++
      }
    }
    if (this.#relay !== null) {
      this.#relay.push(chunk, this.#emit)
      const reply = this.#x.reply
      if (!this.#writable) {
        controller.pause()
        reply.onWritable(() => {
          this.#writable = true
          controller.resume()
        })
      }
      return
    }
    if (this.#phase === Phase.Passthrough && this.#size + chunk.length > MAX_ERROR_BODY) return
    if (this.#size + chunk.length > MAX_JSON_RESPONSE) {
      controller.abort(responseTooLarge())
      return
    }
    this.#parts.push(chunk)
    this.#size += chunk.length
  }

  #emitToClient(bytes: Buffer): void {
    const reply = this.#x.reply
    if (!reply.started) {
      const chatId = this.#relay!.chatId
      const req = this.#x.request
      const headers = chatId === '' ? [...SSE_HEADERS, ...req.baseHeaders] : [...SSE_HEADERS, 'SVC-Res-Key', chatId, ...req.baseHeaders]
      reply.begin(200, headers)
    }
    if (!reply.write(bytes)) this.#writable = false
  }

  onResponseEnd(): void {
    const phase = this.#phase
    this.#phase = Phase.Done
    this.#release()
    if (phase === Phase.Draining) return
    if (this.#x.reply.aborted) return this.#billAbandoned(phase, true)
    if (phase === Phase.Passthrough) return this.#passThrough()
    if (this.#relay !== null) return this.#endStream()
    this.#endJson()
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    const phase = this.#phase
    this.#phase = Phase.Done
    this.#release()
    const reply = this.#x.reply
    if (phase === Phase.Draining) return
    if (this.#abortReason !== null || reply.aborted) return this.#billAbandoned(phase, false)
    const failure = classifyUpstreamError(err)
    if (!reply.started) {
      this.#offer.provider.health.recordFailure(performance.now(), this.#x.ctx.health)
      this.#x.missed(this, {
        attempt: { provider: this.#offer.provider.address, status: this.#status === 0 ? null : this.#status, error: failure.reason },
        timeout: failure.timeout,
      })
      return
    }
    // Bytes already reached the client: no failover, no fake success (DESIGN.md §4).
    this.#offer.provider.health.recordFailure(performance.now(), this.#x.ctx.health)
    this.#x.answered({ provider: this.#offer.provider.address, status: this.#status, error: failure.reason })
    this.#x.finish()
    const code = failure.timeout ? 'provider_timeout' : 'provider_error'
    const message = failure.timeout ? 'the provider stalled mid-stream' : 'the provider stream broke mid-response'
    // What the provider produced is billed (the relay's estimate), then the stream ends with the error event.
    const usage = this.#streamUsage()
    this.#bill(usage, (billed, err) => {
      const event = renderError(new RouterError(code, message), this.#x.request.requestId, traceObject(this.#traceFields(usage, err === null ? billed : null)))
      reply.end(`data: ${event}\n\n`)
    })
  }

  /**
   * The client went away. A provider that produced something (stream events relayed, or a whole answer that
   * arrived) is billed for it, since it did the work; otherwise the reservation is released.
   */
  #billAbandoned(phase: Phase, complete: boolean): void {
    const billing = this.#x.request.billing
    if (billing === null || !billing.open) return
    if (phase !== Phase.Relaying) return billing.release()
    const relay = this.#relay
    if (relay !== null) {
      if (relay.events === 0 && relay.forwardedBytes === 0 && !complete) return billing.release()
      if (complete) relay.finish(() => {})
      this.#bill(this.#streamUsage(), () => {})
      return
    }
    if (!complete) return billing.release()
    const parsed = parseObject(this.#body())
    if (parsed === null) return billing.release()
    this.#bill(meteredUsage(parsed.usage, this.#x.request.body.length, completionEstimate(parsed.choices)), () => {})
  }

  /**
   * Settles the request at this offer's prices for `usage`; `then` runs once the charge is durable, with the
   * billed amount, or with the error that kept it from being recorded. Without billing it runs at once.
   */
  #bill(usage: ChatUsage, then: (billed: BilledCost, err: RouterError | null) => void): void {
    const x = this.#x
    const cost = chatCost(this.#offer, usage)
    const billing = x.request.billing
    if (billing === null) return then({ ...cost, capped: false }, null)
    if (!billing.open) {
      // Released already (the client went away meanwhile): nothing is recorded, so nothing is delivered.
      return then({ ...ZERO_COST, capped: false }, new RouterError('server_error', 'the request was no longer billable'))
    }
    billing.settle(
      {
        model: x.request.model,
        provider: this.#offer.provider.address,
        promptTokens: usage.prompt_tokens,
        completionTokens: usage.completion_tokens,
        images: 0,
        audioMs: 0,
        cost,
      },
      then,
    )
  }

  #release(): void {
    if (this.#settled) return
    this.#settled = true
    this.#offer.stats.inflight--
  }

  #passThrough(): void {
    const x = this.#x
    x.request.billing?.release()
    x.answered({ provider: this.#offer.provider.address, status: this.#status, error: `http_${this.#status}` })
    x.finish()
    const body = Buffer.concat(this.#parts, this.#size)
    const ct = this.#contentType === '' ? 'application/json' : this.#contentType
    x.reply.send(this.#status, ['Content-Type', ct, ...x.request.baseHeaders], body)
  }

  #streamUsage(): ChatUsage {
    const relay = this.#relay!
    // Content events exclude the role chunk and the finish chunk.
    return meteredUsage(relay.usage, this.#x.request.body.length, Math.max(0, relay.events - 2))
  }

  /** `billed` null: nothing was recorded, so the trace shows a zero cost. */
  #traceFields(usage: ChatUsage, billed: BilledCost | null): TraceFields {
    const x = this.#x
    const cost: Cost = billed ?? ZERO_COST
    return {
      requestId: x.request.requestId,
      provider: this.#offer.provider.address,
      model: x.request.model,
      cost,
      capped: billed?.capped === true,
      usage,
      attempts: x.attempts,
      startedAt: x.request.startedAt,
    }
  }

  #endStream(): void {
    const x = this.#x
    const relay = this.#relay!
    relay.finish(this.#emit)
    x.answered({ provider: this.#offer.provider.address, status: this.#status })
    x.finish()
    const reply = x.reply
    if (!reply.started) {
      // The provider sent no event at all before ending: still a well-formed (empty) stream for the client.
      reply.begin(200, [...SSE_HEADERS, ...x.request.baseHeaders])
    }
    const usage = this.#streamUsage()
    // The trace chunk and [DONE] wait for the durable charge: a delivered stream is always a billed one.
    this.#bill(usage, (billed, err) => {
      if (err !== null) {
        const event = renderError(err, x.request.requestId, traceObject(this.#traceFields(usage, null)))
        reply.end(`data: ${event}\n\n`)
        return
      }
      const chunk = JSON.stringify({
        id: relay.chatId,
        object: 'chat.completion.chunk',
        created: Math.floor(Date.now() / 1000),
        model: x.request.model,
        choices: [],
        x_svc_trace: traceObject(this.#traceFields(usage, billed)),
      })
      reply.cork(() => {
        reply.write(`data: ${chunk}\n\n`)
        reply.end(DONE_EVENT)
      })
    })
  }

  #body(): Buffer {
    return this.#parts.length === 1 ? this.#parts[0]! : Buffer.concat(this.#parts, this.#size)
  }

  #endJson(): void {
    const x = this.#x
    const body = this.#body()
    const parsed = parseObject(body)
    if (parsed === null) {
      this.#offer.provider.health.recordFailure(performance.now(), x.ctx.health)
      x.missed(this, { attempt: { provider: this.#offer.provider.address, status: this.#status, error: 'invalid_json' }, timeout: false })
      return
    }
    x.answered({ provider: this.#offer.provider.address, status: this.#status })
    x.finish()
    const usage = meteredUsage(parsed.usage, x.request.body.length, completionEstimate(parsed.choices))
    const chatId = typeof parsed.id === 'string' ? parsed.id : ''
    // The body (its end included) goes out only once the charge is durable.
    this.#bill(usage, (billed, err) => {
      if (err !== null) {
        const failure = renderError(err, x.request.requestId, traceObject(this.#traceFields(usage, null)))
        x.reply.send(err.status, [...JSON_HEADERS, ...x.request.baseHeaders], failure)
        return
      }
      const out = spliceTrace(body, traceMember(this.#traceFields(usage, billed))) ?? body
      const headers = chatId === '' ? [...JSON_HEADERS, ...x.request.baseHeaders] : [...JSON_HEADERS, 'SVC-Res-Key', chatId, ...x.request.baseHeaders]
      x.reply.send(this.#status, headers, out)
    })
  }
}

type ChatResponse = { id?: unknown; usage?: unknown; choices?: unknown }

/** The provider's JSON answer as an object, or null when it is not one. */
function parseObject(body: Buffer): ChatResponse | null {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'))
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as ChatResponse) : null
  } catch {
    return null
  }
}

/** About four bytes of text per token over the returned messages. */
function completionEstimate(choices: unknown): number {
  if (!Array.isArray(choices)) return 0
  let bytes = 0
  for (const choice of choices) {
    const message = (choice as { message?: { content?: unknown; tool_calls?: unknown } } | null)?.message
    if (message === undefined || message === null) continue
    if (typeof message.content === 'string') bytes += message.content.length
    if (message.tool_calls !== undefined) bytes += JSON.stringify(message.tool_calls).length
  }
  return Math.ceil(bytes / 4)
}
