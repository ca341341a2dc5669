/**
 * The one schema of the configuration (DESIGN.md §3). Every key has a default, so an empty file is a whole
 * config; `config/example.full.yaml` lists every key with its default and must stay in step with this file.
 */

import { z } from 'zod'
import { originProblem } from '../auth/console-origins.js'
import { LOWER_ADDRESS_PATTERN } from '../vocabulary/address.js'

/** Node clamps any timer delay above 2^31-1 ms to 1 ms, so a longer "timeout" would fire at once. */
export const MAX_TIMER_MS = 2_147_483_647

const timeoutMs = (fallback: number) => z.int().positive().max(MAX_TIMER_MS).default(fallback)
const byteSize = (fallback: number) => z.int().positive().default(fallback)

const ServerSchema = z.strictObject({
  host: z.string().min(1).default('127.0.0.1'),
  /** 0 asks the OS for an ephemeral port (tests). */
  port: z.int().min(0).max(65535).default(8080),
  max_json_body_bytes: byteSize(10 * 1024 * 1024),
  /**
   * Largest request head served (request line, fields, empty line); larger → 431. Handed to uWS, as
   * UWS_HTTP_MAX_HEADERS_SIZE, before it loads (server/uws-build.ts): uWS reads it once.
   */
  max_head_bytes: z.int().min(1024).max(65536).default(4096),
  /** Largest multipart upload (image edits, transcriptions); larger → 413, and an attempt under way is cancelled. */
  max_multipart_body_bytes: byteSize(100 * 1024 * 1024),
  /** How long a client may take to drain a streamed response's buffered output before it is closed. */
  send_timeout_ms: timeoutMs(60_000),
  /** On SIGTERM/SIGINT: how long requests in flight may take to finish before they are ended. */
  drain_timeout_ms: timeoutMs(30_000),
  /**
   * Where the console is reached (scheme://host[:port] each): the only domains a wallet sign-in may name. Empty:
   * the listening address (as localhost and 127.0.0.1 when it is a loopback or wildcard one).
   */
  public_origins: z
    .array(
      z.string().superRefine((value, ctx) => {
        const problem = originProblem(value)
        if (problem !== null) ctx.addIssue({ code: 'custom', message: `${problem} (got ${JSON.stringify(value)})` })
      }),
    )
    .default([]),
})

const RegistrySchema = z.strictObject({
  source: z.enum(['file']).default('file'),
  /** Relative to the config file's directory; returned absolute. */
  path: z.string().min(1).default('providers.yaml'),
  watch: z.boolean().default(true),
})

const StoreSchema = z.strictObject({
  kind: z.enum(['sqlite']).default('sqlite'),
  /** Relative to the config file's directory; returned absolute. */
  path: z.string().min(1).default('../data/svc.db'),
  /**
   * full: every commit (a charge before its response's last byte, a revoke) is fsynced and survives a power cut.
   * normal: commits survive a crash of the process but not of the machine, and skip the fsync (faster last byte).
   */
  synchronous: z.enum(['full', 'normal']).default('full'),
})

/** A deposit of up to 1e9 USD: exact as a JS number when written with at most 6 decimals. */
const DevSchema = z.strictObject({
  /** On an empty store, create a dev account with a deposit and print a dev sk- and mk- key once. */
  bootstrap: z.boolean().default(false),
  wallet: z
    .string()
    .regex(LOWER_ADDRESS_PATTERN, 'must be a lower-case wallet address (0x followed by 40 lower-case hex digits)')
    .default('0x00000000000000000000000000000000000de0de'),
  deposit_usd: z.number().positive().max(1e9).default(10),
})

const LimitsSchema = z.strictObject({
  requests_per_minute: z.int().positive().default(600),
  /**
   * How long a request whose reservation is blocked only by the holds of requests in flight waits for them
   * before its 402 (a burst on a capped key spends the cap instead of being refused); 0 refuses at once.
   */
  budget_wait_ms: z.int().min(0).max(MAX_TIMER_MS).default(10_000),
})

const UpstreamSchema = z.strictObject({
  connect_timeout_ms: timeoutMs(10_000),
  headers_timeout_ms: timeoutMs(120_000),
  body_timeout_ms: timeoutMs(60_000),
  /** From a request's arrival to its last byte, across attempts; past it: 504, or an SSE error event. */
  total_timeout_ms: timeoutMs(900_000),
  /** Concurrent attempts per provider; then up to queue_per_provider wait up to queue_timeout_ms; then the next candidate. */
  max_concurrent_per_provider: z.int().positive().default(1024),
  queue_per_provider: z.int().min(0).default(1024),
  queue_timeout_ms: timeoutMs(30_000),
  connections_per_provider: z.int().positive().default(128),
  keep_alive_timeout_ms: timeoutMs(60_000),
  /** Bytes of a multipart upload kept so a failover can resend it; past them, fallback is off for that request. */
  replay_buffer_bytes: byteSize(25 * 1024 * 1024),
})

