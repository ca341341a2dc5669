/**
 * The registry from the ledger (`registry.source: chain`, DESIGN.md §7): the InferenceServing contract read with
 * viem. Every `refresh_ms` the whole service list is read again, page by page at one block (entries move when
 * one is removed, so a list patched from events or read across blocks could skip or repeat one), mapped onto
 * registry records and swapped in whole when it differs from the last. Contract events only hasten a sweep.
 * An RPC that is down, slow or answers garbage never costs the router its registry: the last good snapshot
 * stays, the failure is logged (once per outage) and published for /metrics.
 */
import { createPublicClient, http, type PublicClient } from 'viem'
import { neuronToAtto, formatUsd, parseUsd, TOKENS_PER_PRICE_UNIT } from '../billing/money.js'
import { log } from '../log.js'
import { refusedHost } from '../vocabulary/public-address.js'
import { HostCheck, type ResolveHost } from './host-check.js'
import { registryRefresh } from '../telemetry/events.js'
import { TIER_RANK, type TrustMode } from '../vocabulary/trust.js'
import { INFERENCE_SERVING_ABI, PAGE_SIZE, type ChainService } from './chain-abi.js'
import { NO_OVERRIDES, OverridesFile, type Overrides, type ProviderOverride } from './overrides.js'
import type { ModelPrice, ModelType, RegistryModel, RegistryProvider, RegistrySnapshot, RegistrySource, RegistrySourceHandlers, Verifiability } from './types.js'

export interface ChainSourceSettings {
  readonly rpcUrl: string
  /** The InferenceServing (proxy) address. */
  readonly contract: `0x${string}`
  readonly refreshMs: number
  /** USD per 0G, a decimal string (registry.chain.usd_per_0g). */
  readonly usdPer0g: string
  /** The operator's overrides file; null for none. */
  readonly overridesPath: string | null
  /** registry.chain.allow_private_urls: services at loopback, private or other non-public addresses are kept. */
  readonly allowPrivateUrls?: boolean
  /** How service host names are resolved for the catalog (host-check.ts; c-ares by default, a test's own map). */
  readonly resolveHost?: ResolveHost
}

/** Where the 0G broker serves the OpenAI-style routes below a service's url. */
export const CHAIN_API_PATH = '/v1/proxy'
const ZERO_ADDRESS = '0x0000000000000000000000000000000000000000'
/** The most services one sweep takes: a contract answering a larger total is answering garbage. */
const MAX_SERVICES = 10_000
const MAX_FIELD = 2048
const NO_REFUSALS: ReadonlyMap<string, string> = new Map()
const SERVICE_TYPES: ReadonlySet<string> = new Set<ModelType>(['chatbot', 'text-to-image', 'speech-to-text'])

/** additionalInfo as an object: JSON from the provider, so anything (junk, an array, a string) reads as {}. */
export function additionalInfo(text: string): Record<string, unknown> {
  if (text.length === 0 || text.length > 64 * 1024) return {}
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

/**
 * The tier a service is routed on, derived from the chain and never taken from the provider's word: a TEE-TLS
 * broker (additionalInfo ProviderType "centralized") with an acknowledged signer is `verified`; a TeeML
 * service with an acknowledged signer is `private`; anything else `standard`.
 */
export function deriveTier(service: Pick<ChainService, 'verifiability' | 'teeSignerAddress' | 'teeSignerAcknowledged'>, info: Record<string, unknown>): TrustMode {
  const signed = service.teeSignerAcknowledged && service.teeSignerAddress.toLowerCase() !== ZERO_ADDRESS
  if (!signed) return 'standard'
  if (info.ProviderType === 'centralized') return 'verified'
  if (service.verifiability === 'TeeML') return 'private'
  return 'standard'
}

/** A service's prices in the registry's decimal USD strings (registry/types.ts), converted exactly. */
export function chainPrice(type: ModelType, inputPrice: bigint, outputPrice: bigint, attoUsdPer0g: bigint): ModelPrice {
  if (type === 'chatbot') {
    // Per token in atto-USD, written per 1M tokens: exactly what offers.ts reads back (perTokenPrice).
    return {
      prompt: formatUsd(neuronToAtto(inputPrice, attoUsdPer0g) * TOKENS_PER_PRICE_UNIT),
      completion: formatUsd(neuronToAtto(outputPrice, attoUsdPer0g) * TOKENS_PER_PRICE_UNIT),
    }
  }
  const unit = formatUsd(neuronToAtto(outputPrice, attoUsdPer0g))
  return type === 'text-to-image' ? { image: unit } : { audio_second: unit }
}

/**
 * A service url as the registry keeps it (http(s), no credentials, query or fragment, no trailing slash, the host
 * as the WHATWG parser normalises it: `0x7f000001`, `2130706433` and `127.1` are all 127.0.0.1), or why it is
 * unusable. Unless `allowPrivate`, its host must be public: a literal address public unicast, a name not one that
 * is never public (names are judged again on every connect, by what they resolve to: upstream/connect-guard.ts).
 */
export function serviceUrl(text: string, allowPrivate: boolean): { url: string } | { problem: string } {
  const unusable = { problem: 'url is not an http(s) URL' }
  if (text.length === 0 || text.length > MAX_FIELD) return unusable
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return unusable
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return unusable
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') return unusable
  if (!allowPrivate) {
    const refused = refusedHost(url.hostname)
    if (refused !== null) return { problem: `url host ${url.hostname} is not public unicast (${refused}); registry.chain.allow_private_urls lifts this` }
  }
  let path = url.pathname
  while (path.endsWith('/')) path = path.slice(0, -1)
  return { url: `${url.protocol}//${url.host}${path}` }
}

function visibleText(text: string): boolean {
  if (text.length === 0 || text.length > 256) return false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x21 || c > 0x7e) return false
  }
  return true
}

