/**
 * The messages workload of the e2e run (registered in run.ts): added latency and time to first token on
 * /v1/messages, native (the provider speaks Anthropic's format: bytes relayed) and translated (an OpenAI
 * provider: request, answer and stream translated), beside chat's, each against the same simulator reached
 * directly on the same path. A router of its own serves it, with a registry that lists each simulator twice:
 * `bench-chat-<kind>` (formats [openai]) and `bench-claude-<kind>` (formats [anthropic]).
 *
 * As in load.ts, the load runs in a separate process (this file with a spec as its argument), one connection
 * for latency and TTFT_CONCURRENCY streams at a time for TTFT; the results go to stderr and into the run's
 * raw results (`messages` in last-run.json), rendered as section 5b of BENCHMARKS.md.
 */
import { Client, Pool, type Dispatcher } from 'undici'
import { runAsLoadProcess, runScriptProcess } from './processes.js'
import { Samples, Tally, type Distribution } from './stats.js'
import { PROVIDER_KEY, startOwnRouter, type SimKind, type SimSet } from './targets.js'

type Format = 'chat' | 'messages'

/** One way to send a request, as the load process takes it. */
interface Route {
  readonly origin: string
  readonly path: string
  readonly headers: Record<string, string>
  readonly format: Format
  readonly model: string
}

type Spec =
  | { mode: 'latency'; route: Route; warmup: number; count: number; maxMs: number }
  | { mode: 'ttft'; route: Route; warmup: number; count: number; concurrency: number; maxMs: number }

interface Result {
  readonly ok: number
  readonly errors: number
  readonly firstError: string | null
  readonly latency: Distribution | null
  readonly ttft: Distribution | null
}

/** The cases, each measured against its direct twin (same simulator, same upstream path). */
const CASES = [
  { id: 'chat', label: 'chat → openai provider', format: 'chat', model: 'chat', direct: 'chat' },
  { id: 'native', label: 'messages → anthropic provider (native)', format: 'messages', model: 'claude', direct: 'messages' },
  { id: 'translated', label: 'messages → openai provider (translated)', format: 'messages', model: 'chat', direct: 'chat' },
] as const

export type MessagesCaseId = (typeof CASES)[number]['id']

export interface MessagesRun {
  /** p50/p99 and the like, ms: direct to the simulator, per upstream format. */
  readonly direct: Record<Format, { latency: Result; ttft: Result }>
  readonly router: Record<MessagesCaseId, { latency: Result; ttft: Result }>
}

const PATHS: Record<Format, string> = { chat: '/v1/chat/completions', messages: '/v1/messages' }
/** The first text token of a stream, and its end, per format. */
const FIRST_TOKEN: Record<Format, string> = { chat: '"delta":{"content":"', messages: '"type":"text_delta"' }
const END: Record<Format, string> = { chat: 'data: [DONE]', messages: 'event: message_stop' }

function body(route: Route, stream: boolean): string {
  const b: Record<string, unknown> = { model: route.model, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }
  if (stream) b.stream = true
  return JSON.stringify(b)
}

// ---------------------------------------------------------------------------------------------------------
// The load process.

/** One exchange; resolves with the status and when the first token arrived (NaN: none) and whether it ended. */
function exchange(d: Dispatcher, route: Route, payload: Buffer): Promise<{ status: number; firstAt: number; ended: boolean }> {
  return new Promise((resolve, reject) => {
    let status = 0
    let firstAt = Number.NaN
    let tail = ''
    let ended = false
    const mark = FIRST_TOKEN[route.format]
    const end = END[route.format]
    d.dispatch(
      { path: route.path, method: 'POST', headers: route.headers, body: payload },
      {
        onRequestStart() {},
        onResponseStart(_c, s) {
          status = s
        },
        onResponseData(_c, chunk: Buffer) {
          const text = tail + chunk.toString('latin1')
          if (Number.isNaN(firstAt) && text.includes(mark)) firstAt = performance.now()
          // The router's message_stop carries the trace after it: the end is looked for as the bytes pass.
          if (!ended && text.includes(end)) ended = true
          tail = text.slice(-64)
        },
        onResponseEnd() {
          resolve({ status, firstAt, ended })
        },
        onResponseError(_c, err) {
          reject(err)
        },
      },
    )
  })
}

async function runSpec(spec: Spec): Promise<Result> {
  const stream = spec.mode === 'ttft'
  const payload = Buffer.from(body(spec.route, stream))
  const d: Dispatcher = stream ? new Pool(spec.route.origin, { connections: spec.concurrency }) : new Client(spec.route.origin, { keepAliveTimeout: 60_000 })
  const samples = new Samples(spec.count)
  const tally = new Tally()
  const one = async (measured: boolean): Promise<void> => {
    const t0 = performance.now()
    try {
      const r = await exchange(d, spec.route, payload)
      const t1 = performance.now()
      if (r.status !== 200) return tally.fail(`HTTP ${r.status}`)
      if (stream && (Number.isNaN(r.firstAt) || !r.ended)) return tally.fail('stream without a text token or without its end')
      if (!measured) return
      tally.ok++
      samples.push(stream ? r.firstAt - t0 : t1 - t0)
    } catch (err) {
      tally.fail(String(err))
    }
  }
  for (let i = 0; i < spec.warmup; i++) await one(false)
  const stopAt = performance.now() + spec.maxMs
  let left = spec.count
  const lanes = stream ? spec.concurrency : 1
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      while (left-- > 0 && performance.now() < stopAt) await one(true)
    }),
  )
  await d.close()
  const dist = samples.distribution()
  return { ok: tally.ok, errors: tally.errors, firstError: tally.firstError, latency: stream ? null : dist, ttft: stream ? dist : null }
}

