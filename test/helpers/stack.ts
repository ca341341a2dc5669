/**
 * A whole router on loopback for tests: real simulated providers on port 0, a registry file naming them, a
 * config file, and `serve()` composed exactly as `svc-router serve` composes it. Everything is torn down with
 * the test.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { loadConfig } from '../../src/config/index.js'
import { serve, type RunningRouter } from '../../src/serve.js'
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from '../../src/simulator/simulator.js'

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

export interface Stack {
  readonly url: string
  /** An sk- key of a funded test account: send it as `Authorization: Bearer <key>` on inference calls. */
  readonly key: string
  /** `{ authorization: 'Bearer <key>' }`, to spread into request headers. */
  readonly auth: Record<string, string>
  readonly router: RunningRouter
  /** Simulators by provider address. */
  readonly sims: ReadonlyMap<string, SimulatorHandle>
  readonly registryPath: string
  readonly dir: string
}

/** Minimal interface of a tap Test this helper needs. */
interface TapLike {
  testdir(): string
  teardown(fn: () => unknown): void
}

export const DEFAULT_PRICE = { prompt: 0.1, completion: 0.3 }

/** A 0x address made of one repeated hex digit, e.g. addr('a') = 0xaaaa…aaaa. */
export function addr(digit: string): string {
  return '0x' + digit.repeat(40)
}

export async function startStack(
  t: TapLike,
  providers: TestProvider[],
  config: Record<string, Record<string, unknown>> = {},
): Promise<Stack> {
  const dir = t.testdir()
  const sims = new Map<string, SimulatorHandle>()
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
    }),
  )
  const router = await serve(loadConfig({ file: configPath, env: {} }))
  t.teardown(async () => {
    await router.close()
    await Promise.all([...sims.values()].map((s) => s.close()))
  })
  // Until accounts exist the router serves one open local account; the key is sent anyway so tests keep
  // working unchanged once authentication is enforced.
  const key = 'sk-test-open'
  return { url: router.url, key, auth: { authorization: `Bearer ${key}` }, router, sims, registryPath, dir }
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
