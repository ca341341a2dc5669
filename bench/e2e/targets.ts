/**
 * What the e2e run measures: the simulated providers (one process each), and the ways to reach them (direct,
 * nginx, Portkey, svc-router, and the uWS + undici floor relay) as Targets that know how to address a request
 * to each simulator. nginx and Portkey live in proxies.ts, the floor relay's server in floor-relay.ts.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createBenchKey } from './bench-key.js'
import type { RequestSpec } from './load.js'
import { freePort, startChild, type Child } from './processes.js'
import { uwsBuild } from '../../src/server/uws-build.js'

/** fast: no pacing (request/response workloads); paced: TTFT; slow: long overlapping streams. */
export const SIM_KINDS = ['fast', 'paced', 'slow'] as const
export type SimKind = (typeof SIM_KINDS)[number]

export const SIM_SETTINGS: Readonly<Record<SimKind, { ttftMs: number; tokensPerS: number; completionTokens: number }>> = {
  fast: { ttftMs: 0, tokensPerS: 0, completionTokens: 16 },
  paced: { ttftMs: 20, tokensPerS: 500, completionTokens: 32 },
  slow: { ttftMs: 20, tokensPerS: 20, completionTokens: 40 },
}

export interface Sim {
  readonly kind: SimKind
  /** http://127.0.0.1:PORT, no /v1 */
  readonly url: string
  readonly port: number
  readonly child: Child
}

export type SimSet = Readonly<Record<SimKind, Sim>>

export type TargetId =
  | 'direct'
  | 'nginx'
  | 'portkey'
  | 'router'
  | 'router-normal'
  | 'floor'
  | 'floor-billed'
  | 'floor-billed-full'
  | 'router-logged'
  | 'router-quiet'
  | 'router-pg'
  | 'floor-billed-pg'
export const TARGET_IDS: readonly TargetId[] = ['direct', 'nginx', 'portkey', 'router', 'router-normal', 'floor', 'floor-billed', 'floor-billed-full', 'router-logged', 'router-quiet', 'router-pg', 'floor-billed-pg']
/** The billed floors: the references of the targets (issue 45), by the durability of their journal. */
export const BILLED_FLOORS: readonly TargetId[] = ['floor-billed', 'floor-billed-full', 'floor-billed-pg']
/**
 * The svc-router targets: the default (`full`), `normal` commits, the two of the cost of telemetry (issue #13),
 * and a replica on PostgreSQL + Redis (issue #28, replicas.ts), an extra target of the latency workload only.
 */
export type RouterId = 'router' | 'router-normal' | 'router-logged' | 'router-quiet' | 'router-pg'
/**
 * The cost of telemetry: svc-router with every access line written (level info) and metrics on, and with both
 * off. Extra targets of the latency workload only.
 */
export const TELEMETRY_VARIANTS: readonly TargetId[] & readonly RouterId[] = ['router-logged', 'router-quiet']
export const TARGET_NAMES: Readonly<Record<TargetId, string>> = {
  direct: 'direct',
  nginx: 'nginx',
  portkey: 'Portkey',
  router: 'svc-router',
  'router-normal': 'svc-router, synchronous normal',
  floor: 'uWS + undici relay',
  'floor-billed': 'uWS + undici relay + required billing work',
  'floor-billed-full': 'uWS + undici relay + required billing work, flushed (`full`)',
  'floor-billed-pg': 'uWS + undici relay + required billing work on PostgreSQL',
  'router-logged': 'svc-router, access log written + metrics',
  'router-quiet': 'svc-router, no access log, no metrics',
  'router-pg': 'svc-router on PostgreSQL + Redis',
}
/** What each router variant changes in the run's router config. */
const VARIANT_CONFIG: Readonly<Record<RouterId, readonly string[]>> = {
  router: ['log: { level: error }'],
  'router-normal': ['log: { level: error }'],
  'router-logged': ['log: { level: info, format: json, access_log: true }', 'ops: { metrics: true }'],
  'router-quiet': ['log: { level: error, access_log: false }', 'ops: { metrics: false }'],
  'router-pg': ['log: { level: error }'],
}

export interface Target {
  readonly id: TargetId
  readonly version: string
  /** Why it cannot be measured here, or null. */
  readonly unavailable: string | null
  /**
   * The process whose tree's RSS and CPU time are the target's (null for direct). The floor relay runs one
   * process per simulator: this is the `fast` one, the one the request/response workloads go through.
   */
  readonly pid: number | null
  /** Targets with one process per simulator (the floor relay): each simulator's, for the monitor of a workload on it. */
  readonly pids?: Readonly<Record<SimKind, number>>
  request(kind: SimKind, stream: boolean): RequestSpec
  stop(): Promise<void>
}

