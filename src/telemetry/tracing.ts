/**
 * OpenTelemetry traces (issue #13 §6) as a subscriber of the engine's events (DESIGN.md §5): one SERVER span
 * per inference request (child of the client's W3C traceparent when it sent a valid one) and one CLIENT span
 * per attempt under it, whose id is what the provider gets in its `traceparent`. Spans are exported in
 * batches over OTLP/HTTP (JSON) to `tracing.otlp_endpoint`.
 *
 * Off and free when no endpoint is configured: this module is only imported by compose/table.ts then, and it loads
 * the SDK with dynamic imports, so a router without tracing never loads it; the engine pays one
 * `hasSubscribers` read per attempt.
 *
 * Spans are kept by request id from the request's start to its end (the engine publishes one end per start);
 * attempts of one request run one after another, so one open attempt span per request suffices.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import type { Context, Span, Tracer } from '@opentelemetry/api'
import { formatUsd } from '../billing/money.js'
import type { AttemptEvent, AttemptStartEvent, RequestEndEvent, RequestStartEvent } from './events.js'

export interface TracingSettings {
  /** OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces. */
  readonly endpoint: string
  readonly serviceName: string
}

export interface Tracing {
  /** Unsubscribes, ends nothing more, and exports what is buffered. */
  close(): Promise<void>
}

interface Open {
  readonly span: Span
  readonly ctx: Context
  attempt: Span | null
}

const SCOPE = 'svc-router'

export async function startTracing(settings: TracingSettings): Promise<Tracing> {
  const [api, node, otlp, resources] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
  ])
  const { trace, ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags } = api
  const provider = new node.NodeTracerProvider({
    resource: resources.resourceFromAttributes({ 'service.name': settings.serviceName }),
    spanProcessors: [new node.BatchSpanProcessor(new otlp.OTLPTraceExporter({ url: settings.endpoint }))],
  })
  const tracer: Tracer = provider.getTracer(SCOPE)
  // The requests with an open span, by id: a dictionary object, not a Map. Every request enters and leaves it, and
  // a Map churned that way leaves the scavenger a chain of obsolete tables (upstream/pools.ts, ActiveAttempts).
  let open: Record<string, Open | undefined> = Object.create(null) as Record<string, Open | undefined>

  /** The client's trace context as the parent, or a new root. */
  function parentOf(traceparent: string, tracestate: string): Context {
    if (traceparent === '') return ROOT_CONTEXT
    return trace.setSpanContext(ROOT_CONTEXT, {
      traceId: traceparent.slice(3, 35),
      spanId: traceparent.slice(36, 52),
      traceFlags: (parseInt(traceparent.slice(53, 55), 16) & TraceFlags.SAMPLED) as number,
      isRemote: true,
      traceState: tracestate === '' ? undefined : api.createTraceState(tracestate),
    })
  }

  function startRequest(requestId: string, surface: string, model: string, startedAt: number, traceparent: string, tracestate: string): Open {
    const span = tracer.startSpan(
      `${surface} ${model}`,
      { kind: SpanKind.SERVER, startTime: startedAt, attributes: { 'svc.request_id': requestId, 'svc.surface': surface, 'svc.model': model } },
      parentOf(traceparent, tracestate),
    )
    const entry: Open = { span, ctx: trace.setSpan(ROOT_CONTEXT, span), attempt: null }
    open[requestId] = entry
    return entry
  }

  const onStart = (m: unknown): void => {
    const e = m as RequestStartEvent
    startRequest(e.requestId, e.surface, e.model, e.startedAt, e.traceparent, e.tracestate)
  }

  const onAttemptStart = (m: unknown): void => {
    const e = m as AttemptStartEvent
    const entry = open[e.requestId]
    if (entry === undefined) return
    entry.attempt?.end()
    const span = tracer.startSpan('attempt', { kind: SpanKind.CLIENT, attributes: { 'svc.provider': e.provider } }, entry.ctx)
    entry.attempt = span
    const sc = span.spanContext()
    const flags = (sc.traceFlags & TraceFlags.SAMPLED) === 0 ? '00' : '01'
    e.traceparent = `00-${sc.traceId}-${sc.spanId}-${flags}`
    const state = sc.traceState?.serialize()
    if (state !== undefined && state !== '') e.tracestate = state
  }

  const onAttemptEnd = (m: unknown): void => {
    const e = m as AttemptEvent
    const entry = open[e.requestId]
    if (entry === undefined) return
    // An attempt refused before it was sent (its provider's queue was full) has no span yet.
    const span = entry.attempt ?? tracer.startSpan('attempt', { kind: SpanKind.CLIENT, attributes: { 'svc.provider': e.provider } }, entry.ctx)
    entry.attempt = null
    if (e.status !== null) span.setAttribute('http.response.status_code', e.status)
    if (e.ttfbMs !== null) span.setAttribute('svc.ttfb_ms', e.ttfbMs)
    if (e.error !== null) {
      span.setAttribute('svc.error', e.error)
      span.setStatus({ code: SpanStatusCode.ERROR, message: e.error })
    }
    span.end()
  }

  const onEnd = (m: unknown): void => {
    const e = m as RequestEndEvent
    let entry = open[e.requestId]
    // Refused by admission: no start was published; the span covers the request from its arrival.
    if (entry === undefined) entry = startRequest(e.requestId, e.surface, e.model, performance.now() - e.durationMs, e.traceparent, e.tracestate)
    delete open[e.requestId]
    entry.attempt?.end()
    const span = entry.span
    span.setAttribute('http.response.status_code', e.status)
    span.setAttribute('svc.attempts', e.attempts)
    span.setAttribute('svc.cost_usd', formatUsd(e.cost))
    if (e.provider !== null) span.setAttribute('svc.provider', e.provider)
    if (e.ttfbMs !== null) span.setAttribute('svc.ttfb_ms', e.ttfbMs)
    if (e.error !== null) {
      span.setAttribute('svc.error', e.error)
      span.setStatus({ code: SpanStatusCode.ERROR, message: e.error })
    }
    span.end()
  }

  const subs: [string, (m: unknown) => void][] = [
    ['svc-router:request:start', onStart],
    ['svc-router:attempt:start', onAttemptStart],
    ['svc-router:attempt:end', onAttemptEnd],
    ['svc-router:request:end', onEnd],
  ]
  for (const [name, fn] of subs) subscribe(name, fn)

  return {
    async close() {
      for (const [name, fn] of subs) unsubscribe(name, fn)
      for (const entry of Object.values(open)) {
        entry?.attempt?.end()
        entry?.span.end()
      }
      open = Object.create(null) as Record<string, Open | undefined>
      await provider.shutdown()
    },
  }
}
