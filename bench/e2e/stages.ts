/**
 * Where one request's microseconds go: the CPU profile (`node --cpu-prof`) of a target serving the latency
 * workload, each sample charged to the stage of the innermost frame that names one (a leaf in undici is
 * undici's time even when svc-router's code called it; a leaf in svc-router's handler is the relay's even when
 * undici called it). Frames of Node's own modules are charged to whatever called them. Idle time is left out,
 * so the figures are CPU time per request by stage, not wall time: the wait for the provider and for the disk
 * flush (on the thread pool) appear in the latency tables, not here.
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
  // The floor relay's own code: its handler is what svc-router's relay stage does.
  ['/bench/e2e/floor-relay', 'relay (handler, codec, trace, sink)'],
]

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string }
  children?: number[]
}
interface CpuProfile {
  startTime: number
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

function stageOfFrame(node: ProfileNode): Stage | 'idle' | null {
  const { url, functionName } = node.callFrame
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
  const parent = new Map<number, number>()
  const byId = new Map<number, ProfileNode>()
  for (const n of profile.nodes) {
    byId.set(n.id, n)
    for (const c of n.children ?? []) parent.set(c, n.id)
  }
  const memo = new Map<number, Stage | 'idle'>()
  const stageOf = (id: number): Stage | 'idle' => {
    const known = memo.get(id)
    if (known !== undefined) return known
    let stage: Stage | 'idle' = 'other JavaScript'
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const s = stageOfFrame(byId.get(at)!)
      if (s !== null) {
        stage = s
        break
      }
    }
    memo.set(id, stage)
    return stage
  }
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