export const CHAT_PATH = '/v1/chat/completions'
/** What the client sends as its provider credential through direct, nginx and Portkey (the simulator ignores it). */
export const PROVIDER_KEY = 'sk-bench-provider'

export function modelFor(kind: SimKind): string {
  return `bench-${kind}`
}

export function chatBody(kind: SimKind, stream: boolean): string {
  const body: Record<string, unknown> = { model: modelFor(kind), messages: [{ role: 'user', content: 'hi' }] }
  if (stream) body.stream = true
  return JSON.stringify(body)
}

export function unavailable(id: TargetId, reason: string, version = 'n/a'): Target {
  return {
    id,
    version,
    unavailable: reason,
    pid: null,
    request() {
      throw new Error(`${id} is unavailable: ${reason}`)
    },
    async stop() {},
  }
}

export async function startSimulators(root: string): Promise<SimSet> {
  const cli = join(root, 'dist', 'src', 'cli.js')
  const entries = await Promise.all(
    SIM_KINDS.map(async (kind): Promise<[SimKind, Sim]> => {
      const s = SIM_SETTINGS[kind]
      const args = [cli, 'simulate-provider', '--port', '0', '--name', `sim-${kind}`, '--ttft-ms', String(s.ttftMs), '--tokens-per-s', String(s.tokensPerS), '--completion-tokens', String(s.completionTokens)]
      const { child, match } = await startChild(`simulator (${kind})`, process.execPath, args, { ready: /simulator listening on (http:\/\/[^\s]+)/ })
      const url = match![1]!
      return [kind, { kind, url, port: Number(new URL(url).port), child }]
    }),
  )
  return Object.fromEntries(entries) as Record<SimKind, Sim>
}

/** A chat request as a provider takes it (the simulator's key, no router headers): direct's, and the floor relay's. */
function providerRequest(origin: string, kind: SimKind, stream: boolean): RequestSpec {
  return { origin, path: CHAT_PATH, headers: { 'content-type': 'application/json', authorization: `Bearer ${PROVIDER_KEY}` }, body: chatBody(kind, stream) }
}

export function directTarget(sims: SimSet): Target {
  return {
    id: 'direct',
    version: 'svc-router simulate-provider',
    unavailable: null,
    pid: null,
    request: (kind, stream) => providerRequest(sims[kind].url, kind, stream),
    async stop() {},
  }
}

function routerRegistry(sims: SimSet): string {
  const lines = ['providers:']
  SIM_KINDS.forEach((kind, i) => {
    lines.push(
      `  - address: "0x${String(i + 1).repeat(40)}"`,
      `    url: "${sims[kind].url}"`,
      '    trust_mode: standard',
      '    models:',
      `      - id: ${modelFor(kind)}`,
      '        type: chatbot',
      '        formats: [openai]',
      '        context_length: 32768',
      '        supported_parameters: [temperature, top_p, max_tokens]',
      '        price: { prompt: 0.10, completion: 0.30 }',
    )
  })
  return lines.join('\n') + '\n'
}

/** How a svc-router target is configured beyond the shared bench config. */
export interface RouterVariant {
  /** `store.synchronous`: full (the default, durable charges) or normal (survive a process crash only). */
  readonly synchronous: 'full' | 'normal'
  /** Extra node flags (e.g. --cpu-prof for the stage breakdown). */
  readonly nodeArgs?: readonly string[]
  /** A store replicas share instead of the run's SQLite file (replicas.ts); `synchronous` then does not apply. */
  readonly shared?: SharedStore
}

/** svc-router as a replica: `store.kind: postgres` on `pgUrl`, Redis at `redisUrl`, `workers` processes on one port. */
export interface SharedStore {
  readonly pgUrl: string
  readonly redisUrl: string
  /** `serve --workers N` (N > 1 listens on a fixed free port, as the workers share it); default 1. */
  readonly workers?: number
  /** Its directory under the run's work dir (default: the target id). */
  readonly name?: string
}

/**
 * svc-router as `svc-router serve` runs it, on a config and a fresh store written for the run: errors-only
 * log, a rate limit no workload reaches, the dev bootstrap for a funded account and key, and the upstream pool
 * widened to 1,024 connections (at the default 128, 500 concurrent streams to one provider would queue in the
 * pool instead of overlapping). `id` 'router' is the default (`full`); 'router-normal' commits without the flush.
 */
