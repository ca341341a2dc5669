/**
 * The one schema of the configuration (DESIGN.md §3). Every key has a default, so an empty file is a whole
 * config; `config/example.full.yaml` lists every key with its default and must stay in step with this file.
 */

import { z } from 'zod'
import { originProblem } from '../auth/console-origins.js'
import { proxyEntryProblem } from '../auth/source-ip.js'
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
  /**
   * Bytes of one streamed upload kept in memory; the rest waits in a temporary file (upload_spool_dir) until
   * the provider takes it, and stays there so a failover can resend the whole upload.
   */
  upload_memory_bytes: byteSize(4 * 1024 * 1024),
  /** Bytes all streamed uploads keep in memory together; past it the next bytes of any go to their files. */
  upload_memory_total_bytes: byteSize(64 * 1024 * 1024),
  /** Directory of the uploads' temporary files (created 0600, unlinked at once); '' = the OS's temp directory. */
  upload_spool_dir: z.string().default(''),
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
  /**
   * Proxies in front of the router (addresses or CIDR blocks) whose X-Forwarded-For is believed: the source of a
   * request whose peer is one of them is the right-most forwarded address that is not (auth/source-ip.ts). Empty:
   * the source is the socket's peer, and the header is never read. Decides what the per-source throttles count.
   */
  trusted_proxies: z
    .array(
      z.string().superRefine((value, ctx) => {
        const problem = proxyEntryProblem(value)
        if (problem !== null) ctx.addIssue({ code: 'custom', message: `${problem} (got ${JSON.stringify(value)})` })
      }),
    )
    .default([]),
})

/** `registry.chain`: the InferenceServing contract as the registry (registry/chain-source.ts). */
const ChainRegistrySchema = z.strictObject({
  rpc_url: z
    .string()
    .default('http://127.0.0.1:8545')
    .refine((url) => /^https?:\/\/[^\s]+$/.test(url), { message: 'must be an http:// or https:// URL' }),
  /** The InferenceServing (proxy) address; required with `source: chain`. */
  contract: z
    .string()
    .default('')
    .refine((a) => a === '' || /^0x[0-9a-fA-F]{40}$/.test(a), { message: 'must be a quoted 0x followed by 40 hex digits' }),
  /** How often the whole service list is read again (events only hasten a read). */
  refresh_ms: z.int().min(100).max(MAX_TIMER_MS).default(5000),
  /** USD per 0G as a decimal string ("0.5"): the contract prices in neuron (1e-18 0G); required with `source: chain`. */
  usd_per_0g: z
    .string()
    .default('')
    .refine((v) => v === '' || /^\d+(\.\d{1,18})?$/.test(v), { message: 'must be a non-negative decimal string with at most 18 decimals, e.g. "0.5"' }),
  /**
   * false: a service whose URL is (or resolves, at connect time, to) anything but a public unicast address is
   * left out (DESIGN.md §8). true lifts that: a local chain whose providers run on loopback (the demo, tests).
   */
  allow_private_urls: z.boolean().default(false),
})

const RegistrySchema = z
  .strictObject({
    source: z.enum(['file', 'chain']).default('file'),
    /**
     * file: the registry file (default providers.yaml). chain: the operator's overrides file, optional ('' = none).
     * Relative to the config file's directory; returned absolute.
     */
    path: z.string().optional(),
    watch: z.boolean().default(true),
    chain: ChainRegistrySchema.prefault({}),
  })
  .superRefine((r, ctx) => {
    if (r.source !== 'chain') return
    if (r.chain.contract === '') ctx.addIssue({ code: 'custom', path: ['chain', 'contract'], message: 'required with registry.source: chain' })
    if (r.chain.usd_per_0g === '') ctx.addIssue({ code: 'custom', path: ['chain', 'usd_per_0g'], message: 'required with registry.source: chain' })
  })
  .transform((r) => ({ ...r, path: r.path ?? (r.source === 'file' ? 'providers.yaml' : '') }))

/** `tee`: checking the signatures TEE providers put on their answers (src/tee/). */
const TeeSchema = z.strictObject({
  /** How long a verified request's trace waits for the provider's signature; then tee_verified false, reason timeout. */
  verify_timeout_ms: timeoutMs(5000),
  /** Share (0..1) of answers of TEE providers checked in the background, at no cost to their clients. */
  sample_rate: z.number().min(0).max(1).default(0.01),
})

