/**
 * The load generator, run as its own process so its CPU is not the measured server's:
 *
 *   node dist/bench/e2e/load.js '<LoadSpec as JSON>'
 *
 * prints one JSON LoadResult on stdout. Requests go through undici's `dispatch` with a bare handler (the
 * cheapest client path, identical for every target), every loop is bounded in count and time, and latencies
 * are kept whole (stats.ts) rather than bucketed.
 */
import { Worker } from 'node:worker_threads'
import { Client, Pool, type Dispatcher } from 'undici'
import { Samples, Tally, type Distribution } from './stats.js'

export interface RequestSpec {
  /** http://127.0.0.1:PORT */
  readonly origin: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

export type LoadSpec =
  /** Closed loop on one connection: `count` requests one after another, after `warmup`. */
  | { mode: 'latency'; request: RequestSpec; warmup: number; count: number; maxMs: number }
  /** Closed loop on `connections` connections for `durationMs`, after `warmupMs`. */
  | { mode: 'throughput'; request: RequestSpec; connections: number; warmupMs: number; durationMs: number }
  /** Open loop: a request every 1/rate s whatever the answers do; latency counted from the scheduled start. */
  | { mode: 'open'; request: RequestSpec; rate: number; durationMs: number; drainMs: number; connections: number; warmup: number }
  /** Streamed requests, `concurrency` at a time: time to first token and gaps between chunks. */
  | { mode: 'ttft'; request: RequestSpec; count: number; concurrency: number; warmup: number; maxMs: number }
  /** `streams` streamed requests started at once; all must end with [DONE]. */
  | { mode: 'streams'; request: RequestSpec; streams: number; maxMs: number }

export interface LoadResult {
  readonly mode: LoadSpec['mode']
  /** Requests answered 2xx (streams: and ended with [DONE]). */
  readonly ok: number
  readonly errors: number
  /** Started but not finished when the time bound ran out. */
  readonly incomplete: number
  readonly firstError: string | null
  readonly seconds: number
  /** Closed loops: ok / seconds. Open loop: completions per second of schedule. */
  readonly rps: number
  /** Per-request latency (open loop: from the scheduled start, unfinished requests censored at the stop). */
  readonly latency: Distribution | null
  /** Open loop: how late the generator itself sent each request, for judging its own share of the tail. */
  readonly sendLag: Distribution | null
  readonly ttft: Distribution | null
  /**
   * Streams: from sending to the first chunk of the answer's body, the simulator's first event (its role event,
   * written as soon as the request is read, before the paced wait for the first token).
   */
  readonly firstEvent: Distribution | null
  readonly gap: Distribution | null
  /** Streams: most streams open (first byte seen, end not yet) at the same moment. */
  readonly peakOpen: number
  /** Every request sent, warm-up included: what the target served while this process ran. */
  readonly sent: number
}

/**
 * The open loop's clock (run as a worker from source): posts the index of the last request due, whenever one
 * or more fall due, sleeping in between. Times are absolute (timeOrigin + now), as each thread has its own origin.
 */
const CLOCK_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const { origin, interval, total } = workerData
const cell = new Int32Array(new SharedArrayBuffer(4))
let i = 0
while (i < total) {
  const now = performance.timeOrigin + performance.now()
  const due = origin + i * interval
  if (due > now) {
    Atomics.wait(cell, 0, 0, due - now)
    continue
  }
  const last = Math.min(total - 1, Math.floor((now - origin) / interval))
  parentPort.postMessage(last)
  i = last + 1
}
`

const TOKEN_MARK = '"delta":{"content":"'
const DONE_MARK = 'data: [DONE]'

interface Prepared {
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: Buffer
}

/** Watches one streamed answer: first token, chunk gaps, and the [DONE] at the end. */
class StreamWatch {
  firstTokenAt = Number.NaN
  openedAt = Number.NaN
  done = false
  #lastAt = Number.NaN
  #tail = ''
  readonly #gaps: Samples | null
  readonly #onOpen: (() => void) | null

  constructor(gaps: Samples | null, onOpen: (() => void) | null = null) {
    this.#gaps = gaps
    this.#onOpen = onOpen
  }

  onData(chunk: Buffer, at: number): void {
    if (Number.isNaN(this.openedAt)) {
      this.openedAt = at
      this.#onOpen?.()
    }
    const text = this.#tail + chunk.toString('latin1')
    if (Number.isNaN(this.firstTokenAt)) {
      if (text.includes(TOKEN_MARK)) this.firstTokenAt = at
    } else if (this.#gaps !== null) {
      this.#gaps.push(at - this.#lastAt)
    }
    this.#lastAt = at
    this.#tail = text.slice(-48)
  }

  finish(): void {
    this.done = this.#tail.includes(DONE_MARK)
  }
}

let sent = 0

/** One request through `dispatcher`; resolves with the status once the body has ended. */
function exchange(dispatcher: Dispatcher, req: Prepared, watch: StreamWatch | null): Promise<number> {
  sent++
  return new Promise((resolve, reject) => {
    let status = 0
    dispatcher.dispatch(
      { path: req.path, method: 'POST', headers: req.headers, body: req.body },
      {
        onRequestStart() {},
        onResponseStart(_controller, statusCode) {
          status = statusCode
        },
        onResponseData(_controller, chunk) {
          watch?.onData(chunk, performance.now())
        },
        onResponseEnd() {
          watch?.finish()
          resolve(status)
        },
        onResponseError(_controller, err) {
          reject(err)
        },
      },
    )
  })
}

/** The shared tally, plus what makes a stream a success. */
class StreamTally extends Tally {
  /** A stream succeeds when it is 2xx, carried a content token and ended with [DONE]. */
  countStream(status: number, watch: StreamWatch): boolean {
    if (status < 200 || status >= 300) return this.count(status)
    if (Number.isNaN(watch.firstTokenAt)) this.fail('no content token in the stream')
    else if (!watch.done) this.fail('stream ended without [DONE]')
    else return this.count(status)
    return false
  }
}

function prepare(spec: RequestSpec): Prepared {
  return { path: spec.path, headers: { ...spec.headers }, body: Buffer.from(spec.body) }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

function result(mode: LoadSpec['mode'], tally: StreamTally, seconds: number, extra: Partial<LoadResult>): LoadResult {
  return {
    mode,
    ok: tally.ok,
    errors: tally.errors,
    incomplete: 0,
    firstError: tally.firstError,
    seconds,
    rps: seconds > 0 ? tally.ok / seconds : 0,
    latency: null,
    sendLag: null,
    ttft: null,
    firstEvent: null,
    gap: null,
    peakOpen: 0,
    sent,
    ...extra,
  }
}

async function latencyLoop(spec: Extract<LoadSpec, { mode: 'latency' }>): Promise<LoadResult> {
  const client = new Client(spec.request.origin, { pipelining: 1, keepAliveTimeout: 60_000 })
  const req = prepare(spec.request)
  const tally = new StreamTally()
  const samples = new Samples(spec.count)
  for (let i = 0; i < spec.warmup; i++) await exchange(client, req, null)
  const start = performance.now()
  const stopAt = start + spec.maxMs
  for (let i = 0; i < spec.count && performance.now() < stopAt; i++) {
    const t0 = performance.now()
    try {
      if (tally.count(await exchange(client, req, null))) samples.push(performance.now() - t0)
    } catch (err) {
      tally.fail(String(err))
    }
  }
  const seconds = (performance.now() - start) / 1000
  await client.close()
  return result('latency', tally, seconds, { latency: samples.distribution() })
}

async function throughputLoop(spec: Extract<LoadSpec, { mode: 'throughput' }>): Promise<LoadResult> {
  const pool = new Pool(spec.request.origin, { connections: spec.connections, pipelining: 1, keepAliveTimeout: 60_000 })
  const req = prepare(spec.request)
  const tally = new StreamTally()
  const samples = new Samples(1 << 16)
  const begin = performance.now()
  const measureFrom = begin + spec.warmupMs
  const end = measureFrom + spec.durationMs
  async function worker(): Promise<void> {
    while (performance.now() < end) {
      const t0 = performance.now()
      try {
        const status = await exchange(pool, req, null)
        const t1 = performance.now()
        // Only requests that start and finish inside the window count, so warm-up and tail do not.
        if (t0 >= measureFrom && t1 <= end && tally.count(status)) samples.push(t1 - t0)
      } catch (err) {
        if (t0 >= measureFrom) tally.fail(String(err))
        await sleep(1)
      }
    }
  }
  await Promise.all(Array.from({ length: spec.connections }, worker))
  await pool.close()
  return result('throughput', tally, spec.durationMs / 1000, { latency: samples.distribution() })
}

async function warm(dispatcher: Dispatcher, req: Prepared, count: number, concurrency: number): Promise<void> {
  let left = count
  async function one(): Promise<void> {
    while (left-- > 0) await exchange(dispatcher, req, null).catch(() => 0)
  }
  await Promise.all(Array.from({ length: concurrency }, one))
}

async function openLoop(spec: Extract<LoadSpec, { mode: 'open' }>): Promise<LoadResult> {
  const pool = new Pool(spec.request.origin, { connections: spec.connections, pipelining: 1, keepAliveTimeout: 60_000 })
  const req = prepare(spec.request)
  await warm(pool, req, spec.warmup, 8)
  const tally = new StreamTally()
  const total = Math.floor((spec.rate * spec.durationMs) / 1000)
  const interval = 1000 / spec.rate
  const latency = new Samples(total)
  const lag = new Samples(total)
  const pending = new Set<number>()
  const t0 = performance.now() + 5
  let next = 0

  function fire(i: number): void {
    const scheduled = t0 + i * interval
    lag.push(performance.now() - scheduled)
    pending.add(i)
    exchange(pool, req, null).then(
      (status) => {
        if (!pending.delete(i)) return
        if (tally.count(status)) latency.push(performance.now() - scheduled)
      },
      (err: unknown) => {
        if (pending.delete(i)) tally.fail(String(err))
      },
    )
  }

  // Node timers fire on a 1–2 ms grid, which would make every send up to 2 ms late. A worker thread keeps the
  // schedule instead: it sleeps in Atomics.wait (sub-millisecond, no spinning) until the next send is due and
  // wakes the main thread, which sends everything due by then. What lateness remains is reported as sendLag
  // and, latency being counted from the schedule, is inside the latency too.
  await new Promise<void>((resolve, reject) => {
    const clock = new Worker(CLOCK_SOURCE, { eval: true, workerData: { origin: performance.timeOrigin + t0, interval, total } })
    clock.on('message', (due: number) => {
      const now = performance.now()
      while (next <= due && next < total && t0 + next * interval <= now) fire(next++)
      if (next >= total) resolve()
    })
    clock.once('error', reject)
    clock.once('exit', () => {
      while (next < total) fire(next++)
      resolve()
    })
  })
  const drainUntil = performance.now() + spec.drainMs
  while (pending.size > 0 && performance.now() < drainUntil) await sleep(5)
  const stoppedAt = performance.now()
  // Unfinished requests are censored at the stop: their true latency is at least this, so the tail is not hidden.
  for (const i of pending) latency.push(stoppedAt - (t0 + i * interval))
  const incomplete = pending.size
  pending.clear()
  await pool.destroy()
  return {
    ...result('open', tally, spec.durationMs / 1000, { latency: latency.distribution(), sendLag: lag.distribution() }),
    incomplete,
  }
}

async function ttftLoop(spec: Extract<LoadSpec, { mode: 'ttft' }>): Promise<LoadResult> {
  const pool = new Pool(spec.request.origin, { connections: spec.concurrency, pipelining: 1, keepAliveTimeout: 60_000 })
  const req = prepare(spec.request)
  await warm(pool, req, spec.warmup, spec.concurrency)
  const tally = new StreamTally()
  const ttft = new Samples(spec.count)
  const firstEvent = new Samples(spec.count)
  const gaps = new Samples(spec.count * 64)
  const start = performance.now()
  const stopAt = start + spec.maxMs
  let left = spec.count
  async function worker(): Promise<void> {
    while (left-- > 0 && performance.now() < stopAt) {
      const watch = new StreamWatch(gaps)
      const t0 = performance.now()
      try {
        if (tally.countStream(await exchange(pool, req, watch), watch)) {
          ttft.push(watch.firstTokenAt - t0)
          firstEvent.push(watch.openedAt - t0)
        }
      } catch (err) {
        tally.fail(String(err))
      }
    }
  }
  await Promise.all(Array.from({ length: spec.concurrency }, worker))
  const seconds = (performance.now() - start) / 1000
  await pool.close()
  return result('ttft', tally, seconds, { ttft: ttft.distribution(), firstEvent: firstEvent.distribution(), gap: gaps.distribution() })
}

async function concurrentStreams(spec: Extract<LoadSpec, { mode: 'streams' }>): Promise<LoadResult> {
  const pool = new Pool(spec.request.origin, { connections: spec.streams, pipelining: 1, keepAliveTimeout: 60_000 })
  const req = prepare(spec.request)
  const tally = new StreamTally()
  const ttft = new Samples(spec.streams)
  let open = 0
  let peakOpen = 0
  let unfinished = spec.streams
  let timedOut = false
  const start = performance.now()

  async function one(): Promise<void> {
    let opened = false
    const watch = new StreamWatch(null, () => {
      opened = true
      peakOpen = Math.max(peakOpen, ++open)
    })
    const t0 = performance.now()
    try {
      if (tally.countStream(await exchange(pool, req, watch), watch)) ttft.push(watch.firstTokenAt - t0)
    } catch (err) {
      if (!timedOut) tally.fail(String(err))
    } finally {
      if (opened) open--
      unfinished--
    }
  }

  const all = Promise.all(Array.from({ length: spec.streams }, one))
  const bound = sleep(spec.maxMs).then(() => 'timeout' as const)
  const outcome = await Promise.race([all.then(() => 'done' as const), bound])
  const seconds = (performance.now() - start) / 1000
  const incomplete = outcome === 'timeout' ? unfinished : 0
  timedOut = outcome === 'timeout'
  await pool.destroy()
  await all.catch(() => {})
  return { ...result('streams', tally, seconds, { ttft: ttft.distribution(), peakOpen }), incomplete }
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '') as LoadSpec
  let out: LoadResult
  switch (spec.mode) {
    case 'latency':
      out = await latencyLoop(spec)
      break
    case 'throughput':
      out = await throughputLoop(spec)
      break
    case 'open':
      out = await openLoop(spec)
      break
    case 'ttft':
      out = await ttftLoop(spec)
      break
    case 'streams':
      out = await concurrentStreams(spec)
      break
  }
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`load: ${String((err as Error)?.stack ?? err)}\n`)
    process.exit(1)
  },
)
