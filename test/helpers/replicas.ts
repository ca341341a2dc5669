/**
 * A fleet of real `svc-router serve` processes on one PostgreSQL (and Redis), as the replicas issue's
 * acceptance runs it: each replica its own process with the same config, started at once or one by one,
 * killable with SIGKILL and restartable. The operator CLI runs against the same database.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { stringify } from 'yaml'
import { startSimulator } from '../../src/simulator/simulator.js'
import { startPostgres, type TestPostgres } from './postgres.js'
import { startRedis, type TestRedis } from './redis.js'
import { killChild } from './child.js'
import { DEFAULT_PRICE } from './stack.js'
import { ownDir } from './own-dir.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname

export interface Replica {
  readonly index: number
  url: string
  child: ChildProcess
  /** SIGKILL, resolving once the process is gone. */
  kill(): Promise<void>
  /** Starts it again on the same config (a new process, a new port). */
  restart(): Promise<void>
}

export interface Fleet {
  readonly replicas: Replica[]
  readonly config: string
  readonly dir: string
  /** Runs the operator CLI on the fleet's store; returns its stdout (throws on a non-zero exit). */
  cli(...args: string[]): string
}

interface TapLike {
  teardown(fn: () => unknown): void
}

export interface FleetOptions {
  readonly n: number
  readonly pgUrl: string
  readonly redisUrl?: string
  readonly providers: object[]
  /** Config sections merged over the fleet's defaults. */
  readonly config?: Record<string, Record<string, unknown>>
  /** Start every replica at the same moment (an empty database migrated by whichever wins the lock). */
  readonly together?: boolean
}

function startOne(t: TapLike, config: string, index: number): Promise<{ url: string; child: ChildProcess }> {
  // SIGKILLed with this test process however it ends (a file past its time budget included): no orphan replica.
  const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', process.execPath, CLI, 'serve', '--config', config], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  return new Promise((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => reject(new Error(`replica ${index} did not start: ${out}`)), 30_000)
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString()
      const listening = /listening on (http:\/\/\S+)/.exec(out)
      if (listening === null) return
      clearTimeout(timer)
      resolve({ url: listening[1]!, child })
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`replica ${index} exited with ${code} before listening: ${out}`))
    })
  })
}

export async function startFleet(t: TapLike, options: FleetOptions): Promise<Fleet> {
  const dir = ownDir(t, 'svc-fleet-')
  writeFileSync(join(dir, 'providers.yaml'), stringify({ providers: options.providers }))
  const extra = options.config ?? {}
  const config = join(dir, 'config.yaml')
  writeFileSync(
    config,
    stringify({
      ...extra,
      server: { host: '127.0.0.1', port: 0, ...extra.server },
      registry: { path: 'providers.yaml', watch: false, ...extra.registry },
      store: { kind: 'postgres', url: options.pgUrl, ...extra.store },
      redis: { url: options.redisUrl ?? '', ...extra.redis },
      replicas: { heartbeat_ms: 200, fence_ms: 1_000, dead_after_ms: 3_000, lease_linger_ms: 100, ...extra.replicas },
      log: { level: 'error', ...extra.log },
      limits: { requests_per_minute: 1_000_000, ...extra.limits },
      health: { probes: false, ...extra.health },
      dev: { bootstrap: false },
    }),
  )
  const replicas: Replica[] = []
  const make = async (index: number): Promise<Replica> => {
    const started = await startOne(t, config, index)
    const replica: Replica = {
      index,
      url: started.url,
      child: started.child,
      kill: () => killChild(replica.child),
      async restart() {
        const again = await startOne(t, config, index)
        replica.url = again.url
        replica.child = again.child
      },
    }
    return replica
  }
  if (options.together === true) replicas.push(...(await Promise.all(Array.from({ length: options.n }, (_, i) => make(i)))))
  else for (let i = 0; i < options.n; i++) replicas.push(await make(i))
  return {
    replicas,
    config,
    dir,
    cli(...args: string[]): string {
      const run = spawnSync(process.execPath, [CLI, ...args, '--config', config], { encoding: 'utf8', timeout: 30_000 })
      if (run.status !== 0) throw new Error(`svc-router ${args.join(' ')} exited ${run.status}: ${run.stderr}${run.stdout}`)
      return run.stdout
    },
  }
}

/** What a fleet runs on: a PostgreSQL and a Redis of the test file's own, and one simulated chat provider. */
export async function fleetBackends(t: TapLike, address: string): Promise<{ pg: TestPostgres; redis: TestRedis; providers: object[] }> {
  const pg = await startPostgres(t)
  const redis = await startRedis(t)
  const sim = await startSimulator({ name: 'fleet', ttftMs: 2, tokensPerS: 2_000, completionTokens: 8 })
  t.teardown(() => sim.close())
  const providers = [{ address, url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: 'm-chat', type: 'chatbot', price: DEFAULT_PRICE }] }]
  return { pg, redis, providers }
}

/** Funds `wallet` with 100 USD and issues it an mk- key (all scopes) and an sk- key, with the operator CLI. */
export function provision(fleet: Fleet, wallet: string): { mk: string; sk: string } {
  fleet.cli('accounts', 'deposit', wallet, '100')
  const mk = /(mk-[A-Za-z0-9_-]{43})/.exec(fleet.cli('mgmt-keys', 'create', wallet, '--scopes', 'all', '--name', 'ops'))![1]!
  const sk = /(sk-[A-Za-z0-9_-]{43})/.exec(fleet.cli('api-keys', 'create', wallet, '--name', 'app'))![1]!
  return { mk, sk }
}

/** A chat completion; the status, the body and the trace's request id and cost when it has one. */
export async function chat(
  url: string,
  key: string,
  body: Record<string, unknown> = {},
): Promise<{ status: number; text: string; headers: Record<string, string | string[] | undefined> }> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm-chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, ...body }),
  })
  return { status: res.statusCode, text: await res.body.text(), headers: res.headers }
}

/** GET with an mk- key; the parsed JSON. */
export async function getJson(url: string, path: string, mk: string): Promise<{ status: number; body: any }> {
  const res = await request(`${url}${path}`, { headers: { authorization: `Bearer ${mk}` } })
  const text = await res.body.text()
  return { status: res.statusCode, body: text === '' ? null : JSON.parse(text) }
}

/** A JSON request with an mk- key. */
export async function sendJson(url: string, method: 'POST' | 'PATCH' | 'DELETE', path: string, mk: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await request(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${mk}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.body.text()
  return { status: res.statusCode, body: text === '' ? null : JSON.parse(text) }
}
