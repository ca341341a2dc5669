/**
 * Child processes of the e2e run: start one and wait for the line that says it is ready, read the resident
 * memory and CPU time of it and its descendants from /proc, and stop exactly the processes this run started
 * (by pid), also when the run itself fails or is interrupted.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { LoadResult, LoadSpec } from './load.js'

export interface Child {
  readonly name: string
  readonly pid: number
  /** Everything it printed so far (stdout and stderr), for diagnostics and ready-line parsing. */
  output(): string
  readonly exited: boolean
  /** SIGTERM (or `signal`), then SIGKILL after a grace period; resolves once it is gone. */
  stop(signal?: NodeJS.Signals): Promise<void>
}

export interface StartOptions {
  readonly env?: NodeJS.ProcessEnv
  readonly cwd?: string
  /** Resolve once the output matches; without it, as soon as the process is spawned. */
  readonly ready?: RegExp
  readonly timeoutMs?: number
}

const running = new Set<Child>()
const OUTPUT_LIMIT = 64 * 1024

export function startChild(name: string, command: string, args: readonly string[], options: StartOptions = {}): Promise<{ child: Child; match: RegExpMatchArray | null }> {
  const proc: ChildProcess = spawn(command, args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let text = ''
  let exited = false
  const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
  const child: Child = {
    name,
    get pid() {
      return proc.pid ?? -1
    },
    output: () => text,
    get exited() {
      return exited
    },
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      running.delete(child)
      if (exited) return
      proc.kill(signal)
      const grace = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), 5000).unref())
      if ((await Promise.race([gone, grace])) === 'late') {
        proc.kill('SIGKILL')
        await gone
      }
    },
  }
  running.add(child)
  proc.once('exit', () => {
    exited = true
    running.delete(child)
  })

  return new Promise((resolve, reject) => {
    let settled = false
    const timer = setTimeout(() => finish(new Error(`${name} was not ready within ${options.timeoutMs ?? 20_000} ms:\n${tail(text)}`)), options.timeoutMs ?? 20_000)
    function finish(err: Error | null, match: RegExpMatchArray | null = null): void {
      if (settled) return
      settled = true
      clearTimeout(timer)
      if (err === null) resolve({ child, match })
      else {
        void child.stop('SIGKILL')
        reject(err)
      }
    }
    function onOutput(chunk: Buffer): void {
      if (text.length < OUTPUT_LIMIT) text += chunk.toString('utf8')
      if (options.ready !== undefined) {
        const match = options.ready.exec(text)
        if (match !== null) finish(null, match)
      }
    }
    proc.stdout!.on('data', onOutput)
    proc.stderr!.on('data', onOutput)
    proc.once('error', (err) => finish(new Error(`${name} could not start: ${err.message}`)))
    proc.once('exit', (code, signal) => finish(new Error(`${name} exited (${signal ?? code}) before it was ready:\n${tail(text)}`)))
    if (options.ready === undefined) proc.once('spawn', () => finish(null))
  })
}

function tail(text: string): string {
  return text.split('\n').slice(-15).join('\n')
}

/** Stops every child this run started and has not stopped yet. */
export async function stopAll(): Promise<void> {
  await Promise.all([...running].map((c) => c.stop()))
}

/** Best-effort synchronous kill for process exit paths (no awaiting possible there). */
export function killAllNow(): void {
  for (const c of running) {
    try {
      process.kill(c.pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  running.clear()
}

function childrenOf(pid: number): number[] {
  const out: number[] = []
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const list = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim()
      if (list !== '') for (const c of list.split(/\s+/)) out.push(Number(c))
    }
  } catch {
    // the process is gone
  }
  return out
}

function vmRssKb(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m === null ? 0 : Number(m[1])
  } catch {
    return 0
  }
}

/** `pid` and all its descendants (nginx: master + workers). */
function treeOf(pid: number): number[] {
  const queue = [pid]
  const seen = new Set<number>()
  while (queue.length > 0) {
    const p = queue.pop()!
    if (seen.has(p)) continue
    seen.add(p)
    queue.push(...childrenOf(p))
  }
  return [...seen]
}

/** VmRSS of `pid` plus all its descendants, in kB. */
export function treeRssKb(pid: number): number {
  let total = 0
  for (const p of treeOf(pid)) total += vmRssKb(p)
  return total
}

const CLOCK_TICKS_PER_S = (() => {
  const out = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })
  const n = Number(out.stdout?.trim())
  return Number.isFinite(n) && n > 0 ? n : 100
})()