const ZERO_G = z
  .string()
  .refine((v) => /^\d{1,12}(\.\d{1,18})?$/.test(v), { message: 'must be a decimal 0G string with at most 18 decimals, e.g. "1.5"' })

/**
 * `settlement`: paying the providers of a chain registry (src/settlement/, DESIGN.md §8). Off unless a payer key
 * is given (key_file or key_env).
 */
const SettlementSchema = z
  .strictObject({
    /** A file holding the payer's hex private key; refused unless its mode is 0600. Relative to the config file. */
    key_file: z.string().default(''),
    /** Or the name of an environment variable holding it. */
    key_env: z
      .string()
      .default('')
      .refine((v) => v === '' || /^[A-Za-z_][A-Za-z0-9_]*$/.test(v), { message: 'must be an environment variable name' }),
    /** The LedgerManager's address; '' = InferenceServing.ledgerAddress(). */
    ledger: z
      .string()
      .default('')
      .refine((a) => a === '' || /^0x[0-9a-fA-F]{40}$/.test(a), { message: 'must be a quoted 0x followed by 40 hex digits' }),
    /** The service the sub-accounts live on (serviceType-version); '' = the ledger's recommended "inference" one. */
    service_name: z.string().max(128).default(''),
    /** Sub-account bounds in 0G: routed only at or above min (after what was served and not yet settled); topped up to target. */
    sub_account: z
      .strictObject({ min_0g: ZERO_G.default('1'), target_0g: ZERO_G.default('2') })
      .prefault({}),
    /** How often accounts, the ledger and settlements are read (and funds moved when needed). */
    interval_ms: z.int().min(100).max(MAX_TIMER_MS).default(5000),
    /** Served and unsettled may go this far negative (in 0G) before a provider is flagged for over-settling. */
    over_settle_tolerance_0g: ZERO_G.default('0.01'),
  })
  .superRefine((s, ctx) => {
    if (s.key_file !== '' && s.key_env !== '') ctx.addIssue({ code: 'custom', path: ['key_env'], message: 'give key_file or key_env, not both' })
  })

const StoreSchema = z
  .strictObject({
    /** sqlite: one embedded file (one process). postgres: a PostgreSQL database that several replicas share. */
    kind: z.enum(['sqlite', 'postgres']).default('sqlite'),
    /** SQLite: relative to the config file's directory; returned absolute. */
    path: z.string().min(1).default('../data/svc.db'),
    /**
     * SQLite. full: every commit (a charge before its response's last byte, a revoke) is fsynced and survives a
     * power cut. normal: commits survive a crash of the process but not of the machine, and skip the fsync.
     */
    synchronous: z.enum(['full', 'normal']).default('full'),
    /** PostgreSQL: postgres://user:password@host:5432/db (required with kind: postgres). */
    url: z
      .string()
      .refine((v) => v === '' || ((v.startsWith('postgres://') || v.startsWith('postgresql://')) && URL.canParse(v)), 'must be a postgres:// URL')
      .default(''),
    /** PostgreSQL: connections in each process's pool. */
    pool_size: z.int().min(1).max(1000).default(10),
    /** PostgreSQL: deadline to open a connection or get a free one from the pool. */
    connect_timeout_ms: timeoutMs(5_000),
    /** PostgreSQL: deadline of each statement; a frozen server gives an error after it, never a hang. */
    query_timeout_ms: timeoutMs(5_000),
  })
  .superRefine((store, ctx) => {
    if (store.kind === 'postgres' && store.url === '') {
      ctx.addIssue({ code: 'custom', path: ['url'], message: 'is required with store.kind: postgres (postgres://user@host:5432/db)' })
    }
  })

