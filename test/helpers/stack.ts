/**
 * A whole router on loopback for tests: real simulated providers on port 0, a registry file naming them, a
 * config file, and `serve()` composed exactly as `svc-router serve` composes it. Everything is torn down with
 * the test.
 */
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import type { ApiKeySettings } from '../../src/auth/credentials.js'
import { parseUsd } from '../../src/billing/money.js'
import { loadConfig } from '../../src/config/index.js'
import { serve, type RunningRouter } from '../../src/serve.js'
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from '../../src/simulator/simulator.js'
import { SCOPES, type Scope } from '../../src/store/store.js'
import { ownDir } from './own-dir.js'

export interface TestModel {
  id: string
  type?: 'chatbot' | 'text-to-image' | 'speech-to-text'
  formats?: string[]
  context_length?: number
  max_completion_tokens?: number
  supported_parameters?: string[]
  price?: Record<string, number | string>
}

export interface TestProvider {
  address: string
  trust_mode?: 'standard' | 'verified' | 'private'
  verifiability?: 'TeeML' | 'TeeTLS' | ''
  models: TestModel[]
  /** Options of the simulator that plays this provider. */
  sim?: SimulatorOptions
  /** Point the provider at this URL instead of a simulator (e.g. a closed port, or a custom http server). */
  url?: string
}

/** A key made for a test: its secret, id, and the header to send it with. */
export interface TestKey {
  readonly key: string
  readonly id: string
  readonly auth: Record<string, string>
}

export interface Stack {
  readonly url: string
  /** An sk- key of a funded test account: send it as `Authorization: Bearer <key>` on inference calls. */
  readonly key: string
  /** `{ authorization: 'Bearer <key>' }`, to spread into request headers. */
  readonly auth: Record<string, string>
  /** The key id of `key`. */
  readonly keyId: string
  /** The wallet of the funded test account (TEST_DEPOSIT_USD) that `key` and `mgmtKey` belong to. */
  readonly account: string
  /** An mk- key of the test account with every scope. */
  readonly mgmtKey: string
  readonly mgmtAuth: Record<string, string>
  /** Another sk- key, of the test account unless `account` is given (the account is created if needed). */
  newApiKey(settings?: Partial<ApiKeySettings> & { account?: string }): Promise<TestKey>
  /** An mk- key with `scopes` (default: all), of the test account unless `account` is given. */
  newMgmtKey(scopes?: readonly Scope[], account?: string): Promise<TestKey>
  /** A new account with a random wallet and a deposit (default TEST_DEPOSIT_USD; '0' for none). */
  newAccount(depositUsd?: string): Promise<string>
  readonly router: RunningRouter
  /** Simulators by provider address. */
  readonly sims: ReadonlyMap<string, SimulatorHandle>
  readonly registryPath: string
  readonly dir: string
}

/** Minimal interface of a tap Test this helper needs. */
interface TapLike {
  teardown(fn: () => unknown): void
}

export const DEFAULT_PRICE = { prompt: 0.1, completion: 0.3 }

/** The deposit of every test account, in USD. */
export const TEST_DEPOSIT_USD = '1000'
/** The wallet of the test account of every stack. */
export const TEST_ACCOUNT = '0x00000000000000000000000000000000000000a1'

function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` }
}

/** A 0x address made of one repeated hex digit, e.g. addr('a') = 0xaaaa…aaaa. */
export function addr(digit: string): string {
  return '0x' + digit.repeat(40)
}

export async function startStack(
  t: TapLike,
  providers: TestProvider[],
  config: Record<string, Record<string, unknown>> = {},
): Promise<Stack> {
  const sims = new Map<string, SimulatorHandle>()
  let router: RunningRouter | null = null
  // The router and the simulators are closed before their directory goes: the other way round, it went while the
  // router's store was live, and a file it made meanwhile failed the removal (ENOTEMPTY) and with it the teardown,
  // leaving the servers open until the test file timed out.
  const dir = ownDir(t, 'svc-stack-', async () => {
    await router?.close()
    await Promise.all([...sims.values()].map((s) => s.close()))
  })
  const entries = []
  for (const p of providers) {
    let url = p.url
    if (url === undefined) {
      const sim = await startSimulator({ name: p.address.slice(0, 6), ...p.sim })
      sims.set(p.address, sim)
      url = sim.url
    }
    entries.push({
      address: p.address,
      url,
      trust_mode: p.trust_mode ?? 'standard',
      verifiability: p.verifiability ?? '',
      models: p.models.map((m) => ({ type: 'chatbot', price: m.type === undefined || m.type === 'chatbot' ? DEFAULT_PRICE : undefined, ...m })),
    })
  }
  const registryPath = join(dir, 'providers.yaml')
  writeFileSync(registryPath, stringify({ providers: entries }))
  const configPath = join(dir, 'config.yaml')
  writeFileSync(
    configPath,
    stringify({
      ...config,
      server: { host: '127.0.0.1', port: 0, ...config.server },
      registry: { path: 'providers.yaml', watch: false, ...config.registry },
      store: { path: join(dir, 'svc.db'), ...config.store },
      log: { level: 'error', ...config.log },
      // Tests sign in far more often than a person: the tests of these limits set their own.
      limits: { sign_in_per_source_per_minute: 100_000, sign_in_per_minute: 100_000, ...config.limits },
    }),
  )
  const running = await serve(loadConfig({ file: configPath, env: {} }))
  router = running

  // Keys are made through the router's own Credentials, so its key cache sees them at once.
  const { credentials, store } = running
  async function newAccount(depositUsd: string = TEST_DEPOSIT_USD): Promise<string> {
    const wallet = '0x' + randomBytes(20).toString('hex')
    const amount = parseUsd(depositUsd)
    if (amount === null) throw new Error(`bad test deposit ${depositUsd}`)
    if (amount > 0n) await store.ledger.addFunds(wallet, 'deposit', amount, 'test deposit', Date.now())
    else await store.accounts.ensureAccount(wallet, Date.now())
    return wallet
  }
  async function newApiKey(settings: Partial<ApiKeySettings> & { account?: string } = {}): Promise<TestKey> {
    const { account = TEST_ACCOUNT, ...rest } = settings
    const { record, secret } = await credentials.issueApiKey(account, { name: 'test', ...rest })
    return { key: secret, id: record.id, auth: bearer(secret) }
  }
  async function newMgmtKey(scopes: readonly Scope[] = SCOPES, account = TEST_ACCOUNT): Promise<TestKey> {
    const { record, secret } = await credentials.issueMgmtKey(account, 'test', scopes)
    return { key: secret, id: record.id, auth: bearer(secret) }
  }

  await store.ledger.addFunds(TEST_ACCOUNT, 'deposit', parseUsd(TEST_DEPOSIT_USD)!, 'test deposit', Date.now())
  const api = await newApiKey()
  const mgmt = await newMgmtKey()
  return {
    url: running.url,
    key: api.key,
    auth: api.auth,
    keyId: api.id,
    account: TEST_ACCOUNT,
    mgmtKey: mgmt.key,
    mgmtAuth: mgmt.auth,
    newApiKey,
    newMgmtKey,
    newAccount,
    router: running,
    sims,
    registryPath,
    dir,
  }
}

/** A free loopback port with nothing listening on it (connections are refused). */
export async function closedPort(): Promise<number> {
  const { createServer } = await import('node:net')
  return new Promise((resolve) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => resolve(port))
    })
  })
}
