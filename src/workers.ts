/**
 * `svc-router serve --workers N`: N router processes on one machine sharing the listening port (uWS binds
 * with SO_REUSEPORT, so the kernel spreads connections over them), supervised: a worker that dies is started
 * again, with a backoff that grows while it keeps dying. Each worker is a whole replica (DESIGN.md §6), so N > 1
 * needs a store the replicas can share (store.kind: postgres): with SQLite each process would keep its own
 * budgets in memory and their sum could pass a limit.
 *
 * The first worker starts alone (it migrates the store and may bootstrap the dev account), the others once it
 * listens. SIGTERM/SIGINT are passed on: every worker drains, then the supervisor exits. A worker whose
 * supervisor is gone (killed) drains and exits by itself: the IPC channel's disconnect tells it.
 */
import { fork, type ChildProcess } from 'node:child_process'
import type { Config } from './config/index.js'
import { log } from './log.js'

export const MAX_WORKERS = 64
const BACKOFF_MS = [500, 1_000, 2_000, 5_000, 10_000, 30_000]
/** A worker that stayed up this long starts its backoff over. */
const STABLE_MS = 60_000

/** Why `--workers n` cannot run on `config`, or null. */
export function workersProblem(n: number, config: Config): string | null {
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_WORKERS) return `--workers takes a whole number from 1 to ${MAX_WORKERS}`
  if (n === 1) return null
  if (config.store.kind !== 'postgres') {
    return '--workers above 1 needs store.kind: postgres (SQLite keeps each budget in one process\'s memory, so several processes could overspend it)'
  }
  if (config.server.port === 0) return '--workers above 1 needs a fixed server.port (the workers share it)'
  return null
}

interface Worker {
  index: number
  child: ChildProcess | null
  failures: number
  startedAt: number
  timer: NodeJS.Timeout | null
}

/** Runs `n` workers of `serve` with `args` until a signal ends them; resolves with the exit code. */
export function superviseWorkers(n: number, args: readonly string[]): Promise<number> {
  const script = process.argv[1]!
  const workers: Worker[] = Array.from({ length: n }, (_, index) => ({ index, child: null, failures: 0, startedAt: 0, timer: null }))
  let stopping = false
  let resolveDone!: (code: number) => void
  const done = new Promise<number>((resolve) => (resolveDone = resolve))

  function start(w: Worker): Promise<boolean> {
    return new Promise((resolve) => {
      const child = fork(script, ['serve', ...args], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      })
      w.child = child
      w.startedAt = Date.now()
      let ready = false
      child.on('message', (message: unknown) => {
        if ((message as { ready?: unknown })?.ready !== undefined && !ready) {
          ready = true
          resolve(true)
        }
      })
      child.on('exit', (code, signal) => {
        w.child = null
        if (!ready) resolve(false)
        if (stopping) return checkAllStopped()
        if (Date.now() - w.startedAt > STABLE_MS) w.failures = 0
        const delay = BACKOFF_MS[Math.min(w.failures, BACKOFF_MS.length - 1)]!
        w.failures++
        log.error('worker exited; starting it again', { worker: w.index, code, signal, in_ms: delay })
        w.timer = setTimeout(() => {
          w.timer = null
          if (!stopping) void start(w)
        }, delay)
      })
    })
  }

  function checkAllStopped(): void {
    if (workers.every((w) => w.child === null)) resolveDone(0)
  }

  function stop(signal: NodeJS.Signals): void {
    if (stopping) {
      for (const w of workers) w.child?.kill('SIGKILL')
      return
    }
    stopping = true
    log.info('stopping workers', { signal })
    for (const w of workers) {
      if (w.timer !== null) clearTimeout(w.timer)
      w.child?.kill(signal)
    }
    checkAllStopped()
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)

  void (async () => {
    // The first one alone: it migrates an empty store and bootstraps the dev account, once.
    if (!(await start(workers[0]!))) {
      log.error('the first worker did not start; not starting the others')
      stopping = true
      for (const w of workers) if (w.timer !== null) clearTimeout(w.timer)
      return resolveDone(1)
    }
    await Promise.all(workers.slice(1).map((w) => start(w)))
    log.info('workers listening', { workers: n })
  })()
  return done
}
