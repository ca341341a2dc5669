/**
 * A real PostgreSQL for tests: Debian's PostgreSQL 15 binaries, a fresh cluster in a temp dir, a free TCP port
 * on 127.0.0.1, run as `nobody` (initdb refuses root). One server per test file; `newDatabase()` gives each
 * subtest a fresh empty database cheaply. The server can be stopped, killed, frozen and started again on the
 * same data and port, for the failure tests.
 *
 * With env `TEST_PG_URL` set, that server is used instead (databases are created there); it cannot be
 * stopped or frozen by a test, so `controllable` is false and the failure tests skip.
 *
 * Never orphaned: the postmaster gets SIGKILL when the test process dies however it dies (`--pdeathsig`), its
 * backends exit on their own once the postmaster is gone, and an exit handler kills
 * every server process.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { exited } from './child.js'

/** Debian's binaries: `TEST_PG_BIN`, else version 15, else the newest installed. */
function binDir(): string {
  if (process.env.TEST_PG_BIN) return process.env.TEST_PG_BIN
  const preferred = '/usr/lib/postgresql/15/bin'
  if (existsSync(join(preferred, 'postgres')) || !existsSync('/usr/lib/postgresql')) return preferred
  const versions = readdirSync('/usr/lib/postgresql')
    .filter((v) => existsSync(join('/usr/lib/postgresql', v, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a))
  return versions.length > 0 ? join('/usr/lib/postgresql', versions[0]!, 'bin') : preferred
}
const NOBODY_UID = 65534
const NOGROUP_GID = 65534
const AS_NOBODY = ['--reuid=nobody', '--regid=nogroup', '--clear-groups']

export interface TestPostgres {
  /** The URL of the first database (created empty at start, also on an outside server). */
  readonly url: string
  /** False when the server is an outside one (`TEST_PG_URL`): stop/kill/pause/start then throw. */
  readonly controllable: boolean
  /** The postmaster's pid while it runs (its backends are its children), null for an outside server. */
  readonly pid: number | null
  /** Fast shutdown (SIGINT to the postmaster), waiting until it exited. */
  stop(): Promise<void>
  /** SIGKILL to every process of the server (a crash: no shutdown checkpoint), waiting until they are gone. */
  kill(): Promise<void>
  /** SIGSTOP to every process of the server: connections stay open, nothing answers. */
  pause(): void
  /** SIGCONT to every process of the server. */
  resume(): void
  /** Starts it again on the same data dir and port, resolving once it accepts connections. */
  start(): Promise<void>
  /** Creates a fresh empty database and resolves to its URL. */
  newDatabase(): Promise<string>
}

export interface PostgresOptions {
  /** Default true (real fsync). Only tests that assert nothing about durability may turn it off. */
  fsync?: boolean
  /** Extra `-c name=value` settings for the server. */
  settings?: Record<string, string | number>
}

interface TapLike {
  teardown(fn: () => unknown): void
}

/** A free TCP port on 127.0.0.1 (the kernel's pick for port 0, released before the server binds it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

const live = new Set<ChildProcess>()
/** Temp dirs of servers not torn down yet: removed at exit too. */
const roots = new Set<string>()
let exitHookInstalled = false

/** Kills every server still running when the test process exits (sync: an exit handler cannot wait). */
function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const child of live) signalServer(child, 'SIGKILL')
    for (const root of roots) rmSync(root, { recursive: true, force: true })
  })
  // tap ends a file that ran past its timeout with SIGTERM: without a handler no 'exit' event is emitted.
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      for (const child of live) signalServer(child, 'SIGKILL')
      process.exit(128 + (signal === 'SIGTERM' ? 15 : 2))
    })
  }
}

/** Whether a spawned server process is still running (neither exited nor killed). */
function isRunning(child: ChildProcess | undefined): child is ChildProcess {
  return child !== undefined && child.exitCode === null && child.signalCode === null
}

/** A process's state letter and parent from /proc (null: gone). */
function procStat(pid: number | string): { state: string; ppid: number } | null {
  let stat: string
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ESRCH') return null
    throw err
  }
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return { state: fields[0]!, ppid: Number(fields[1]) }
}