/** One service as a registry record, or why it is left out. */
export function mapService(
  service: ChainService,
  attoUsdPer0g: bigint,
  override: ProviderOverride | undefined,
  allowPrivateUrls = false,
  refusedHosts: ReadonlyMap<string, string> = NO_REFUSALS,
): RegistryProvider | string {
  if (!SERVICE_TYPES.has(service.serviceType)) return `service type ${JSON.stringify(service.serviceType.slice(0, 40))} is not served`
  const type = service.serviceType as ModelType
  const checked = serviceUrl(service.url, allowPrivateUrls)
  if ('problem' in checked) return checked.problem
  const url = checked.url
  const hostRefused = refusedHosts.size === 0 ? undefined : refusedHosts.get(new URL(url).hostname)
  if (hostRefused !== undefined) return hostRefused
  if (!visibleText(service.model)) return 'model is not a usable id'
  if (override?.disabled === true) return 'disabled by the overrides file'
  const info = additionalInfo(service.additionalInfo)
  const derived = deriveTier(service, info)
  let trust = derived
  if (override?.trustMode != null) {
    if (TIER_RANK[override.trustMode] <= TIER_RANK[derived]) trust = override.trustMode
    else log.warn('chain registry: an override may lower a tier, never raise it', { provider: service.provider, derived, override: override.trustMode })
  }
  const signer = service.teeSignerAcknowledged ? service.teeSignerAddress.toLowerCase() : ''
  const verifiability: Verifiability = info.ProviderType === 'centralized' ? 'TeeTLS' : service.verifiability === 'TeeML' || service.verifiability === 'TeeTLS' ? service.verifiability : ''
  const mo = override?.models.get(service.model)
  const model: RegistryModel = {
    id: service.model,
    type,
    formats: type === 'chatbot' ? (mo?.formats ?? ['openai']) : [],
    context_length: mo?.context_length ?? null,
    max_completion_tokens: mo?.max_completion_tokens ?? null,
    supported_parameters: mo?.supported_parameters ?? [],
    price: chainPrice(type, service.inputPrice, service.outputPrice, attoUsdPer0g),
    neuron_price: { input: service.inputPrice.toString(), output: service.outputPrice.toString() },
  }
  return {
    address: service.provider.toLowerCase(),
    url,
    api_path: CHAIN_API_PATH,
    trust_mode: trust,
    verifiability,
    tee_type: typeof info.TeeType === 'string' ? info.TeeType.slice(0, 64) : '',
    tee_verifier: typeof info.TeeVerifier === 'string' ? info.TeeVerifier.slice(0, 64) : '',
    tee_signer: signer === ZERO_ADDRESS ? '' : signer,
    models: [model],
    simulate: null,
  }
}

