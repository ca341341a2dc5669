/**
 * `node dist/bench/e2e/perf-cpu.js [--mode=throughput|latency|stream] [--targets=router,floor-billed] [--sync=full|normal]`
 * (targets: router, router-logged and router-quiet (telemetry on/off, as run.ts), router-pg (one replica on
 * PostgreSQL + Redis, section 7), floor, floor-billed, floor-billed-full (its journal flushed, as `full`),
 * floor-billed-pg (its journal on the replicas' PostgreSQL)):
 * where the main thread's CPU goes, per request, by CPU time only. The stage table of run.ts comes from
 * `node --cpu-prof`, which samples wall time: on 2 shared cores a thread that waits for a core is charged to what
 * it was running (an `fdatasync` submission showed 8-34 µs per request that way). This samples the target's main
 * thread with `perf record -e cpu-clock` (10 kHz), names JIT frames with `--perf-basic-prof-only-functions`, and
 * prints per request: CPU by where it ran (JavaScript, V8's runtime and builtins, the kernel, each native
 * library), the largest symbols, and, for two targets, the symbols by difference. Each target also gets its
 * threads' CPU from /proc (GC helpers, the thread pool, the store's upkeep). Needs `perf` (Debian: linux-perf);
 * writes nothing. Stream mode: 8 concurrent paced streams (as section 4), CPU per stream. Latency mode (one
 * connection, `normal`) is the one to compare builds with: its CPU per request does not depend on how requests
 * batch, and moves about 3% from run to run on a quiet machine. `--stacks` records call stacks too (`perf record
 * -g`; V8 keeps frame pointers) and charges each sample to the innermost JavaScript function above it: where a
 * builtin's or the kernel's time comes from (an inline-cache miss, a socket write), per function, and by difference.
 * `--leaf=<text>` (with --stacks) adds, per target, the samples whose own symbol contains the text (say
 * `LoadIC`, `Megamorphic`, `CollectGarbage`), by the innermost JavaScript function that led to them.
 */
