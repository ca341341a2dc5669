/**
 * Where one request's microseconds and bytes go. CPU: the profile (`node --cpu-prof`) of a target serving the
 * latency workload, each sample charged to the stage of the innermost frame that names one (a leaf in undici is
 * undici's time even when svc-router's code called it; a leaf in svc-router's handler is the relay's even when
 * undici called it). Frames of Node's own modules are charged to whatever called them. Idle time is left out,
 * so the figures are CPU time per request by stage, not wall time: the wait for the provider and for the disk
 * flush (on the thread pool) appear in the latency tables, not here. Bytes: V8's sampling heap profile of a
 * separate run (heap-sampling.ts), each sample charged to its allocation stack by the same rules.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

export const STAGES = [
  'front end (uWS, request head, reply)',
  'admission (auth, rate limit, headers, body, key policy)',
  'selection (routing)',
  'engine (failover, plan, budget)',
  'upstream write (undici dispatch)',
  'upstream parse (undici llhttp)',
  'relay (handler, codec, trace, sink)',
  'commit (ledger, SQLite)',
  'telemetry (events, metrics, logs)',
  'garbage collection',
  'native, unattributed (syscalls, uWS and libuv I/O)',
  'other JavaScript',
] as const
export type Stage = (typeof STAGES)[number]

const FLOOR_RELAY = '/bench/e2e/floor-relay'

/** Matched against a frame's URL, in order; the first match names its stage. */
const RULES: readonly (readonly [string, Stage])[] = [
  ['/src/store/', 'commit (ledger, SQLite)'],
  ['/src/billing/charge-writer', 'commit (ledger, SQLite)'],
  ['/better-sqlite3/', 'commit (ledger, SQLite)'],
  ['/src/billing/', 'engine (failover, plan, budget)'],
  ['/src/upstream/failover', 'engine (failover, plan, budget)'],
  ['/src/upstream/plan', 'engine (failover, plan, budget)'],
  ['/src/upstream/pools', 'engine (failover, plan, budget)'],
  ['/src/upstream/limiter', 'engine (failover, plan, budget)'],
  ['/src/health/', 'engine (failover, plan, budget)'],
  ['/src/routing/', 'selection (routing)'],
  ['/src/auth/', 'admission (auth, rate limit, headers, body, key policy)'],
  ['/src/pipeline/', 'admission (auth, rate limit, headers, body, key policy)'],
  ['/src/codecs/json-body', 'admission (auth, rate limit, headers, body, key policy)'],
  ['/src/surfaces/', 'admission (auth, rate limit, headers, body, key policy)'],
  ['/src/upstream/', 'relay (handler, codec, trace, sink)'],
  ['/src/codecs/', 'relay (handler, codec, trace, sink)'],
  ['/src/server/uws-reply', 'relay (handler, codec, trace, sink)'],
  ['/src/server/', 'front end (uWS, request head, reply)'],
  ['/src/telemetry/', 'telemetry (events, metrics, logs)'],
  ['/src/log', 'telemetry (events, metrics, logs)'],
  ['/pino', 'telemetry (events, metrics, logs)'],
  ['/prom-client/', 'telemetry (events, metrics, logs)'],
  ['/undici/lib/llhttp', 'upstream parse (undici llhttp)'],
  ['wasm://', 'upstream parse (undici llhttp)'],
  ['/undici/', 'upstream write (undici dispatch)'],
  ['/uWebSockets.js/', 'front end (uWS, request head, reply)'],
  ['/uws-build-', 'front end (uWS, request head, reply)'],
  // The floor relay's own code: its handler is what svc-router's relay stage does (its billing functions: FLOOR_FUNCTIONS).
  [FLOOR_RELAY, 'relay (handler, codec, trace, sink)'],
]

/**
 * The billed floor (floor-relay.ts `--bill`) does in one file what svc-router does in several stages. A frame
 * of that file is charged to the stage of the innermost of these functions on its stack (its own callbacks,
 * anonymous, are charged to the function that runs them: the journal's transaction to `#flush`), else to the
 * relay: the request's key, body and hold to admission (svc-router: auth, json-body); the usage priced and the
 * hold released to the engine (svc-router: billing); the journal's queue and its transaction to the commit
 * (svc-router: charge-writer, store); the trace built and the answer written once committed to the relay.
 */
const FLOOR_FUNCTIONS: ReadonlyMap<string, Stage> = new Map<string, Stage>([
  ['admit', 'admission (auth, rate limit, headers, body, key policy)'],
  ['#charge', 'engine (failover, plan, budget)'],
  ['enqueue', 'commit (ledger, SQLite)'],
  ['#flush', 'commit (ledger, SQLite)'],
  ['Journal', 'commit (ledger, SQLite)'],
  ['committed', 'relay (handler, codec, trace, sink)'],
])

