/**
 * Bytes allocated per request, for the stage table: a target started with `--inspect=127.0.0.1:<port>` is
 * driven over the DevTools protocol (undici's WebSocket) to run V8's sampling heap profiler around a counted
 * window of requests. The sampler is asked to keep the samples of objects the garbage collector has freed
 * since (`includeObjectsCollectedByMajorGC` and `…MinorGC`): without them it reports only what is still alive
 * at the end, not what a request allocated. `checkCollectedSamples` verifies in this process (the same Node,
 * so the same V8) that the flags are honoured before any figure is taken from them.
 */
import { Session } from 'node:inspector/promises'
import { WebSocket } from 'undici'
import type { SamplingHeapProfile } from './stages.js'

/** Mean bytes between samples: small enough for a stage's few hundred bytes per request over a few thousand requests. */
export const HEAP_SAMPLING_INTERVAL = 2048

const SAMPLING = {
  samplingInterval: HEAP_SAMPLING_INTERVAL,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
} as const

/**
 * V8's sampler records the physical frames of a stack: an allocation in a function TurboFan inlined into
 * another is charged to the one it was inlined into (the CPU profile keeps inlined frames apart), which moves
 * bytes across stages: in the billed floor, the trace built in the `committed` callback, inlined into the
 * journal's `#flush`, landed in the commit (3.1 KB of commit and 2.5 KB of relay per request, against 0.6 and
 * 5.0 KB without inlining). The sampled run therefore runs without it. It barely changes what is allocated
 * (2026-11-26, 3,000 requests of the latency workload, two runs each way): svc-router 22.2–22.3 KB per request
 * with inlining and 22.3–22.7 KB without, the billed floor 13.2–13.3 and 13.0–13.1 KB.
 */
export const HEAP_NODE_FLAGS: readonly string[] = ['--no-turbo-inlining']

/** The node flags of a sampled run: its inspector on `port` of the loopback, and HEAP_NODE_FLAGS. */
export function inspectArgs(port: number): string[] {
  return [`--inspect=127.0.0.1:${port}`, ...HEAP_NODE_FLAGS]
}

/**
 * Null when this Node's sampler keeps the samples of collected objects; else why not. 8 MiB of garbage made
 * under the sampler with the flags must be counted (at least half of it: the estimate is statistical), where
 * without them almost none of it survives to the profile.
 */
export async function checkCollectedSamples(): Promise<string | null> {
  const session = new Session()
  session.connect()
  try {
    await session.post('HeapProfiler.startSampling', SAMPLING)
    // Kept in a ring so that they escape (no allocation folded away) and most are freed before the end.
    const ring: number[][] = new Array<number[]>(1024)
    for (let i = 0; i < 100_000; i++) ring[i & 1023] = [i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8, i + 9]
    const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: SamplingHeapProfile }
    const counted = profile.samples.reduce((sum, s) => sum + s.size, 0)
    // 100,000 arrays of 10 small integers: 16 bytes of header and 80 of elements each at least, about 9.6 MB.
    const made = 100_000 * 96
    if (ring[0]!.length !== 10 || counted < made / 2) return `V8 ${process.versions.v8} counted ${counted} of about ${made} bytes of collected garbage: it ignores includeObjectsCollectedByMajorGC/MinorGC`
    return null
  } finally {
    session.disconnect()
  }
}

/** A DevTools protocol session with one process's inspector. */
export class Inspector {
  #ws: WebSocket
  #next = 1
  #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>()

  private constructor(ws: WebSocket) {
    this.#ws = ws
    ws.addEventListener('message', (event) => {
      const msg = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } }
      const waiter = msg.id === undefined ? undefined : this.#pending.get(msg.id)
      if (waiter === undefined) return
      this.#pending.delete(msg.id!)
      if (msg.error !== undefined) waiter.reject(new Error(`inspector: ${msg.error.message}`))
      else waiter.resolve(msg.result)
    })
    ws.addEventListener('close', () => {
      for (const w of this.#pending.values()) w.reject(new Error('inspector: the connection closed'))
      this.#pending.clear()
    })
  }

  /** Connects to the inspector on 127.0.0.1:`port` (its first target: the main thread). */
  static async connect(port: number): Promise<Inspector> {
    const res = await fetch(`http://127.0.0.1:${port}/json/list`, { signal: AbortSignal.timeout(5_000) })
    const list = (await res.json()) as { webSocketDebuggerUrl?: string }[]
    const url = list[0]?.webSocketDebuggerUrl
    if (url === undefined) throw new Error(`no inspector target on port ${port}`)
    const ws = new WebSocket(url)
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        ws.close()
        reject(new Error(`inspector: no connection to ${url} within 5 s`))
      }, 5_000)
      ws.addEventListener('open', () => (clearTimeout(timer), resolve()), { once: true })
      ws.addEventListener('error', () => (clearTimeout(timer), reject(new Error(`inspector: could not connect to ${url}`))), { once: true })
    })
    return new Inspector(ws)
  }

  post<T>(method: string, params: object = {}): Promise<T> {
    const id = this.#next++
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject })
      this.#ws.send(JSON.stringify({ id, method, params }))
    })
  }

  close(): void {
    this.#ws.close()
  }
}

/** Runs `during` under the sampling heap profiler of the process behind `inspector`, and returns the profile of that window. */
export async function sampleHeap<T>(inspector: Inspector, during: () => Promise<T>): Promise<{ result: T; profile: SamplingHeapProfile }> {
  await inspector.post('HeapProfiler.startSampling', SAMPLING)
  let result: T
  try {
    result = await during()
  } catch (err) {
    await inspector.post('HeapProfiler.stopSampling').catch(() => undefined)
    throw err
  }
  const { profile } = await inspector.post<{ profile: SamplingHeapProfile }>('HeapProfiler.stopSampling')
  return { result, profile }
}
