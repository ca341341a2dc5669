import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parse } from 'yaml'
import { CONFIG_LEAVES, ConfigError, loadConfig, type Config } from '../../src/config/index.js'
import { openStore } from '../../src/store/open.js'

/** A subtest's `t` (tap's type for it is long: take it from `t.test`'s callback). */
type Test = Parameters<Parameters<typeof t.test>[0]>[0]

// Compiled to dist/test/config/: the repo root is three levels up.
const CONFIG_DIR = fileURLToPath(new URL('../../../config/', import.meta.url))

function defaultsWithPathsIn(dir: string): Config {
  return {
    server: { host: '127.0.0.1', port: 8080, max_json_body_bytes: 10485760, max_head_bytes: 4096, max_multipart_body_bytes: 104857600, upload_memory_bytes: 4194304, upload_memory_total_bytes: 67108864, upload_spool_dir: '', send_timeout_ms: 60000, drain_timeout_ms: 30000, public_origins: [], trusted_proxies: [] },
    registry: {
      source: 'file',
      path: join(dir, 'providers.yaml'),
      watch: true,
      chain: { rpc_url: 'http://127.0.0.1:8545', contract: '', refresh_ms: 5000, usd_per_0g: '', allow_private_urls: false },
    },
    store: { kind: 'sqlite', path: resolve(dir, '../data/svc.db'), synchronous: 'full', url: '', pool_size: 10, connect_timeout_ms: 5000, query_timeout_ms: 5000 },
    redis: { url: '', rate_lease_size: 64, rate_lease_ms: 500 },
    limits: {
      requests_per_minute: 600,
      budget_wait_ms: 10000,
      auth_failures_per_minute: 100,
      sign_in_per_source_per_minute: 30,
      sign_in_per_minute: 600,
      max_console_sessions: 10000,
    },
    upstream: {
      connect_timeout_ms: 10000,
      headers_timeout_ms: 120000,
      body_timeout_ms: 60000,
      total_timeout_ms: 900000,
      max_concurrent_per_provider: 1024,
      queue_per_provider: 1024,
      queue_timeout_ms: 30000,
      connections_per_provider: 128,
      keep_alive_timeout_ms: 60000,
      replay_buffer_bytes: 26214400,
    },
    routing: {
      index_threads: 1,
      stats_rebuild_ms: 1000,
      failure_threshold: 3,
      unhealthy_cooldown_ms: 10000,
      max_unhealthy_cooldown_ms: 300000,
      latency_ewma_alpha: 0.2,
      max_attempts: 3,
    },
    health: { probes: true, probe_interval_ms: 10000, probe_path: '/v1/models', probe_timeout_ms: 2000, uptime_window_ms: 300000 },
    log: { level: 'info', format: 'auto', access_log: true, prompts: false },
    ops: { metrics: true, separate_port: false, host: '127.0.0.1', port: 9464 },
    tracing: { otlp_endpoint: '', service_name: 'svc-router' },
    jobs: { result_ttl_ms: 1800000, max_running: 32, spool_dir: '' },
    replicas: { heartbeat_ms: 500, fence_ms: 2000, dead_after_ms: 15000, lease_linger_ms: 200 },
    responses: { retention_ms: 2592000000, sweep_interval_ms: 3600000 },
    dev: { bootstrap: false, wallet: '0x00000000000000000000000000000000000de0de', deposit_usd: 10 },
    tee: { verify_timeout_ms: 5000, sample_rate: 0.01 },
    settlement: { key_file: '', key_env: '', ledger: '', service_name: '', sub_account: { min_0g: '1', target_0g: '2' }, interval_ms: 5000, over_settle_tolerance_0g: '0.01' },
  }
}

/** Write `text` as a config file in a fresh test dir and return its path. */
function configFile(t: Test, text: string): string {
  const dir = t.testdir({ 'svc.yaml': text })
  return join(dir, 'svc.yaml')
}

/** The problems of the ConfigError that `fn` throws (fails the test if it does not throw one). */
function problemsOf(t: Test, fn: () => unknown): readonly string[] {
  try {
    fn()
  } catch (err) {
    t.type(err, ConfigError)
    const problems = (err as ConfigError).problems
    // The message lists every problem, one per line.
    for (const p of problems) t.match((err as Error).message, p)
    return problems
  }
  t.fail('expected a ConfigError')
  return []
}