interface CallFrame {
  functionName: string
  url: string
}
interface ProfileNode {
  id: number
  callFrame: CallFrame
  children?: number[]
}
interface CpuProfile {
  startTime: number
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

function stageOfFrame(frame: CallFrame): Stage | 'idle' | null {
  const { url, functionName } = frame
  if (url === '') {
    if (functionName === '(idle)') return 'idle'
    if (functionName === '(garbage collector)') return 'garbage collection'
    if (functionName === '(program)') return 'native, unattributed (syscalls, uWS and libuv I/O)'
    return null
  }
  for (const [part, stage] of RULES) if (url.includes(part)) return stage
  return null
}

/**
 * The stage of each node of a call tree (`nodes`, linked by child ids): its innermost frame that names one,
 * else other JavaScript. With `nativeWithoutScript`, a stack without any script frame is native instead (the
 * heap profile's `(V8 API)` node: an allocation C++ made with no JavaScript on the stack, as uWS does for the
 * arguments of a callback). Memoised: a profile names the same nodes over and over.
 */
function stageResolver(nodes: readonly ProfileNode[], nativeWithoutScript: boolean): (id: number) => Stage | 'idle' {
  const parent = new Map<number, number>()
  const byId = new Map<number, ProfileNode>()
  for (const n of nodes) {
    byId.set(n.id, n)
    for (const c of n.children ?? []) parent.set(c, n.id)
  }
  /** The stage of the innermost FLOOR_FUNCTIONS frame from `id` outwards, if any. */
  const floorStage = (id: number): Stage | undefined => {
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame
      if (!frame.url.includes(FLOOR_RELAY)) continue
      const stage = FLOOR_FUNCTIONS.get(frame.functionName)
      if (stage !== undefined) return stage
    }
    return undefined
  }
  const memo = new Map<number, Stage | 'idle'>()
  return function stageOf(id: number): Stage | 'idle' {
    const known = memo.get(id)
    if (known !== undefined) return known
    let stage: Stage | 'idle' | null = null
    let script = false
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame
      stage = stageOfFrame(frame)
      if (stage !== null) {
        if (frame.url.includes(FLOOR_RELAY)) stage = floorStage(at) ?? stage
        break
      }
      if (frame.url !== '') script = true
    }
    stage ??= script || !nativeWithoutScript ? 'other JavaScript' : 'native, unattributed (syscalls, uWS and libuv I/O)'
    memo.set(id, stage)
    return stage
  }
}

/**
 * CPU microseconds by stage in one profile, counting only samples taken between `from` and `to` (µs of the
 * monotonic clock, process.hrtime, which V8's profiler stamps samples with too). `windowed` is false when no
 * sample fell inside (a clock that differs): then every sample is counted.
 */
export function stageBreakdown(profile: CpuProfile, from: number, to: number): { byStage: Map<Stage, number>; windowed: boolean } {
  const inside = (at: number): boolean => at >= from && at <= to
  let windowed = false
  for (let i = 0, at = profile.startTime; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0
    if (inside(at)) {
      windowed = true
      break
    }
  }
  const stageOf = stageResolver(profile.nodes, false)
  const out = new Map<Stage, number>()
  for (let i = 0, at = profile.startTime; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0
    if (windowed && !inside(at)) continue
    const stage = stageOf(profile.samples[i]!)
    if (stage === 'idle') continue
    // timeDeltas[i] is the time from the previous sample to this one: the sampled frame ran for about that long.
    out.set(stage, (out.get(stage) ?? 0) + (profile.timeDeltas[i] ?? 0))
  }
  return { byStage: out, windowed }
}

/** The one .cpuprofile `node --cpu-prof --cpu-prof-dir=<dir>` wrote there. */
export function readProfile(dir: string): CpuProfile {
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'))
  if (file === undefined) throw new Error(`no .cpuprofile in ${dir}: the process did not exit cleanly`)
  return JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile
}

/** A node of V8's sampling heap profile (`HeapProfiler.stopSampling`): a call tree nested by value. */
export interface HeapProfileNode {
  readonly id: number
  readonly callFrame: CallFrame
  readonly selfSize: number
  readonly children: readonly HeapProfileNode[]
}
/** V8's sampling heap profile: the call tree, and one sample per sampled allocation (`size`: the bytes it stands for). */
export interface SamplingHeapProfile {
  readonly head: HeapProfileNode
  readonly samples: readonly { readonly size: number; readonly nodeId: number; readonly ordinal: number }[]
}

/**
 * Bytes allocated by stage in one sampling heap profile: each sample charged to the innermost frame of its
 * allocation stack that names a stage (the CPU profile's rules), an allocation with no script frame on its
 * stack to the native stage. A sample's `size` is V8's estimate of the bytes it stands for (the object's size
 * scaled by the odds of sampling it), so the sums are estimates of all bytes allocated, whatever the interval.
 */
export function heapBreakdown(profile: SamplingHeapProfile): { byStage: Map<Stage, number>; samples: number } {
  const nodes: ProfileNode[] = []
  const queue: HeapProfileNode[] = [profile.head]
  for (let n = queue.pop(); n !== undefined; n = queue.pop()) {
    nodes.push({ id: n.id, callFrame: n.callFrame, children: n.children.map((c) => c.id) })
    queue.push(...n.children)
  }
  const stageOf = stageResolver(nodes, true)
  const known = new Set(nodes.map((n) => n.id))
  const out = new Map<Stage, number>()
  let counted = 0
  for (const sample of profile.samples) {
    // The last few samples name nodes the tree does not have: allocations of stopSampling's own, after the tree was built.
    if (!known.has(sample.nodeId)) continue
    counted++
    const stage = stageOf(sample.nodeId)
    // An idle node names no allocation site; a sample there (none seen) would be the loop's own.
    const charged = stage === 'idle' ? 'native, unattributed (syscalls, uWS and libuv I/O)' : stage
    out.set(charged, (out.get(charged) ?? 0) + sample.size)
  }
  return { byStage: out, samples: counted }
}