const RoutingSchema = z.strictObject({
  index_threads: z.int().min(1).max(256).default(1),
  stats_rebuild_ms: z.int().min(0).max(MAX_TIMER_MS).default(1000),
  failure_threshold: z.int().positive().default(3),
  unhealthy_cooldown_ms: timeoutMs(10_000),
  /** Each ejection in a row doubles the cooldown, up to this. */
  max_unhealthy_cooldown_ms: timeoutMs(300_000),
  latency_ewma_alpha: z.number().gt(0).lte(1).default(0.2),
  max_attempts: z.int().min(1).max(16).default(3),
})

const LogSchema = z.strictObject({
  level: z.enum(['error', 'warn', 'info', 'debug']).default('info'),
  /** auto: pretty lines when stderr is a terminal, JSON lines otherwise. */
  format: z.enum(['auto', 'json', 'pretty']).default('auto'),
  /** One JSON line per answered inference request (telemetry/access-log.ts). */
  access_log: z.boolean().default(true),
  /** Each inference request's body (the prompt) as a debug line; only with level debug, never otherwise. */
  prompts: z.boolean().default(false),
})

/** OpenTelemetry traces (telemetry/tracing.ts); with no endpoint nothing is loaded and nothing is traced. */
const TracingSchema = z.strictObject({
  /** OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces; '' turns tracing off. */
  otlp_endpoint: z
    .string()
    .refine((v) => v === '' || ((v.startsWith('http://') || v.startsWith('https://')) && URL.canParse(v)), 'must be an http(s) URL, or "" for off')
    .default(''),
  service_name: z.string().min(1).default('svc-router'),
})

/** Operations endpoints (/healthz, /readyz, /metrics) and Prometheus metrics. */
const OpsSchema = z.strictObject({
  /** Prometheus metrics at GET /metrics (telemetry/metrics.ts); off: no subscriber, nothing counted. */
  metrics: z.boolean().default(true),
  /** true: the ops endpoints listen on ops.host:ops.port only, not beside the API. */
  separate_port: z.boolean().default(false),
  host: z.string().min(1).default('127.0.0.1'),
  /** 0 asks the OS for an ephemeral port (tests). */
  port: z.int().min(0).max(65535).default(9464),
})

/** Active health probes (health/probes.ts). */
const HealthSchema = z.strictObject({
  probes: z.boolean().default(true),
  probe_interval_ms: timeoutMs(10_000),
  /** Relative to each provider's base URL. */
  probe_path: z.string().startsWith('/').default('/v1/models'),
  probe_timeout_ms: timeoutMs(2_000),
  /** `uptime` in /v1/providers: the share of successful requests and probes over this rolling window. */
  uptime_window_ms: timeoutMs(300_000),
})

/** Async image jobs (src/jobs/runner.ts). */
const JobsSchema = z.strictObject({
  /** How long a finished job's result (or error) can be fetched; then GET answers 404 job_not_found. */
  result_ttl_ms: timeoutMs(30 * 60_000),
  /** Jobs running at once; later ones wait, pending, in arrival order (their reservation held). */
  max_running: z.int().positive().default(32),
  /**
   * Where async edits' uploads are written until their job ends; '' = a `jobs` directory beside the store's
   * file (the system temp directory for an in-memory store). Relative paths are resolved like store.path.
   */
  spool_dir: z.string().default(''),
})

// `prefault({})` (not `default({})`): an absent section is parsed as `{}`, so its keys get their defaults.
export const ConfigSchema = z.strictObject({
  server: ServerSchema.prefault({}),
  registry: RegistrySchema.prefault({}),
  store: StoreSchema.prefault({}),
  limits: LimitsSchema.prefault({}),
  upstream: UpstreamSchema.prefault({}),
  routing: RoutingSchema.prefault({}),
  health: HealthSchema.prefault({}),
  log: LogSchema.prefault({}),
  ops: OpsSchema.prefault({}),
  tracing: TracingSchema.prefault({}),
  jobs: JobsSchema.prefault({}),
  dev: DevSchema.prefault({}),
})

/** Dotted paths of the keys that hold file paths (resolved to absolute by the loader; '' stays '': unset). */
export const PATH_KEYS: readonly string[] = ['registry.path', 'store.path', 'jobs.spool_dir']

/** Readonly all the way down: what `deepFreeze` returns. */
export type DeepReadonly<T> = T extends (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends readonly (infer U)[]
    ? readonly DeepReadonly<U>[]
    : T extends object
      ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
      : T

export type Config = DeepReadonly<z.infer<typeof ConfigSchema>>
