/**
 * The registry as the router routes on it (DESIGN.md §7): the source's snapshot with the providers whose TEE
 * signatures failed lowered (tee/standing.ts); either changing republishes it whole under a new version. The
 * simulated providers a registry asks for (`simulate:`, the demo) run beside it.
 */
import type { Config } from '../config/index.js'
import { log } from '../log.js'
import type { RegistrySnapshot, RegistrySource } from '../registry/types.js'
import type { RoutingTable } from '../routing/table.js'
import type { SimulatorHandle } from '../simulator/simulator.js'
import { TeeStanding } from '../tee/standing.js'
import type { UpstreamPools } from '../upstream/pools.js'
import { part, type Part } from './part.js'
import { REGISTRY_SOURCES } from './table.js'

type Publish = (next: RegistrySnapshot, why: string) => void

/** What stands between the source and routing (src/settlement/: only the providers the router has paid for). */
export interface RegistryGate {
  /** Each snapshot of the source, whole. */
  observe(snapshot: RegistrySnapshot): void
  /** The snapshot with only the providers that may be routed. */
  filter(snapshot: RegistrySnapshot): RegistrySnapshot
}

export class RoutedRegistry {
  readonly standing = new TeeStanding(() => this.#changed('tee standing changed'))
  readonly #source: RegistrySource
  /** Null until the source's first snapshot is read. */
  #sourceSnapshot: RegistrySnapshot | null = null
  #version = 0
  #publish: Publish | null = null
  /** Why the registry changed before anything followed it (published once something does). */
  #unpublished: string | null = null
  #closed = false
  #gate: RegistryGate | null = null

  private constructor(source: RegistrySource) {
    this.#source = source
  }

  /** The registry read from `source`, and its first snapshot to route on. */
  static async start(source: RegistrySource): Promise<{ registry: RoutedRegistry; snapshot: RegistrySnapshot }> {
    const registry = new RoutedRegistry(source)
    registry.#sourceSnapshot = await source.start({
      onChange: (next) => registry.#sourceChanged(next),
      onError(err) {
        log.error('registry source rejected; keeping the previous registry', { err: err.message })
      },
    })
    return { registry, snapshot: registry.#routed() }
  }

  /** Why the source has no usable snapshot yet (/readyz), or null once it has one. */
  notReadyReason(): string | null {
    return this.#source.notReadyReason()
  }

  /** Puts `gate` between the source and routing; it sees the current source snapshot at once. */
  gate(gate: RegistryGate): void {
    this.#gate = gate
    if (this.#sourceSnapshot !== null) gate.observe(this.#sourceSnapshot)
  }

  /** What the gate lets through changed: the registry is published again. */
  republish(why: string): void {
    this.#changed(why)
  }

  /** From now on each change goes to `publish`; one that came before goes at once. */
  follow(publish: Publish): void {
    this.#publish = publish
    const why = this.#unpublished
    this.#unpublished = null
    if (why !== null) publish(this.#routed(), why)
  }

  /** No change is published any more, and the source stops reading. */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#publish = null
    this.#source.close()
  }

  #sourceChanged(next: RegistrySnapshot): void {
    this.#sourceSnapshot = next
    this.#gate?.observe(next)
    this.#changed('registry reloaded')
  }

  #changed(why: string): void {
    if (this.#closed || this.#sourceSnapshot === null) return
    if (this.#publish === null) this.#unpublished = why
    else this.#publish(this.#routed(), why)
  }

  #routed(): RegistrySnapshot {
    const source = this.#sourceSnapshot!
    return this.standing.lower(this.#gate?.filter(source) ?? source, ++this.#version)
  }
}

export async function registryPart(config: Config['registry']): Promise<Part<{ registry: RoutedRegistry; snapshot: RegistrySnapshot }>> {
  const source = await REGISTRY_SOURCES[config.source](config)
  try {
    const started = await RoutedRegistry.start(source)
    return part(started, () => started.registry.close())
  } catch (err) {
    source.close()
    throw err
  }
}

/** The simulated providers running, by address. */
export type Simulators = Map<string, SimulatorHandle>

export async function simulatorsPart(snapshot: RegistrySnapshot): Promise<Part<Simulators>> {
  const running: Simulators = new Map()
  const stop = async (): Promise<void> => {
    await Promise.all([...running.values()].map((s) => s.close()))
    running.clear()
  }
  try {
    await reconcileSimulators(snapshot, running)
  } catch (err) {
    await stop()
    throw err
  }
  return part(running, stop)
}

/**
 * Registry changes reach the routing table (after the simulators they ask for are up) and the pools (those of
 * providers gone are closed). Stopping it closes the source: nothing changes while the rest stops.
 */
export function followRegistryPart(parts: { registry: RoutedRegistry; simulators: Simulators; table: RoutingTable; pools: UpstreamPools }): Part<null> {
  const { registry, simulators, table, pools } = parts
  registry.follow((next, why) => {
    reconcileSimulators(next, simulators)
      .then(() => table.update(next))
      .then(() => {
        pools.retain(new Set(next.providers.map((p) => p.url)))
        log.info(why, { version: next.version, providers: next.providers.length })
      })
      .catch((err: unknown) => log.error('registry update failed; keeping the previous registry', { err: String(err) }))
  })
  return part(null, () => registry.close())
}

/** Boots the simulated providers a registry asks for, keyed by address, and stops those it no longer names. */
async function reconcileSimulators(snapshot: RegistrySnapshot, running: Simulators): Promise<void> {
  const wanted = new Set<string>()
  for (const provider of snapshot.providers) {
    if (provider.simulate === null) continue
    wanted.add(provider.address)
    if (running.has(provider.address)) continue
    const url = new URL(provider.url)
    // Loaded only for a registry that asks for simulated providers (the demo): it brings viem for their TEE keys.
    const { startSimulator } = await import('../simulator/simulator.js')
    const sim = await startSimulator({
      host: url.hostname,
      port: Number(url.port),
      name: provider.address.slice(0, 10),
      ttftMs: provider.simulate.ttft_ms,
      tokensPerS: provider.simulate.tokens_per_s,
      models: provider.models.map((m) => m.id),
    })
    running.set(provider.address, sim)
    log.info('simulated provider started', { address: provider.address, url: sim.url })
  }
  for (const [address, sim] of running) {
    if (!wanted.has(address)) {
      running.delete(address)
      await sim.close()
    }
  }
}