t.test('no file: every default, paths relative to the working directory', async (t) => {
  t.strictSame(loadConfig({}), defaultsWithPathsIn(process.cwd()))
  t.strictSame(loadConfig({ env: {} }), defaultsWithPathsIn(process.cwd()))
})

t.test('a minimal file and an empty file are whole configs, paths relative to the file', async (t) => {
  const minimal = configFile(t, 'server: { host: 127.0.0.1, port: 8080 }\n')
  const dir = resolve(minimal, '..')
  t.strictSame(loadConfig({ file: minimal }), defaultsWithPathsIn(dir))
  t.strictSame(loadConfig({ file: configFile(t, '') }), defaultsWithPathsIn(resolve(configFile(t, ''), '..')))
  t.strictSame(loadConfig({ file: configFile(t, '# only a comment\n') }).server.port, 8080)
})

t.test('a section with nothing under it takes its defaults', async (t) => {
  const config = loadConfig({ file: configFile(t, 'server:\nlimits:\n  requests_per_minute: 5\n') })
  t.equal(config.server.port, 8080)
  t.equal(config.limits.requests_per_minute, 5)
})

t.test('paths in the file resolve against the file directory and come back absolute', async (t) => {
  const dir = t.testdir({
    nested: { 'svc.yaml': 'registry: { path: ../registry/providers.yaml }\nstore: { path: /var/lib/svc/svc.db }\n' },
  })
  const config = loadConfig({ file: join(dir, 'nested', 'svc.yaml') })
  t.equal(config.registry.path, join(dir, 'registry', 'providers.yaml'))
  t.equal(config.store.path, '/var/lib/svc/svc.db')
})

t.test("store.path ':memory:' is an in-memory store, not a file named after it", async (t) => {
  const file = configFile(t, "store: { path: ':memory:' }\n")
  const config = loadConfig({ file })
  t.equal(config.store.path, ':memory:', 'from the file')
  t.equal(loadConfig({ env: { SVC_STORE_PATH: ':memory:' } }).store.path, ':memory:', 'from the environment')
  const store = await openStore(config.store)
  t.teardown(() => store.close())
  await store.ledger.addFunds('0x' + 'ab'.repeat(20), 'deposit', 5n, 'test', Date.now())
  t.notOk(existsSync(join(dirname(file), ':memory:')), 'nothing written beside the config file')
  t.notOk(existsSync(resolve(process.cwd(), ':memory:')), 'nor in the working directory')
})

t.test('a relative config file name is relative to the working directory', async (t) => {
  const file = configFile(t, 'server: { port: 1234 }\n')
  t.equal(loadConfig({ file: resolve(file).replace(process.cwd() + '/', '') }).server.port, 1234)
})

t.test('values are validated', async (t) => {
  t.test('bad port', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { port: 70000 }\n') })), [
      'server.port: must be <= 65535 (got 70000)',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { port: -1 }\n') })), [
      'server.port: must be >= 0 (got -1)',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { port: 80.5 }\n') })), [
      'server.port: expected an integer (got 80.5)',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { port: "8080" }\n') })), [
      'server.port: expected a number (got "8080")',
    ])
  })

  t.test('port 0 (ephemeral) is allowed', async (t) => {
    t.equal(loadConfig({ file: configFile(t, 'server: { port: 0 }\n') }).server.port, 0)
  })

  t.test('timeouts are positive integers a timer can hold', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'upstream: { headers_timeout_ms: 0 }\n') })), [
      'upstream.headers_timeout_ms: must be > 0 (got 0)',
    ])
    t.strictSame(
      problemsOf(t, () => loadConfig({ file: configFile(t, 'upstream: { body_timeout_ms: 3000000000 }\n') })),
      ['upstream.body_timeout_ms: must be <= 2147483647 (got 3000000000)'],
    )
  })

  t.test('latency_ewma_alpha is in (0, 1]', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'routing: { latency_ewma_alpha: 0 }\n') })), [
      'routing.latency_ewma_alpha: must be > 0 (got 0)',
    ])
    t.equal(loadConfig({ file: configFile(t, 'routing: { latency_ewma_alpha: 1 }\n') }).routing.latency_ewma_alpha, 1)
  })

  t.test('enums list their values', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'log: { level: verbose }\n') })), [
      'log.level: must be one of "error" | "warn" | "info" | "debug" (got "verbose")',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'store: { kind: mysql }\n') })), [
      'store.kind: must be one of "sqlite" | "postgres" (got "mysql")',
    ])
  })

  t.test('a section must be a mapping', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: 8080\n') })), [
      'server: expected a mapping (got 8080)',
    ])
  })
})