/** The host names (as the WHATWG parser gives them) of services' URLs that only a resolution can judge. */
function hostsOf(services: readonly ChainService[]): Set<string> {
  const hosts = new Set<string>()
  for (const s of services) {
    if (s.url.length === 0 || s.url.length > MAX_FIELD) continue
    try {
      const host = new URL(s.url).hostname
      if (refusedHost(host) === null) hosts.add(host)
    } catch {
      // Not a URL: mapService says so.
    }
  }
  return hosts
}

/** Services in contract order → registry records (what cannot be served is logged and left out). */
export function mapServices(
  services: readonly ChainService[],
  attoUsdPer0g: bigint,
  overrides: Overrides,
  skipped: Map<string, string>,
  allowPrivateUrls = false,
  refusedHosts: ReadonlyMap<string, string> = NO_REFUSALS,
): RegistryProvider[] {
  const out: RegistryProvider[] = []
  const seen = new Set<string>()
  for (const s of services) {
    const address = s.provider.toLowerCase()
    if (seen.has(address)) continue
    const mapped = mapService(s, attoUsdPer0g, overrides.get(address), allowPrivateUrls, refusedHosts)
    if (typeof mapped === 'string') {
      // Said once per provider and reason, not every sweep.
      if (skipped.get(address) !== mapped) log.warn('chain registry: service left out', { provider: address, reason: mapped })
      skipped.set(address, mapped)
      continue
    }
    skipped.delete(address)
    seen.add(address)
    out.push(mapped)
  }
  return out
}

/** Reads the whole service list at one block. */
export async function readAllServices(client: PublicClient, contract: `0x${string}`): Promise<ChainService[]> {
  const blockNumber = await client.getBlockNumber({ cacheTime: 0 })
  const all: ChainService[] = []
  let total = -1n
  for (let offset = 0n; total < 0n || offset < total; ) {
    const [page, count] = (await client.readContract({
      address: contract,
      abi: INFERENCE_SERVING_ABI,
      functionName: 'getAllServices',
      args: [offset, PAGE_SIZE],
      blockNumber,
    })) as readonly [readonly ChainService[], bigint]
    if (count > BigInt(MAX_SERVICES)) throw new Error(`the contract reports ${count} services (more than ${MAX_SERVICES})`)
    if (total >= 0n && count !== total) throw new Error('the service count changed within one block')
    total = count
    if (page.length === 0 && offset < total) throw new Error(`an empty page at offset ${offset} of ${total}`)
    if (page.length > Number(PAGE_SIZE)) throw new Error(`a page of ${page.length} services (asked for ${PAGE_SIZE})`)
    all.push(...page)
    offset += BigInt(page.length)
  }
  return all
}