/** User + system CPU time in a /proc `stat` file (a process's or a thread's), in ms; 0 when it is gone. */
function statCpuMs(path: string): number {
  try {
    // Fields after the parenthesised command name: state is 3rd, utime 14th and stime 15th of the line.
    const stat = readFileSync(path, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_S
  } catch {
    return 0
  }
}

/** User + system CPU time of `pid` and its descendants, in ms (10 ms resolution on most kernels). */
export function treeCpuMs(pid: number): number {
  let ms = 0
  for (const p of treeOf(pid)) ms += statCpuMs(`/proc/${p}/stat`)
  return ms
}

/** User + system CPU time of `pid` and each of its descendants, in ms, by pid: for treeCpuSinceMs. */
export function treeCpuByPid(pid: number): Map<number, number> {
  const out = new Map<number, number>()
  for (const p of treeOf(pid)) out.set(p, statCpuMs(`/proc/${p}/stat`))
  return out
}

/**
 * The CPU the tree of `pid` spent since `before` (treeCpuByPid), in ms: each process's own increase, a process
 * started since counted whole. A server whose processes come and go (PostgreSQL's backends of closed
 * connections, its autovacuum workers) would otherwise lose a departed process's whole time from the total
 * and could show less than before.
 */
export function treeCpuSinceMs(pid: number, before: ReadonlyMap<number, number>): number {
  let ms = 0
  for (const [p, now] of treeCpuByPid(pid)) ms += now - (before.get(p) ?? 0)
  return ms
}

/** User + system CPU time of each thread of `pid`, in ms, by thread id (0 for one that ended while being read). */
export function threadCpuMs(pid: number): Map<string, number> {
  const out = new Map<string, number>()
  let tids: string[] = []
  try {
    tids = readdirSync(`/proc/${pid}/task`)
  } catch {
    // the process is gone
  }
  for (const tid of tids) out.set(tid, statCpuMs(`/proc/${pid}/task/${tid}/stat`))
  return out
}

/** What one workload cost a target: peak resident memory and CPU time used. */
export interface Usage {
  readonly peakRssMb: number
  readonly cpuMs: number
}

/** Polls the RSS of a process tree while a workload runs (keeping the peak) and takes its CPU time. */
export class UsageMonitor {
  readonly #pid: number
  #peakKb = 0
  #cpuAtStart = 0
  #timer: NodeJS.Timeout | null = null

  constructor(pid: number) {
    this.#pid = pid
  }

  start(everyMs = 100): void {
    this.#cpuAtStart = treeCpuMs(this.#pid)
    this.#sample()
    this.#timer = setInterval(() => this.#sample(), everyMs)
  }

  stop(): Usage {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
    this.#sample()
    return { peakRssMb: this.#peakKb / 1024, cpuMs: treeCpuMs(this.#pid) - this.#cpuAtStart }
  }

  #sample(): void {
    this.#peakKb = Math.max(this.#peakKb, treeRssKb(this.#pid))
  }
}

/** A port that was free a moment ago (for servers that cannot be told to pick one themselves). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/** Resolves once something accepts TCP connections on 127.0.0.1:port. */
export async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1')
      socket.once('connect', () => {
        socket.destroy()
        resolve(true)
      })
      socket.once('error', () => resolve(false))
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/**
 * The entry point of a file that is also run as a load process (messages.ts, multipart.ts): when `moduleUrl`
 * is the script node was started with and a spec was passed, runs it and prints its result as one JSON line.
 */
export function runAsLoadProcess<S, R>(moduleUrl: string, run: (spec: S) => Promise<R>): void {
  if (process.argv[1] !== fileURLToPath(moduleUrl) || process.argv[2] === undefined) return
  run(JSON.parse(process.argv[2]) as S).then(
    (r) => {
      process.stdout.write(JSON.stringify(r) + '\n')
      process.exit(0)
    },
    (err: unknown) => {
      process.stderr.write(String((err as Error)?.stack ?? err) + '\n')
      process.exit(1)
    },
  )
}

/**
 * One run of a bench script that is also a load process (runAsLoadProcess) in a process of its own, with `spec`
 * as its argument, killed after `boundMs`: the JSON result it printed last, or why there is none. `file` is
 * the script's path under the build's `dist/bench/e2e` of `root`.
 */
export function runScriptProcess<R>(root: string, file: string, spec: unknown, boundMs: number): Promise<R> {
  const script = join(root, 'dist', 'bench', 'e2e', file)
  return new Promise((resolvePromise, reject) => {
    execFile(process.execPath, [script, JSON.stringify(spec)], { timeout: boundMs, killSignal: 'SIGKILL', maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err !== null) return reject(new Error(`${file} failed: ${err.message} ${stderr.trim().slice(-500)}`))
      const line = stdout.trim().split('\n').pop() ?? ''
      try {
        resolvePromise(JSON.parse(line) as R)
      } catch {
        reject(new Error(`${file} printed no result: ${stdout.slice(-300)} ${stderr.slice(-300)}`))
      }
    })
  })
}

/** One run of the load generator (load.ts) in a process of its own (runScriptProcess). */
export function runLoadProcess(root: string, spec: LoadSpec, boundMs: number): Promise<LoadResult> {
  return runScriptProcess<LoadResult>(root, 'load.js', spec, boundMs)
}