t.test('unknown keys are errors with a hint', async (t) => {
  t.test('did you mean: the closest key by edit distance', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { prot: 9090 }\n') })), [
      'unknown key server.prot; did you mean server.port?',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'sever: { port: 9090 }\n') })), [
      'unknown key sever; did you mean server?',
    ])
  })

  t.test('a key written in the wrong section points to the right one', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { requests_per_minute: 5 }\n') })), [
      'unknown key server.requests_per_minute; did you mean limits.requests_per_minute?',
    ])
  })

  t.test('renamed keys say what to use instead', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'limits: { rpm: 100 }\n') })), [
      'unknown key limits.rpm; use limits.requests_per_minute',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { address: 0.0.0.0 }\n') })), [
      'unknown key server.address; use server.host',
    ])
  })

  t.test('no near key: the known keys are listed', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'log: { zzzzzzzz: 1 }\n') })), [
      'unknown key log.zzzzzzzz (known keys of log: level, format, access_log, prompts)',
    ])
  })
})

t.test('every problem is reported at once, one per line, each with its path', async (t) => {
  const file = configFile(
    t,
    'server: { port: 70000, prot: 1 }\nlimits: { rpm: 5, requests_per_minute: 0 }\nrouting: { latency_ewma_alpha: 1.5 }\n',
  )
  const problems = problemsOf(t, () => loadConfig({ file, env: { SVC_LOG_LEVEL: 'loud', SVC_SERVER_HOTS: 'x' } }))
  t.strictSame([...problems].sort(), [
    'limits.requests_per_minute: must be > 0 (got 0)',
    'log.level (from SVC_LOG_LEVEL): must be one of "error" | "warn" | "info" | "debug" (got "loud")',
    'routing.latency_ewma_alpha: must be <= 1 (got 1.5)',
    'server.port: must be <= 65535 (got 70000)',
    'unknown environment variable SVC_SERVER_HOTS; did you mean SVC_SERVER_HOST?',
    'unknown key limits.rpm; use limits.requests_per_minute',
    'unknown key server.prot; did you mean server.port?',
  ])
  try {
    loadConfig({ file })
  } catch (err) {
    const lines = (err as Error).message.split('\n')
    t.equal(lines[0], `invalid configuration (${file}):`)
    t.equal(lines.length, 1 + 5)
  }
})

t.test('unreadable and malformed files', async (t) => {
  const dir = t.testdir({})
  const missing = join(dir, 'nope.yaml')
  t.strictSame(problemsOf(t, () => loadConfig({ file: missing })), [`cannot read ${missing}: ENOENT`])
  const broken = configFile(t, 'server:\n  port: 1\n  port: 2\n')
  const [problem] = problemsOf(t, () => loadConfig({ file: broken }))
  t.match(problem, /^.*svc\.yaml: Map keys must be unique at line 3/)
  t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, '- a\n- b\n') })).length, 1)
})