export async function routerTarget(
  root: string,
  sims: SimSet,
  workDir: string,
  id: RouterId = 'router',
  variant: RouterVariant = { synchronous: id === 'router-normal' ? 'normal' : 'full' },
): Promise<Target> {
  const shared = variant.shared
  const dir = join(workDir, shared?.name ?? `${id}${variant.nodeArgs === undefined ? '' : '-profiled'}`)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'providers.yaml'), routerRegistry(sims))
  const configFile = join(dir, 'config.yaml')
  const workers = shared?.workers ?? 1
  // The workers of `serve --workers N` share one port, so it cannot be port 0.
  const port = workers > 1 ? await freePort() : 0
  const store =
    shared === undefined
      ? [`store: { kind: sqlite, path: ${JSON.stringify(join(dir, 'svc.db'))}, synchronous: ${variant.synchronous} }`]
      : [`store: { kind: postgres, url: ${JSON.stringify(shared.pgUrl)} }`, `redis: { url: ${JSON.stringify(shared.redisUrl)} }`]
  writeFileSync(
    configFile,
    [
      `server: { host: 127.0.0.1, port: ${port} }`,
      'registry: { source: file, path: providers.yaml, watch: false }',
      ...store,
      'limits: { requests_per_minute: 100000000 }',
      'upstream: { connections_per_provider: 1024 }',
      ...VARIANT_CONFIG[id],
      '# A fresh store per run: the dev bootstrap mints the account and the sk- key the run uses (bench-key.ts).',
      'dev: { bootstrap: true, deposit_usd: 1000000 }',
      '',
    ].join('\n'),
  )
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version
  const args = [...(variant.nodeArgs ?? []), join(root, 'dist', 'src', 'cli.js'), 'serve', '--config', configFile, ...(workers > 1 ? ['--workers', String(workers)] : [])]
  const { child, match } = await startChild(shared?.name ?? TARGET_NAMES[id], process.execPath, args, {
    cwd: root,
    // With workers, ready once every one of them printed its listening line.
    ready: workers > 1 ? new RegExp(`(?:[\\s\\S]*?svc-router listening on (http://[^\\s]+)){${workers}}`) : /svc-router listening on (http:\/\/[^\s]+)/,
  })
  const url = match![1]!
  const key = await createBenchKey({ url, configFile, output: () => child.output() })
  return {
    id,
    version,
    unavailable: null,
    pid: child.pid,
    request(kind, stream) {
      return {
        origin: url,
        path: CHAT_PATH,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: chatBody(kind, stream),
      }
    },
    stop: () => child.stop(),
  }
}

/** A svc-router started by a workload of its own (messages.ts, multipart.ts), with the key the run sends to it. */
export interface OwnRouter {
  readonly url: string
  readonly key: string
  readonly child: Child
}

/**
 * Starts a svc-router of a workload's own in `workDir`/`name`: `registry` as its providers.yaml, the bench's
 * base config (errors-only log, a rate limit no workload reaches, a fresh store with the dev bootstrap) plus
 * `extra` config lines.
 */
export async function startOwnRouter(root: string, workDir: string, name: string, registry: string, extra: readonly string[] = []): Promise<OwnRouter> {
  const dir = join(workDir, name)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'providers.yaml'), registry)
  const configFile = join(dir, 'config.yaml')
  const config = [
    'server: { host: 127.0.0.1, port: 0 }',
    'registry: { source: file, path: providers.yaml, watch: false }',
    `store: { kind: sqlite, path: ${JSON.stringify(join(dir, 'svc.db'))} }`,
    'limits: { requests_per_minute: 100000000 }',
    'log: { level: error }',
    'dev: { bootstrap: true, deposit_usd: 1000000 }',
    ...extra,
  ]
  writeFileSync(configFile, config.join('\n') + '\n')
  const { child, match } = await startChild(`svc-router (${name})`, process.execPath, [join(root, 'dist', 'src', 'cli.js'), 'serve', '--config', configFile], {
    cwd: root,
    ready: /svc-router listening on (http:\/\/[^\s]+)/,
  })
  try {
    const url = match![1]!
    return { url, key: await createBenchKey({ url, configFile, output: () => child.output() }), child }
  } catch (err) {
    await child.stop()
    throw err
  }
}

/**
 * Where the billed floor journals its charges (floor-journal.ts): a SQLite file per relay in `dir`, committed
 * as `normal` (on the OS) or `full` (flushed by a thread-pool fdatasync, group-committed), or PostgreSQL at
 * `pgUrl` (one transaction per batch, synchronous_commit on). A string is a directory, `normal`.
 */
export type FloorJournal = string | { readonly dir: string; readonly sync: 'normal' | 'full' } | { readonly pgUrl: string }

/** The target id of the floor with `journal` (the bare floor without one). */
export function floorId(journal: FloorJournal | null): TargetId {
  if (journal === null) return 'floor'
  if (typeof journal === 'string') return 'floor-billed'
  return 'pgUrl' in journal ? 'floor-billed-pg' : journal.sync === 'full' ? 'floor-billed-full' : 'floor-billed'
}

function billArgs(journal: FloorJournal | null, kind: SimKind): string[] {
  if (journal === null) return []
  if (typeof journal === 'string') return ['--bill', join(journal, `floor-journal-${kind}.db`)]
  if ('pgUrl' in journal) return ['--bill-pg', journal.pgUrl]
  return ['--bill', join(journal.dir, `floor-journal-${journal.sync}-${kind}.db`), '--sync', journal.sync]
}