import { execFileSync, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { LoadResult, LoadSpec } from './load.js'
import { killAllNow, runLoadProcess, threadCpuMs } from './processes.js'
import { pgRouterTarget, replicaStores, stopReplicaStores, type ReplicaStores } from './replicas.js'
import { floorTarget, routerTarget, startSimulators, type RouterId, type Target } from './targets.js'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const arg = (name: string, fallback: string): string => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const mode = arg('mode', 'latency')
const sync = arg('sync', mode === 'latency' ? 'normal' : 'full') as 'full' | 'normal'
const ids = arg('targets', 'router,floor-billed').split(',')
const stacks = process.argv.includes('--stacks')
/** --leaf: a piece of a symbol's name; with --stacks, its samples by innermost JavaScript function too. */
const leaf = arg('leaf', '')
const NODE_ARGS = ['--perf-basic-prof-only-functions']
/** The svc-router targets on SQLite (they take --sync); router-pg is the replica on PostgreSQL + Redis. */
const SQLITE_ROUTERS: readonly string[] = ['router', 'router-logged', 'router-quiet']
/** The simulator the mode's requests go to: a floor relay is one process per simulator. */
const sim = mode === 'stream' ? 'paced' : 'fast'

/** Long enough for any load below: the generator is killed past it. */
const LOAD_BOUND_MS = 180_000
const runLoad = (spec: LoadSpec): Promise<LoadResult> => runLoadProcess(root, spec, LOAD_BOUND_MS)

interface Profile {
  readonly requests: number
  /** µs per request by symbol ("where: symbol"), and by where it ran. */
  readonly symbols: Map<string, number>
  readonly places: Map<string, number>
  readonly threads: [string, number][]
  /** With --stacks: µs per request by the innermost JavaScript function of each sample's stack. */
  readonly functions: Map<string, number> | null
  /** With --stacks and --leaf: the same, of the samples whose own symbol contains `leaf`. */
  readonly leafFunctions: Map<string, number> | null
}

/** A JIT frame's name without the checkout's path (the same function in two checkouts is one name). */
function bareName(symbol: string): string {
  return symbol.replace(/file:\/\/|\S*\/(?=(dist|node_modules)\/)/g, '').replace(/\s{2,}.*$/, '').trim()
}

const NO_JS = '(no JavaScript frame: native code and the kernel on their own)'

/**
 * Each sample of a `perf record -g` file charged to the innermost JavaScript function of its stack; and, when
 * `leaf` is set, the samples whose first (own) frame's symbol contains it, charged the same way.
 */
async function readStacks(file: string, requests: number): Promise<{ functions: Map<string, number>; leafFunctions: Map<string, number> | null }> {
  const script = spawn('perf', ['script', '-i', file, '-F', 'ip,sym'], { stdio: ['ignore', 'pipe', 'ignore'] })
  const functions = new Map<string, number>()
  const leafFunctions = leaf === '' ? null : new Map<string, number>()
  const us = 100 / requests
  let found: string | null = null
  let frames = 0
  let inLeaf = false
  const end = (): void => {
    if (frames > 0) {
      const name = found ?? NO_JS
      functions.set(name, (functions.get(name) ?? 0) + us)
      if (inLeaf) leafFunctions!.set(name, (leafFunctions!.get(name) ?? 0) + us)
    }
    found = null
    frames = 0
    inLeaf = false
  }
  for await (const line of createInterface({ input: script.stdout })) {
    const text = line.trim()
    if (text === '') {
      end()
      continue
    }
    if (found !== null) {
      frames++
      continue
    }
    const space = text.indexOf(' ')
    const symbol = space < 0 ? '' : text.slice(space + 1)
    if (frames++ === 0 && leafFunctions !== null) inLeaf = symbol.includes(leaf)
    if (symbol.startsWith('JS:')) found = bareName(symbol.slice(3))
  }
  end()
  return { functions, leafFunctions }
}

/** Samples of `perf report`, grouped: JIT code is JavaScript, the node binary V8 and Node's runtime. */
function readPerf(file: string, requests: number): Pick<Profile, 'symbols' | 'places'> {
  const text = execFileSync('perf', ['report', '-i', file, '--no-children', '--sort', 'dso,symbol', '--stdio', '-F', 'sample,dso,symbol'], { encoding: 'utf8', maxBuffer: 1 << 28 })
  const symbols = new Map<string, number>()
  const places = new Map<string, number>()
  const us = 100 / requests // one sample at 10 kHz is 100 µs
  for (const line of text.split('\n')) {
    const m = /^\s*(\d+)\s+(\S.*?)\s+\[([.k])\]\s+(.*)$/.exec(line)
    if (m === null) continue
    const [, samples, dso, kind, symbol] = m
    const place = kind === 'k' ? 'kernel' : dso!.startsWith('[JIT]') ? 'JavaScript (JIT code)' : dso === 'node' ? "V8's runtime and builtins, Node's C++" : dso!
    // A kernel symbol is followed by padding and perf's empty columns ("   -      -"), as wide as the longest name
    // of that report: cut at the first run of spaces, or one symbol gets two names in two reports.
    const bare = bareName(symbol!)
    const name = place === 'JavaScript (JIT code)' ? bare : `${place}: ${bare}`
    symbols.set(name, (symbols.get(name) ?? 0) + Number(samples) * us)
    places.set(place, (places.get(place) ?? 0) + Number(samples) * us)
  }
  return { symbols, places }
}

async function profile(target: Target, workDir: string): Promise<Profile> {
  const pid = target.pids?.[sim] ?? target.pid!
  const request = target.request('fast', false)
  const spec: LoadSpec =
    mode === 'latency'
      ? { mode: 'latency', request, warmup: 0, count: 6_000, maxMs: 120_000 }
      : mode === 'stream'
        ? { mode: 'ttft', request: target.request('paced', true), concurrency: 8, warmup: 0, count: 1_000, maxMs: 120_000 }
        : { mode: 'throughput', request, connections: 64, warmupMs: 0, durationMs: 5_000 }
  // Warm-up: the JIT compiles the hot path before anything is counted (in stream mode, the paced relay's too).
  await runLoad({ mode: 'throughput', request, connections: 16, warmupMs: 0, durationMs: 2_000 })
  await runLoad({ mode: 'latency', request, warmup: 0, count: 1_000, maxMs: 60_000 })
  if (spec.mode === 'ttft') await runLoad({ ...spec, count: 200 })
  const file = join(workDir, `${target.id}.perf.data`)
  const perf = spawn('perf', ['record', ...(stacks ? ['-g'] : []), '-e', 'cpu-clock', '-F', '10000', '-t', String(pid), '-o', file], { stdio: 'ignore' })
  await new Promise((r) => setTimeout(r, 300))
  const before = threadCpuMs(pid)
  const load = await runLoad(spec)
  const after = threadCpuMs(pid)
  perf.kill('SIGINT')
  await new Promise((r) => perf.once('exit', r))
  const requests = load.sent
  const threads = [...after]
    .map(([tid, ms]): [string, number] => [tid === String(pid) ? 'main' : `thread ${tid}`, ((ms - (before.get(tid) ?? 0)) * 1000) / requests])
    .filter(([, us]) => us >= 0.1)
  return { requests, threads, ...readPerf(file, requests), ...(stacks ? await readStacks(file, requests) : { functions: null, leafFunctions: null }) }
}

/** PostgreSQL and Redis for the `router-pg` target, started as run.ts starts them (bench/e2e/replicas.ts). */
async function pgStores(): Promise<ReplicaStores> {
  const stores = await replicaStores(() => {})
  if (typeof stores === 'string') throw new Error(`router-pg: ${stores}`)
  return stores
}

const fmt = (us: number): string => `${us.toFixed(2).padStart(8)} µs`

/** The 25 largest entries of a profile's µs per request, by symbol or by function. */
function writeLargest(perRequest: ReadonlyMap<string, number>): void {
  for (const [name, us] of [...perRequest].sort((x, y) => y[1] - x[1]).slice(0, 25)) process.stdout.write(`  ${fmt(us)}  ${name.slice(0, 130)}\n`)
}

/** Two targets' µs per request by name, the `rows` where the first spends most beyond the second. */
function writeDifference(title: string, a: string, b: string, ma: ReadonlyMap<string, number>, mb: ReadonlyMap<string, number>, rows: number): void {
  const diff = [...new Set([...ma.keys(), ...mb.keys()])]
    .map((n): [string, number, number] => [n, ma.get(n) ?? 0, mb.get(n) ?? 0])
    .sort((x, y) => y[1] - y[2] - (x[1] - x[2]))
  process.stdout.write(`\n${title} (µs per request: ${a}, ${b}, difference):\n`)
  for (const [n, x, y] of diff.slice(0, rows)) process.stdout.write(`  ${fmt(x)} ${fmt(y)} ${(x - y >= 0 ? '+' : '') + (x - y).toFixed(2)}  ${n.slice(0, 120)}\n`)
}

async function main(): Promise<void> {
  try {
    execFileSync('perf', ['--version'], { stdio: 'ignore' })
  } catch {
    process.stdout.write('perf-cpu: `perf` is not installed (Debian: linux-perf); nothing measured\n')
    return
  }
  const workDir = mkdtempSync(join(tmpdir(), 'svc-perf-cpu-'))
  const sims = await startSimulators(root)
  const profiles: [string, Profile][] = []
  try {
    for (const id of ids) {
      const target =
        SQLITE_ROUTERS.includes(id)
          ? await routerTarget(root, sims, workDir, id as RouterId, { synchronous: sync, nodeArgs: NODE_ARGS })
          : id === 'router-pg'
            ? await pgRouterTarget(root, sims, workDir, await pgStores(), NODE_ARGS)
            : id === 'floor-billed-pg'
              ? await floorTarget(root, sims, NODE_ARGS, { pgUrl: await (await pgStores()).pg.newDatabase() }, sim)
              : await floorTarget(root, sims, NODE_ARGS, id === 'floor-billed' ? workDir : id === 'floor-billed-full' ? { dir: workDir, sync: 'full' } : null, sim)
      try {
        profiles.push([id, await profile(target, workDir)])
      } finally {
        await target.stop()
      }
    }
  } finally {
    await Promise.all(Object.values(sims).map((s) => s.child.stop()))
    await stopReplicaStores()
  }
  for (const [id, p] of profiles) {
    const total = [...p.places.values()].reduce((a, b) => a + b, 0)
    process.stdout.write(`\n${id} (${mode}${SQLITE_ROUTERS.includes(id) ? `, synchronous ${sync}` : ''}, ${p.requests} requests): main thread ${total.toFixed(1)} µs per request by perf\n`)
    process.stdout.write(`  threads (/proc): ${p.threads.map(([t, us]) => `${t} ${us.toFixed(1)} µs`).join(', ')}\n`)
    for (const [place, us] of [...p.places].sort((a, b) => b[1] - a[1]).slice(0, 8)) process.stdout.write(`  ${fmt(us)}  ${place}\n`)
    process.stdout.write('  largest symbols:\n')
    writeLargest(p.symbols)
    if (p.functions === null) continue
    process.stdout.write('  by innermost JavaScript function (what it ran, the builtins and system calls it called included):\n')
    writeLargest(p.functions)
    if (p.leafFunctions === null) continue
    process.stdout.write(`  samples in a symbol with "${leaf}" in its name (${fmt([...p.leafFunctions.values()].reduce((a, b) => a + b, 0)).trim()}), by innermost JavaScript function:\n`)
    writeLargest(p.leafFunctions)
  }
  if (profiles.length >= 2) {
    const [[a, pa], [b, pb]] = profiles as [[string, Profile], [string, Profile]]
    writeDifference(`${a} − ${b}, by symbol`, a, b, pa.symbols, pb.symbols, 40)
    if (pa.functions !== null && pb.functions !== null) {
      writeDifference(`${a} − ${b}, by innermost JavaScript function`, a, b, pa.functions, pb.functions, 30)
    }
  }
  rmSync(workDir, { recursive: true, force: true })
}

process.once('exit', killAllNow)
main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`perf-cpu: ${String((err as Error)?.stack ?? err)}\n`)
    process.exit(1)
  },
)