t.test('env overrides', async (t) => {
  t.test('numbers, booleans, strings; keys with underscores; env wins over the file', async (t) => {
    const file = configFile(t, 'server: { port: 8081 }\nlimits: { requests_per_minute: 50 }\n')
    const config = loadConfig({
      file,
      env: {
        SVC_SERVER_PORT: '9090',
        SVC_LIMITS_REQUESTS_PER_MINUTE: '100',
        SVC_ROUTING_LATENCY_EWMA_ALPHA: '0.3',
        SVC_LOG_LEVEL: 'debug',
        SVC_REGISTRY_WATCH: 'false',
        SVC_SERVER_MAX_JSON_BODY_BYTES: ' 2048 ',
        PATH: '/usr/bin',
        svc_server_port: '1',
        SVC_UPSTREAM_BODY_TIMEOUT_MS: undefined,
      },
    })
    t.equal(config.server.port, 9090)
    t.equal(config.limits.requests_per_minute, 100)
    t.equal(config.routing.latency_ewma_alpha, 0.3)
    t.equal(config.log.level, 'debug')
    t.equal(config.registry.watch, false)
    t.equal(config.server.max_json_body_bytes, 2048)
    t.equal(config.upstream.body_timeout_ms, 60000)
  })

  t.test('env paths that are relative resolve against the working directory', async (t) => {
    const file = configFile(t, 'registry: { path: from-file.yaml }\n')
    const config = loadConfig({ file, env: { SVC_REGISTRY_PATH: 'env/providers.yaml', SVC_STORE_PATH: '/abs/svc.db' } })
    t.equal(config.registry.path, resolve(process.cwd(), 'env/providers.yaml'))
    t.equal(config.store.path, '/abs/svc.db')
  })

  t.test('env values are validated like file values and name the variable', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ env: { SVC_SERVER_PORT: '70000' } })), [
      'server.port (from SVC_SERVER_PORT): must be <= 65535 (got 70000)',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ env: { SVC_SERVER_PORT: 'eighty' } })), [
      'SVC_SERVER_PORT: expected a number (got "eighty")',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ env: { SVC_SERVER_PORT: '' } })), [
      'SVC_SERVER_PORT: expected a number (got "")',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ env: { SVC_REGISTRY_WATCH: 'maybe' } })), [
      'SVC_REGISTRY_WATCH: expected true or false (got "maybe")',
    ])
  })

  t.test('server.public_origins: origins only, from the file or as a comma-separated variable', async (t) => {
    const config = loadConfig({ env: { SVC_SERVER_PUBLIC_ORIGINS: 'https://a.example, http://b.example:8080' } })
    t.strictSame(config.server.public_origins, ['https://a.example', 'http://b.example:8080'])
    t.strictSame(loadConfig({ env: { SVC_SERVER_PUBLIC_ORIGINS: '' } }).server.public_origins, [])
    const problems = problemsOf(t, () => loadConfig({ file: configFile(t, 'server: { public_origins: [a.example, "https://a.example/console", "ftp://a.example"] }\n') }))
    t.equal(problems.length, 3, problems.join('; '))
    t.match(problems.join('\n'), /not a URL[\s\S]*must be an origin[\s\S]*must be http/)
  })

  t.test('an unknown SVC_ variable is an error with a hint', async (t) => {
    t.strictSame(problemsOf(t, () => loadConfig({ env: { SVC_SERVER_PROT: '1' } })), [
      'unknown environment variable SVC_SERVER_PROT; did you mean SVC_SERVER_PORT?',
    ])
    t.strictSame(problemsOf(t, () => loadConfig({ env: { SVC_LIMITS_RPM: '1' } })), [
      'unknown environment variable SVC_LIMITS_RPM; use SVC_LIMITS_REQUESTS_PER_MINUTE',
    ])
    // A section is not a leaf.
    t.equal(problemsOf(t, () => loadConfig({ env: { SVC_SERVER: '1' } })).length, 1)
  })

  t.test('every leaf has its own env name', async (t) => {
    const names = CONFIG_LEAVES.map((leaf) => leaf.env)
    t.equal(new Set(names).size, names.length)
    t.ok(names.includes('SVC_ROUTING_LATENCY_EWMA_ALPHA'))
    t.ok(names.includes('SVC_UPSTREAM_CONNECTIONS_PER_PROVIDER'))
  })
})

t.test('the result is deep-frozen', async (t) => {
  const config = loadConfig({ file: configFile(t, 'server: { port: 1 }\n') })
  t.ok(Object.isFrozen(config))
  t.ok(Object.isFrozen(config.server))
  t.ok(Object.isFrozen(config.routing))
  // ES modules run in strict mode, where assigning to a frozen property throws.
  t.throws(() => {
    // @ts-expect-error the Config type is readonly too
    config.server.port = 2
  }, TypeError)
  t.throws(() => {
    ;(config as unknown as Record<string, unknown>).extra = 1
  }, TypeError)
  t.equal(config.server.port, 1)
  // Typed from the schema, never any.
  const level: 'error' | 'warn' | 'info' | 'debug' = config.log.level
  const port: number = config.server.port
  // @ts-expect-error a number is not a string
  const notString: string = config.server.port
  t.strictSame([level, port, notString], ['info', 1, 1])
})