/** The pids of the postmaster's children (backends, checkpointer, …), read from /proc. */
function childrenOf(pid: number): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue
    if (procStat(entry)?.ppid === pid) found.push(Number(entry))
  }
  return found
}

/**
 * SIGSTOP to the server, then until every one of its processes is seen stopped (state T), listed again each
 * round: a process in an uninterruptible wait stops only when the wait ends, and the test must not go on while
 * any backend could still answer. Throws if one is not stopped within `ms`.
 */
export function freezeServer(child: ChildProcess, ms = 2_000): void {
  const pid = child.pid
  if (pid === undefined) return
  const nap = new Int32Array(new SharedArrayBuffer(4))
  const deadline = Date.now() + ms
  for (;;) {
    const running = [pid, ...childrenOf(pid)].filter((each) => {
      const s = procStat(each)
      return s !== null && s.state !== 'T' && s.state !== 't' && s.state !== 'Z'
    })
    if (running.length === 0) return
    if (Date.now() > deadline) throw new Error(`postgres: processes ${running.join(', ')} did not stop`)
    for (const each of running) {
      try {
        process.kill(each, 'SIGSTOP')
      } catch {
        // gone
      }
    }
    Atomics.wait(nap, 0, 0, 5)
  }
}

/**
 * Sends `signal` to the postmaster and every process it forked. Not a process-group kill: each PostgreSQL
 * child calls setsid() (InitPostmasterChild), so a backend is in a group of its own. The postmaster is
 * signalled first, so that once it is stopped or killed it forks nothing the listing could miss.
 */
export function signalServer(child: ChildProcess, signal: NodeJS.Signals): number[] {
  const pid = child.pid
  if (pid === undefined) return []
  const pids = [pid]
  try {
    process.kill(pid, signal)
  } catch {
    // already gone
  }
  for (const each of childrenOf(pid)) {
    pids.push(each)
    try {
      process.kill(each, signal)
    } catch {
      // already gone
    }
  }
  return pids
}

/** Resolves once `url` answers a query (the server says "starting up" for a while after it listens). */
export async function waitForPostgres(url: string, child?: ChildProcess, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms
  let last: unknown
  while (Date.now() < deadline) {
    if (child && (child.exitCode !== null || child.signalCode !== null)) {
      throw new Error(`postgres exited (${child.exitCode ?? child.signalCode}) before accepting connections`)
    }
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 })
    client.on('error', () => {})
    try {
      await client.connect()
      await client.query('SELECT 1')
      await client.end()
      return
    } catch (err) {
      last = err
      await client.end().catch(() => {})
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  throw new Error(`postgres did not accept connections at ${url} within ${ms} ms: ${String(last)}`)
}

let databases = 0
/** Databases created ahead of newDatabase() calls. */
const OVEN_DEPTH = 2