/**
 * The floor: bench/e2e/floor-relay.ts, the smallest relay on svc-router's stack (uWebSockets.js in front, one
 * undici Pool of 1,024 connections behind), with no routing, auth, trace or billing. It relays to one origin,
 * so there is one process per simulator; the request is direct's, addressed to the relay of that simulator.
 * `pid` is the `fast` relay's (the one the request/response workloads use); `pids` has each simulator's, so the
 * CPU and RSS of a workload are read from the relay it went through. `nodeArgs` are node flags for one relay
 * only, the `argsKind` one (`fast` by default). With `journal` it is the floor with the required billing work
 * (floor-relay.ts `--bill`, targets `floor-billed`, `floor-billed-full` and `floor-billed-pg`).
 */
export async function floorTarget(
  root: string,
  sims: SimSet,
  nodeArgs: readonly string[] = [],
  journal: FloorJournal | null = null,
  argsKind: SimKind = 'fast',
): Promise<Target> {
  const script = join(root, 'dist', 'bench', 'e2e', 'floor-relay.js')
  const started = await Promise.allSettled(
    SIM_KINDS.map(async (kind) => {
      // Node flags (the stage breakdown's --cpu-prof) go to one relay only: the one the workload uses (`fast`, or
      // perf-cpu.ts's stream mode's `paced`).
      const args = [...(kind === argsKind ? nodeArgs : []), script, sims[kind].url, '0', ...billArgs(journal, kind)]
      const { child, match } = await startChild(`floor relay (${kind})`, process.execPath, args, {
        cwd: root,
        ready: /floor relay listening on (http:\/\/[^\s]+)/,
      })
      return { kind, child, url: match![1]! }
    }),
  )
  const relays = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []))
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (failed !== undefined) {
    await Promise.all(relays.map((r) => r.child.stop()))
    throw failed.reason
  }
  const byKind = Object.fromEntries(relays.map((r) => [r.kind, r])) as Record<SimKind, (typeof relays)[number]>
  const undici = (JSON.parse(readFileSync(join(root, 'node_modules', 'undici', 'package.json'), 'utf8')) as { version: string }).version
  return {
    id: floorId(journal),
    version: `${uwsVersion()} + undici ${undici}`,
    unavailable: null,
    pid: byKind.fast.child.pid,
    pids: { fast: byKind.fast.child.pid, paced: byKind.paced.child.pid, slow: byKind.slow.child.pid },
    request: (kind, stream) => providerRequest(byKind[kind].url, kind, stream),
    stop: async () => {
      await Promise.all(relays.map((r) => r.child.stop()))
    },
  }
}

/**
 * One JSON and one streamed request through the target before anything is measured: a target that answers
 * wrongly is reported unavailable, with what it answered, instead of being timed.
 */
export async function smokeCheck(target: Target): Promise<string | null> {
  try {
    const json = target.request('fast', false)
    const res = await fetch(json.origin + json.path, { method: 'POST', headers: json.headers, body: json.body, signal: AbortSignal.timeout(10_000) })
    const text = await res.text()
    if (res.status !== 200) return `HTTP ${res.status} on a chat completion: ${text.slice(0, 200)}`
    const body = JSON.parse(text) as { choices?: { message?: { content?: unknown } }[]; x_svc_trace?: unknown }
    if (typeof body.choices?.[0]?.message?.content !== 'string') return `no choices[0].message.content in ${text.slice(0, 200)}`
    if ((target.id.startsWith('router') || BILLED_FLOORS.includes(target.id)) && body.x_svc_trace === undefined) return 'answered without x_svc_trace'

    const sse = target.request('paced', true)
    const streamed = await fetch(sse.origin + sse.path, { method: 'POST', headers: sse.headers, body: sse.body, signal: AbortSignal.timeout(10_000) })
    const events = await streamed.text()
    if (streamed.status !== 200) return `HTTP ${streamed.status} on a stream: ${events.slice(0, 200)}`
    if (!events.includes('"delta":{"content":"')) return `no content token in the stream: ${events.slice(0, 200)}`
    if (!events.trimEnd().endsWith('data: [DONE]')) return `the stream did not end with [DONE]: …${events.slice(-200)}`
    if (BILLED_FLOORS.includes(target.id) && !events.includes('"x_svc_trace":')) return 'a stream without its trace event'
    return null
  } catch (err) {
    return `request failed: ${(err as Error).message}`
  }
}

/** The uWS build the floor relays run on (the one this Node loads, as they do), e.g. "uWS uws-build-uwebsockets 3.0.6". */
function uwsVersion(): string {
  const build = uwsBuild()
  return `uWS ${build.candidate.name} ${build.version}`
}