t.test('the shipped config files load', async (t) => {
  const defaults = defaultsWithPathsIn(CONFIG_DIR.replace(/\/$/, ''))
  const demo = loadConfig({ file: join(CONFIG_DIR, 'default.yaml') })
  // The demo differs from the defaults in one key: `npm start` bootstraps a dev account on an empty store.
  t.strictSame(demo, { ...defaults, dev: { ...defaults.dev, bootstrap: true } })
  const full = loadConfig({ file: join(CONFIG_DIR, 'example.full.yaml') })
  t.strictSame(full, defaults, 'example.full.yaml holds the defaults')
  const replicas = loadConfig({ file: join(CONFIG_DIR, 'replicas.yaml') })
  t.match(replicas, { store: { kind: 'postgres' }, redis: { url: /^redis:\/\// }, replicas: defaults.replicas }, 'replicas.yaml: PostgreSQL, Redis, the default replica timings')

  // …and it lists every key.
  const raw = parse(readFileSync(join(CONFIG_DIR, 'example.full.yaml'), 'utf8')) as Record<string, Record<string, unknown>>
  const leaves = (node: Record<string, unknown>, prefix: string): string[] =>
    Object.entries(node).flatMap(([key, value]) =>
      value !== null && typeof value === 'object' && !Array.isArray(value) ? leaves(value as Record<string, unknown>, `${prefix}${key}.`) : [`${prefix}${key}`],
    )
  const listed = leaves(raw, '')
  t.strictSame(listed.sort(), CONFIG_LEAVES.map((leaf) => leaf.path).sort())
})

t.test('store.kind postgres needs store.url, a postgres:// URL; redis.url is a redis:// URL or empty', async (t) => {
  t.strictSame(problemsOf(t, () => loadConfig({ file: configFile(t, 'store: { kind: postgres }\n') })), [
    'store.url: is required with store.kind: postgres (postgres://user@host:5432/db)',
  ])
  const pg = loadConfig({ file: configFile(t, 'store: { kind: postgres, url: "postgres://svc@127.0.0.1:5432/svc" }\n') }).store
  t.match(pg, { kind: 'postgres', url: 'postgres://svc@127.0.0.1:5432/svc', pool_size: 10, connect_timeout_ms: 5000, query_timeout_ms: 5000 })
  t.equal(loadConfig({ env: { SVC_STORE_KIND: 'postgres', SVC_STORE_URL: 'postgresql://h/db', SVC_STORE_POOL_SIZE: '3' } }).store.pool_size, 3)
  t.match(problemsOf(t, () => loadConfig({ file: configFile(t, 'store: { kind: postgres, url: "mysql://h/db" }\n') })), [/store\.url: must be a postgres:\/\/ URL/])
  t.equal(loadConfig({}).redis.url, '')
  t.equal(loadConfig({ env: { SVC_REDIS_URL: 'redis://127.0.0.1:6379/0' } }).redis.url, 'redis://127.0.0.1:6379/0')
  t.match(problemsOf(t, () => loadConfig({ file: configFile(t, 'redis: { url: "127.0.0.1:6379" }\n') })), [/redis\.url: must be a redis:\/\/ URL/])
})

t.test('store.synchronous: full by default, normal on request, anything else refused', async (t) => {
  t.equal(loadConfig({ file: configFile(t, 'store: { synchronous: normal }\n') }).store.synchronous, 'normal')
  t.equal(loadConfig({ env: { SVC_STORE_SYNCHRONOUS: 'normal' } }).store.synchronous, 'normal')
  t.equal(loadConfig({}).store.synchronous, 'full')
  const problems = problemsOf(t, () => loadConfig({ file: configFile(t, 'store: { synchronous: off }\n') }))
  t.equal(problems.length, 1)
  t.match(problems[0], /store\.synchronous/)
})

t.test('server.trusted_proxies takes addresses and CIDR blocks, from the file or the env as a comma-separated list', async (t) => {
  const config = loadConfig({ env: { SVC_SERVER_TRUSTED_PROXIES: '10.0.0.0/8,::1,fd00::/8' } })
  t.same(config.server.trusted_proxies, ['10.0.0.0/8', '::1', 'fd00::/8'])
  for (const bad of ['proxy.internal', '10.0.0.0/33', '::1/129', '10.0.0.0/x']) {
    t.throws(() => loadConfig({ env: { SVC_SERVER_TRUSTED_PROXIES: bad } }), /server\.trusted_proxies/, bad)
  }
  t.equal(loadConfig({ env: { SVC_REGISTRY_CHAIN_ALLOW_PRIVATE_URLS: 'true' } }).registry.chain.allow_private_urls, true)
  t.equal(loadConfig({ env: { SVC_LIMITS_AUTH_FAILURES_PER_MINUTE: '0' } }).limits.auth_failures_per_minute, 0, '0 turns the throttle off')
})