export function createChainSource(settings: ChainSourceSettings): RegistrySource {
  const attoUsdPer0g = parseUsd(settings.usdPer0g)
  if (attoUsdPer0g === null) throw new Error(`registry.chain.usd_per_0g must be a non-negative decimal (got ${JSON.stringify(settings.usdPer0g)})`)
  // One attempt per read: the next sweep is the retry, and a slow RPC must not stack retries behind it.
  const timeout = Math.max(1000, Math.min(settings.refreshMs, 10_000))
  const client = createPublicClient({ transport: http(settings.rpcUrl, { timeout, retryCount: 0 }) }) as PublicClient
  const overridesFile = settings.overridesPath === null ? null : new OverridesFile(settings.overridesPath)
  const skipped = new Map<string, string>()
  const allowPrivate = settings.allowPrivateUrls === true
  const hostCheck = allowPrivate ? null : new HostCheck(settings.resolveHost)
  let handlers: RegistrySourceHandlers | null = null
  let version = 0
  let lastKey = ''
  let haveSnapshot = false
  let failing = false
  let running: Promise<void> | null = null
  let again = false
  let closed = false
  let timer: NodeJS.Timeout | null = null
  let eventTimer: NodeJS.Timeout | null = null
  /** The last block whose logs were looked at; -1 before the first look. */
  let seenBlock = -1n

  async function readSnapshot(): Promise<RegistrySnapshot | null> {
    const overrides = overridesFile === null ? NO_OVERRIDES : await overridesFile.read((err) => handlers?.onError(err))
    const services = await readAllServices(client, settings.contract)
    // Names resolving to internal addresses are left out here; every connect checks again (connect-guard.ts).
    const refusedHosts = hostCheck === null ? NO_REFUSALS : await hostCheck.refused(hostsOf(services))
    const providers = mapServices(services, attoUsdPer0g!, overrides, skipped, allowPrivate, refusedHosts)
    const key = JSON.stringify(providers)
    if (haveSnapshot && key === lastKey) return null
    lastKey = key
    haveSnapshot = true
    return deepFreezeSnapshot({ providers, version: ++version })
  }

  /** One sweep; a sweep asked for while one runs runs once more after it. */
  function sweep(): Promise<void> {
    if (running !== null) {
      again = true
      return running
    }
    running = (async () => {
      try {
        const snapshot = await readSnapshot()
        if (failing) log.info('chain registry: the RPC answers again', { rpc_url: settings.rpcUrl })
        failing = false
        publish('ok', snapshot?.providers.length ?? -1)
        if (snapshot !== null && !closed) handlers?.onChange(snapshot)
      } catch (err) {
        publish('error', -1)
        if (!failing) {
          log.error('chain registry: reading the contract failed; keeping the last snapshot', { rpc_url: settings.rpcUrl, err: shortError(err) })
        }
        failing = true
        if (handlers === null) throw err
      } finally {
        running = null
        if (again && !closed) {
          again = false
          void sweep().catch(() => {})
        }
      }
    })()
    return running
  }

  function publish(outcome: 'ok' | 'error', providers: number): void {
    if (registryRefresh.hasSubscribers) registryRefresh.publish({ source: 'chain', outcome, providers })
  }

  /**
   * Events only hasten a sweep: any log of the contract since the last look (ServiceUpdated, ServiceRemoved,
   * ProviderTEESignerAcknowledged, a stake) asks for one. Not viem's watchContractEvent: its stop waits for the
   * RPC to uninstall a filter, and with the RPC gone it polls on forever.
   */
  async function lookForEvents(): Promise<void> {
    const block = await client.getBlockNumber({ cacheTime: 0 })
    if (seenBlock < 0n || block < seenBlock) {
      seenBlock = block
      return
    }
    if (block === seenBlock) return
    const logs = await client.getLogs({ address: settings.contract, fromBlock: seenBlock + 1n, toBlock: block })
    seenBlock = block
    if (logs.length > 0 && !closed) await sweep()
  }

  function watchEvents(intervalMs: number): void {
    if (closed) return
    eventTimer = setTimeout(() => {
      lookForEvents()
        .catch(() => {})
        .finally(() => watchEvents(intervalMs))
    }, intervalMs)
    eventTimer.unref()
  }

  function schedule(): void {
    if (closed) return
    timer = setTimeout(() => {
      sweep()
        .catch(() => {})
        .finally(schedule)
    }, settings.refreshMs)
    timer.unref()
  }

  return {
    async start(h) {
      let first: RegistrySnapshot
      try {
        first = (await readSnapshot()) ?? { providers: [], version: ++version }
        publish('ok', first.providers.length)
      } catch (err) {
        publish('error', -1)
        failing = true
        log.error('chain registry: the first read failed; serving no provider until one succeeds', { rpc_url: settings.rpcUrl, err: shortError(err) })
        first = { providers: [], version: ++version }
      }
      handlers = h
      schedule()
      watchEvents(Math.max(250, Math.min(1000, Math.floor(settings.refreshMs / 4))))
      return first
    },
    notReadyReason() {
      return haveSnapshot ? null : 'the chain registry has not been read yet'
    },
    close() {
      closed = true
      if (timer !== null) clearTimeout(timer)
      if (eventTimer !== null) clearTimeout(eventTimer)
    },
  }
}

function deepFreezeSnapshot(snapshot: RegistrySnapshot): RegistrySnapshot {
  for (const p of snapshot.providers) {
    for (const m of p.models) Object.freeze(m)
    Object.freeze(p.models)
    Object.freeze(p)
  }
  Object.freeze(snapshot.providers)
  return Object.freeze(snapshot)
}

function shortError(err: unknown): string {
  const e = err as { shortMessage?: unknown; message?: unknown }
  const text = typeof e?.shortMessage === 'string' ? e.shortMessage : typeof e?.message === 'string' ? e.message : String(err)
  return text.length > 300 ? text.slice(0, 300) + '…' : text
}

