/**
 * A real Redis for tests: Debian's `redis-server` on a free port of 127.0.0.1, nothing persisted (`--save ''
 * --appendonly no`). It can be stopped, killed, frozen and started again on the same port, for the failure
 * tests. With env `TEST_REDIS_URL` set, that server is used instead (`controllable` false: the failure
 * tests skip). Never orphaned: SIGKILL when the test process dies (`--pdeathsig`) and an exit handler.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { connect } from 'node:net'
import { exited } from './child.js'
import { freePort } from './postgres.js'

const SERVER = process.env.TEST_REDIS_BIN ?? '/usr/bin/redis-server'

export interface TestRedis {
  /** redis://127.0.0.1:PORT/0 */
  readonly url: string
  readonly controllable: boolean
  /** SHUTDOWN NOSAVE by SIGTERM, waiting until it exited. */
  stop(): Promise<void>
  /** SIGKILL, waiting until it exited. */
  kill(): Promise<void>
  /** SIGSTOP: connections stay open, nothing answers. */
  pause(): void
  /** SIGCONT. */
  resume(): void
  /** Starts it again (empty: nothing is persisted) on the same port, resolving once it answers PING. */
  start(): Promise<void>
}

interface TapLike {
  teardown(fn: () => unknown): void
}

const live = new Set<ChildProcess>()
let exitHookInstalled = false

function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const child of live) child.kill('SIGKILL')
  })
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      for (const child of live) child.kill('SIGKILL')
      process.exit(128 + (signal === 'SIGTERM' ? 15 : 2))
    })
  }
}

/** One PING over a raw socket: true on +PONG. */
function ping(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host })
    let reply = ''
    const done = (ok: boolean) => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(1_000, () => done(false))
    socket.once('error', () => done(false))
    socket.once('connect', () => socket.write('PING\r\n'))
    socket.on('data', (b: Buffer) => {
      reply += b.toString()
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'))
    })
  })
}

/** Starts a redis-server for this test file (or uses `TEST_REDIS_URL`), torn down with `t` when given. */
export async function startRedis(t?: TapLike): Promise<TestRedis> {
  const outside = process.env.TEST_REDIS_URL
  if (outside) {
    const refuse = () => {
      throw new Error('TEST_REDIS_URL names an outside server: it cannot be stopped, killed or frozen')
    }
    return {
      url: outside,
      controllable: false,
      stop: async () => refuse(),
      kill: async () => refuse(),
      pause: refuse,
      resume: refuse,
      start: async () => refuse(),
    }
  }
  if (!existsSync(SERVER)) throw new Error(`no ${SERVER} (apt-get install redis-server, or set TEST_REDIS_URL)`)
  installExitHook()
  const port = await freePort()
  const args = [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--save', '',
    '--appendonly', 'no',
    '--daemonize', 'no',
    '--protected-mode', 'yes',
    '--loglevel', 'warning',
    '--dir', '/tmp',
  ]
  let child: ChildProcess | undefined
  let log = ''
  const launch = async () => {
    log = ''
    const started = spawn('setpriv', ['--pdeathsig', 'KILL', SERVER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    const keep = (b: Buffer) => {
      log = (log + b.toString()).slice(-4_000)
    }
    started.stdout!.on('data', keep)
    started.stderr!.on('data', keep)
    live.add(started)
    started.once('exit', () => live.delete(started))
    child = started
    const deadline = Date.now() + 30_000
    while (!(await ping(port))) {
      if (started.exitCode !== null || started.signalCode !== null || Date.now() > deadline) {
        started.kill('SIGKILL')
        throw new Error(`redis-server did not answer on port ${port}: ${log}`)
      }
      await new Promise((r) => setTimeout(r, 25))
    }
  }
  const halt = async (signal: NodeJS.Signals) => {
    const running = child
    if (!running || running.exitCode !== null || running.signalCode !== null) return
    if (signal !== 'SIGKILL') running.kill('SIGCONT')
    running.kill(signal)
    await exited(running)
  }
  await launch()
  t?.teardown(() => halt('SIGKILL'))
  return {
    url: `redis://127.0.0.1:${port}/0`,
    controllable: true,
    stop: () => halt('SIGTERM'),
    kill: () => halt('SIGKILL'),
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    async start() {
      if (child && child.exitCode === null && child.signalCode === null) throw new Error('redis-server is running')
      await launch()
    },
  }
}