/** Shared, hot, never money (DESIGN.md §6): the account rate windows and the health exchange (src/coordination/). */
const RedisSchema = z.strictObject({
  /** redis://[user:password@]host:port/db; '' = none (rate limits per process, health not exchanged). */
  url: z
    .string()
    .refine((v) => v === '' || ((v.startsWith('redis://') || v.startsWith('rediss://')) && URL.canParse(v)), 'must be a redis:// URL, or "" for none')
    .default(''),
  /**
   * Admissions of an account's shared window a replica leases at once, to admit out of memory with no Redis
   * command (coordination/rate-lease.ts); 0 = every request's turn asks Redis. Never more than the limit is
   * admitted; a request refused only for slots other replicas hold waits for them once, up to rate_lease_ms.
   * A lease is renewed in the background once half used: half of it must outlast a call to Redis at the
   * account's rate (64: 32 requests, 3 ms at 10,000 requests a second, against a call ~1 ms away).
   */
  rate_lease_size: z.int().nonnegative().max(10_000).default(64),
  /** How long a rate lease lives (a replica that dies with one leaves it to expire after this); the longest such a wait. */
  rate_lease_ms: z.int().min(20).max(60_000).default(500),
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
  /**
   * Failed authentications (unknown, malformed, revoked or expired keys) a source may make in a minute; past it
   * the source gets 429 with Retry-After, whatever key it sends, until its minute is over. 0 turns it off.
   */
  auth_failures_per_minute: z.int().min(0).default(100),
  /** Requests to /v1/auth/* (console sign-in) a source may make in a minute; past it 429 with Retry-After. */
  sign_in_per_source_per_minute: z.int().positive().default(30),
  /** Nonces and sign-ins (/v1/auth/nonce, /verify) from all sources together in a minute (bounds the CPU a sign-in flood takes). */
  sign_in_per_minute: z.int().positive().default(600),
  /** Live console sessions at most; a sign-in past it gets 429 until one ends (each wallet keeps its 8 newest). */
  max_console_sessions: z.int().positive().default(10_000),
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
  /**
   * How far into a multipart upload the router reads, with no attempt taking it yet, to find the fields it routes
   * by (`model`, an edit's `n`); the upload itself is kept for a failover whole (server.upload_memory_bytes).
   */
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

/** Several replicas on one PostgreSQL (DESIGN.md §6; store/postgres/replicas.ts, billing/leased-ledger.ts). */
const ReplicasSchema = z.strictObject({
  /** How often a replica tells the others it is alive and how far it applied the change feed. */
  heartbeat_ms: timeoutMs(500),
  /**
   * How long one heartbeat lets a replica serve keys from its cache; also the longest a key write waits for a
   * replica that went silent before it answers.
   */
  fence_ms: timeoutMs(2_000),
  /** A replica silent this long is removed by the others and its budget leases released (a SIGKILL's holds). */
  dead_after_ms: timeoutMs(15_000),
  /** How long a replica keeps budget it leased and no longer uses, in case its next request comes soon. */
  lease_linger_ms: z.int().nonnegative().max(MAX_TIMER_MS).default(200),
})

/** Stored Responses-API state (src/surfaces/responses.ts, src/store/responses.ts). */
const ResponsesSchema = z.strictObject({
  /** How long a response stored with `store: true` can be continued from and fetched (not a timer: 30 days). */
  retention_ms: z.int().positive().default(30 * 86_400_000),
  /** How often expired responses are deleted from the store. */
  sweep_interval_ms: timeoutMs(3_600_000),
})

// `prefault({})` (not `default({})`): an absent section is parsed as `{}`, so its keys get their defaults.
export const ConfigSchema = z.strictObject({
  server: ServerSchema.prefault({}),
  registry: RegistrySchema.prefault({}),
  store: StoreSchema.prefault({}),
  redis: RedisSchema.prefault({}),
  limits: LimitsSchema.prefault({}),
  upstream: UpstreamSchema.prefault({}),
  routing: RoutingSchema.prefault({}),
  health: HealthSchema.prefault({}),
  log: LogSchema.prefault({}),
  ops: OpsSchema.prefault({}),
  tracing: TracingSchema.prefault({}),
  jobs: JobsSchema.prefault({}),
  replicas: ReplicasSchema.prefault({}),
  responses: ResponsesSchema.prefault({}),
  dev: DevSchema.prefault({}),
  tee: TeeSchema.prefault({}),
  settlement: SettlementSchema.prefault({}),
})

/** Dotted paths of the keys that hold file paths (resolved to absolute by the loader; '' stays '': unset). */
export const PATH_KEYS: readonly string[] = ['registry.path', 'store.path', 'jobs.spool_dir', 'settlement.key_file']

/** Readonly all the way down: what `deepFreeze` returns. */
export type DeepReadonly<T> = T extends (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends readonly (infer U)[]
    ? readonly DeepReadonly<U>[]
    : T extends object
      ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
      : T

export type Config = DeepReadonly<z.infer<typeof ConfigSchema>>