async function createDatabase(adminUrl: string): Promise<string> {
  const name = `svc_test_${process.pid}_${Date.now().toString(36)}_${++databases}`
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 })
  client.on('error', () => {})
  await client.connect()
  try {
    await client.query(`CREATE DATABASE ${name}`)
  } finally {
    await client.end()
  }
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** Starts a PostgreSQL for this test file (or uses `TEST_PG_URL`), torn down with `t` when given. */
export async function startPostgres(t?: TapLike, options: PostgresOptions = {}): Promise<TestPostgres> {
  const outside = process.env.TEST_PG_URL
  if (outside) return { ...outsidePostgres(outside), url: await createDatabase(outside) }

  const BIN = binDir()
  if (!existsSync(join(BIN, 'postgres'))) {
    throw new Error(`no PostgreSQL binaries in ${BIN} (apt-get install postgresql-15, or set TEST_PG_URL)`)
  }
  installExitHook()
  const root = mkdtempSync(join(tmpdir(), 'svc-pg-'))
  roots.add(root)
  const data = join(root, 'data')
  const sockets = join(root, 'run')
  mkdirSync(data)
  mkdirSync(sockets)
  for (const dir of [root, data, sockets]) chownSync(dir, NOBODY_UID, NOGROUP_GID)

  // --no-sync only skips initdb's own final fsync of a throwaway cluster; the server itself runs with fsync on.
  const init = spawnSync(
    'setpriv',
    [...AS_NOBODY, join(BIN, 'initdb'), '-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync', '--locale=C'],
    { encoding: 'utf8' },
  )
  if (init.status !== 0) throw new Error(`initdb failed (${init.status}): ${init.stderr || init.stdout}`)

  const port = await freePort()
  const settings: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    port,
    unix_socket_directories: sockets,
    fsync: options.fsync === false ? 'off' : 'on',
    synchronous_commit: 'on',
    max_connections: 200,
    shared_buffers: '32MB',
    logging_collector: 'off',
    log_min_messages: 'fatal',
    ...options.settings,
  }
  const args = ['-D', data]
  for (const [name, value] of Object.entries(settings)) args.push('-c', `${name}=${value}`)
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`

  let child: ChildProcess | undefined
  let log = ''
  const launch = async () => {
    log = ''
    const started = spawn('setpriv', [...AS_NOBODY, '--pdeathsig', 'KILL', join(BIN, 'postgres'), ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    started.stderr!.on('data', (b: Buffer) => {
      log = (log + b.toString()).slice(-4_000)
    })
    live.add(started)
    started.once('exit', () => live.delete(started))
    child = started
    try {
      await waitForPostgres(adminUrl, started)
    } catch (err) {
      signalServer(started, 'SIGKILL')
      throw new Error(`${(err as Error).message}\n${log}`)
    }
  }
  const halt = async (signal: NodeJS.Signals) => {
    const running = child
    if (!isRunning(running)) return
    if (signal === 'SIGKILL') {
      const pids = signalServer(running, 'SIGKILL')
      await exited(running)
      await allGone(pids)
      return
    }
    signalServer(running, 'SIGCONT') // a frozen server cannot shut down
    running.kill(signal)
    await exited(running)
  }

  await launch()
  const url = await createDatabase(adminUrl)
  // CREATE DATABASE costs a fraction of a second with real fsync: the next ones are made while a test runs.
  const oven: Promise<string>[] = []
  const bake = () => {
    const next = createDatabase(adminUrl)
    next.catch(() => {})
    oven.push(next)
  }
  const newDatabase = (): Promise<string> => {
    if (oven.length === 0) bake()
    // One baked while the server was down or frozen failed: made again now.
    const next = oven.shift()!.catch(() => createDatabase(adminUrl))
    while (oven.length < OVEN_DEPTH) bake()
    return next
  }
  let torn = false
  const teardown = async () => {
    if (torn) return
    torn = true
    await halt('SIGKILL').catch(() => {})
    rmSync(root, { recursive: true, force: true })
    roots.delete(root)
  }
  t?.teardown(teardown)

  return {
    url,
    controllable: true,
    get pid() {
      return isRunning(child) ? (child.pid ?? null) : null
    },
    stop: () => halt('SIGINT'),
    kill: () => halt('SIGKILL'),
    pause: () => child && freezeServer(child),
    resume: () => child && signalServer(child, 'SIGCONT'),
    async start() {
      if (isRunning(child)) throw new Error('postgres is running')
      await launch()
    },
    newDatabase,
  }
}

/** Waits until none of `pids` is left (a killed child stays a zombie until its parent, init, reaps it). */
async function allGone(pids: number[], ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms
  const alive = (pid: number) => {
    try {
      return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ')
    } catch {
      return false
    }
  }
  while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
}

function outsidePostgres(url: string): TestPostgres {
  const refuse = () => {
    throw new Error('TEST_PG_URL names an outside server: it cannot be stopped, killed or frozen by a test')
  }
  return {
    url,
    controllable: false,
    pid: null,
    stop: async () => refuse(),
    kill: async () => refuse(),
    pause: refuse,
    resume: refuse,
    start: async () => refuse(),
    newDatabase: () => createDatabase(url),
  }
}