// ---------------------------------------------------------------------------------------------------------
// The run's side.

export interface MessagesOptions {
  readonly root: string
  readonly sims: SimSet
  readonly workDir: string
  readonly quick: boolean
  readonly progress: (line: string) => void
}

function registry(sims: SimSet, kinds: readonly SimKind[]): string {
  const lines = ['providers:']
  kinds.forEach((kind, i) => {
    lines.push(`  - address: "0x${String.fromCharCode(97 + i).repeat(40)}"`, `    url: "${sims[kind].url}"`, '    trust_mode: standard', '    models:')
    for (const [prefix, format] of [['chat', 'openai'], ['claude', 'anthropic']]) {
      lines.push(`      - { id: bench-${prefix}-${kind}, type: chatbot, formats: [${format}], context_length: 32768, price: { prompt: 0.10, completion: 0.30 } }`)
    }
  })
  return lines.join('\n') + '\n'
}

function runLoad(root: string, spec: Spec): Promise<Result> {
  return runScriptProcess<Result>(root, 'messages.js', spec, spec.maxMs + 60_000)
}

const us = (ms: number | undefined): string => (ms === undefined || Number.isNaN(ms) ? 'n/a' : `${(ms * 1000).toFixed(0)} µs`)

/** Starts the workload's router, measures every case and its direct twin, stops the router. */
export async function measureMessages(o: MessagesOptions): Promise<MessagesRun> {
  const plan = o.quick ? { latency: { warmup: 200, count: 1_000, maxMs: 3_000 }, ttft: { warmup: 4, count: 40, concurrency: 4, maxMs: 4_000 } } : { latency: { warmup: 500, count: 5_000, maxMs: 15_000 }, ttft: { warmup: 10, count: 200, concurrency: 4, maxMs: 30_000 } }
  o.progress('messages: starting its svc-router (chat and claude models on the fast and paced simulators)')
  const { url, key, child } = await startOwnRouter(o.root, o.workDir, 'router-messages', registry(o.sims, ['fast', 'paced']))
  try {
    const direct = (kind: SimKind, format: Format): Route => ({
      origin: o.sims[kind].url,
      path: PATHS[format],
      headers: { 'content-type': 'application/json', authorization: `Bearer ${PROVIDER_KEY}`, 'anthropic-version': '2023-06-01' },
      format,
      model: `bench-${format === 'chat' ? 'chat' : 'claude'}-${kind}`,
    })
    const routed = (kind: SimKind, c: (typeof CASES)[number]): Route => ({
      origin: url,
      path: PATHS[c.format],
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      format: c.format,
      model: `bench-${c.model}-${kind}`,
    })
    const both = async (label: string, route: (kind: SimKind) => Route): Promise<{ latency: Result; ttft: Result }> => {
      const latency = await runLoad(o.root, { mode: 'latency', route: route('fast'), ...plan.latency })
      const ttft = await runLoad(o.root, { mode: 'ttft', route: route('paced'), ...plan.ttft })
      const errs = latency.errors + ttft.errors > 0 ? `, ${latency.errors + ttft.errors} errors (first: ${latency.firstError ?? ttft.firstError})` : ''
      o.progress(`messages: ${label}: p50 ${us(latency.latency?.p50)}, p99 ${us(latency.latency?.p99)}, TTFT p50 ${us(ttft.ttft?.p50)}${errs}`)
      return { latency, ttft }
    }
    const run = { direct: {}, router: {} } as { direct: Record<Format, { latency: Result; ttft: Result }>; router: Record<MessagesCaseId, { latency: Result; ttft: Result }> }
    for (const format of ['chat', 'messages'] as const) run.direct[format] = await both(`direct ${PATHS[format]}`, (kind) => direct(kind, format))
    for (const c of CASES) {
      const m = await both(`svc-router, ${c.label}`, (kind) => routed(kind, c))
      run.router[c.id] = m
      const base = run.direct[c.direct]
      const added = (a: Distribution | null, b: Distribution | null, p: 'p50' | 'p99'): string => (a === null || b === null ? 'n/a' : us(a[p] - b[p]))
      o.progress(
        `messages: ${c.label}: added latency p50 ${added(m.latency.latency, base.latency.latency, 'p50')}, p99 ${added(m.latency.latency, base.latency.latency, 'p99')}; added TTFT p50 ${added(m.ttft.ttft, base.ttft.ttft, 'p50')}`,
      )
    }
    return run
  } finally {
    await child.stop()
  }
}

runAsLoadProcess(import.meta.url, runSpec)
