/**
 * Paying the providers of a chain registry (DESIGN.md §8), as one part of the composition root:
 * `createSettlement(config.settlement, deps)` → what the engine and the registry need, and stop().
 *
 * A background round (every `interval_ms`, and at once when a provider refuses payment) reads the payer's ledger
 * and each provider's sub-account, moves funds into the sub-accounts that fell below `min` (up to `target`),
 * and signs session tokens. Only one replica moves funds (funding-lock.ts); every replica reads and signs with
 * the same key. A provider is routable only while its sub-account is acknowledged, holds at least `min` beyond
 * its pending refund and what it served and has not settled, and a token is ready: `filter` keeps the others out
 * of the routing table, and `authorization` (read on the request path, from memory) has no token for them.
 *
 * The parts: funding-round.ts (one provider's funding, acknowledgement, generation), token-book.ts (session
 * tokens, renewal on a 401), reconciliation.ts (served against settled, the over-settle flag, the books).
 *
 * Funding policy: every provider of the registry is funded, in registry order, up to `target`; a provider that
 * cannot be (ledger too low, a transaction failing) is left unrouted with its reason until a later round can.
 */
import { createPublicClient, http, type LocalAccount, type PublicClient } from 'viem'
import { log } from '../log.js'
import type { RegistryProvider, RegistrySnapshot } from '../registry/types.js'
import { settled as settledChannel, type SettleEvent } from '../telemetry/events.js'
import type { SettlementStore } from '../store/settlement.js'
import { format0g, parse0g, type PayerLedger, type SubAccount } from './abi.js'
import { free, newEntry, unsettled, type Entry } from './entry.js'
import type { FundingLock } from './funding-lock.js'
import { FundingRound } from './funding-round.js'
import { Reconciler } from './reconciliation.js'
import { errorText, TxSender } from './sender.js'
import { SettlementEvents, type SettlementStatus } from './settlement-events.js'
import { TokenBook } from './token-book.js'

export interface SettlementSettings {
  readonly ledger: string
  readonly service_name: string
  readonly sub_account: { readonly min_0g: string; readonly target_0g: string }
  readonly interval_ms: number
  readonly over_settle_tolerance_0g: string
}

export interface SettlementDeps {
  readonly payer: LocalAccount
  readonly rpcUrl: string
  /** The InferenceServing contract the registry is read from. */
  readonly serving: `0x${string}`
  readonly lock: FundingLock
  /** The books: served, settled and flags per provider, shared by the replicas and kept across restarts. */
  readonly books: SettlementStore
  /** The set of routable providers changed: the registry is to be published again (through filter()). */
  readonly onRoutableChange: () => void
}

/** What the engine asks of the payer on the request path (upstream/attempt.ts, failover.ts). */
export interface ProviderPayer {
  /** The Authorization value for `address`: a session token; null when the router cannot pay it (never sent). */
  authorization(address: string): string | null
  /** The provider answered 401 (token refused) or 402 (balance): resolves true when a renewed token is worth one retry. */
  refused(address: string, status: number): Promise<boolean>
}

export interface ProviderState {
  readonly address: string
  readonly account: SubAccount | null
  /** Neuron served (the books' charges, and this replica's meter since it read them) not yet matched by a settlement. */
  readonly unsettled: bigint
  readonly served: bigint
  readonly settled: bigint
  readonly flagged: boolean
  /** Why it is not routed; null when it is. */
  readonly reason: string | null
  readonly tokenExpiresAt: number
  /** The TEESettlementResult events of its settlements for the payer this process read, by status. */
  readonly results: ReadonlyMap<SettlementStatus, number>
}

export interface Settlement extends ProviderPayer {
  readonly payer: `0x${string}`
  /** The registry the router pays: every provider in it is funded (its latest snapshot). */
  observe(snapshot: RegistrySnapshot): void
  /** The snapshot with only the routable providers. */
  filter(snapshot: RegistrySnapshot): RegistrySnapshot
  /** The providers of `model` left out of routing, and why (/v1/providers). */
  unrouted(model: string): { address: string; reason: string }[]
  states(): ProviderState[]
  ledger(): PayerLedger | null
  /** Rounds this process has finished, and whether it funded in the last (held the funding lock): /metrics. */
  progress(): { readonly rounds: number; readonly funder: boolean }
  /** One round now (tests, and the CLI's status). */
  round(): Promise<void>
  stop(): Promise<void>
}

const NO_PROVIDERS: RegistrySnapshot['providers'] = []

export function createSettlement(settings: SettlementSettings, deps: SettlementDeps): Settlement {
  const parsed = [settings.sub_account.min_0g, settings.sub_account.target_0g, settings.over_settle_tolerance_0g].map(parse0g)
  if (parsed.some((v) => v === null)) throw new Error('settlement: sub_account amounts must be decimal 0G strings')
  const [min, target, tolerance] = parsed as [bigint, bigint, bigint]
  if (target < min) throw new Error('settlement.sub_account.target_0g must be at least min_0g')
  const timeout = Math.max(2000, Math.min(settings.interval_ms * 2, 15_000))
  const client = createPublicClient({ transport: http(deps.rpcUrl, { timeout, retryCount: 0 }) }) as PublicClient
  const payer = deps.payer
  const sender = new TxSender(client, payer, deps.rpcUrl, undefined, timeout)
  const reconciler = new Reconciler(client, deps.serving, payer, deps.books, new SettlementEvents(client, deps.serving, payer.address), tolerance)
  // Not reconciled on a refusal: a round may be reading the same window (it would count the provider's takes twice).
  const tokens = new TokenBook(payer, (e) => reconciler.readAccount(e, false), () => void round())
  const funding = new FundingRound({ client, payer, sender, serving: deps.serving, reconciler, tokens, min, target, ledger: settings.ledger, serviceName: settings.service_name })
  const entries = new Map<string, Entry>()
  let providers: RegistrySnapshot['providers'] = NO_PROVIDERS
  let routableKey = ''
  let running: Promise<void> | null = null
  let again = false
  let stopped = false
  let timer: NodeJS.Timeout | null = null
  let rounds = 0

  function entry(p: RegistryProvider): Entry {
    let e = entries.get(p.address)
    if (e === undefined) {
      e = newEntry(p)
      entries.set(p.address, e)
    }
    e.record = p
    return e
  }

  /** Sets why `e` is not routed (null: it is), logging each change once. */
  function setReason(e: Entry, reason: string | null): void {
    if (e.reason === reason) return
    if (reason === null) log.info('settlement: provider paid for and routable', { provider: e.address, free_0g: format0g(free(e)) })
    else log.warn('settlement: provider not routable', { provider: e.address, reason })
    e.reason = reason
  }

  async function runRound(): Promise<void> {
    await funding.resolveNames()
    const funder = await deps.lock.held()
    reconciler.funding = funder
    await funding.refreshLedger()
    for (const p of providers) entry(p)
    await reconciler.syncBooks(entries.values())
    const wanted = new Set<string>()
    for (const p of providers) {
      wanted.add(p.address)
      const e = entry(p)
      let reason: string | null
      try {
        reason = await funding.provider(e, funder)
      } catch (err) {
        reason = `the chain could not be read: ${errorText(err)}`
      }
      setReason(e, reason)
      if (stopped) return
    }
    for (const address of entries.keys()) if (!wanted.has(address)) entries.delete(address)
  }

  function round(): Promise<void> {
    if (running !== null) {
      again = true
      return running
    }
    running = runRound()
      .catch((err: unknown) => log.error('settlement: a round failed', { err: errorText(err) }))
      .finally(() => {
        running = null
        rounds++
        publishIfChanged()
        if (again && !stopped) {
          again = false
          void round()
        }
      })
    return running
  }

  function publishIfChanged(): void {
    const key = [...entries.values()].filter((e) => e.reason === null).map((e) => e.address).join(',')
    if (key === routableKey) return
    routableKey = key
    deps.onRoutableChange()
  }

  function schedule(): void {
    if (stopped) return
    timer = setTimeout(() => void round().finally(schedule), settings.interval_ms)
    timer.unref()
  }

  // The router's meter between two reads of the books: what each durable answer cost at the provider's own prices.
  const onSettled = (message: unknown): void => {
    const m = message as SettleEvent
    if (!m.durable || m.neuron === undefined) return
    const e = entries.get(m.provider)
    if (e === undefined) return
    e.served += m.neuron
    e.metered += m.neuron
  }
  settledChannel.subscribe(onSettled)
  void round().finally(schedule)

  return {
    payer: payer.address,
    observe(snapshot) {
      providers = snapshot.providers
      void round()
    },
    filter(snapshot) {
      const kept = snapshot.providers.filter((p) => entries.get(p.address)?.reason === null)
      return kept.length === snapshot.providers.length ? snapshot : Object.freeze({ providers: Object.freeze(kept), version: snapshot.version })
    },
    unrouted(model) {
      const out: { address: string; reason: string }[] = []
      for (const p of providers) {
        if (!p.models.some((m) => m.id === model)) continue
        const reason = entries.get(p.address)?.reason ?? 'not funded yet'
        if (entries.get(p.address)?.reason !== null) out.push({ address: p.address, reason })
      }
      return out
    },
    authorization: (address) => tokens.authorization(entries.get(address)),
    refused(address, status) {
      const e = entries.get(address)
      if (e === undefined) return Promise.resolve(false)
      if (status !== 401) {
        // The provider finds the balance too low: a top-up now, and the next candidate meanwhile.
        void round()
        return Promise.resolve(false)
      }
      return tokens.refused(e)
    },
    states() {
      return [...entries.values()].map((e) => ({
        address: e.address,
        account: e.account,
        unsettled: unsettled(e),
        served: e.served,
        settled: e.settled,
        flagged: e.flagged,
        reason: e.reason,
        tokenExpiresAt: e.token?.claims.expiresAt ?? 0,
        results: e.results,
      }))
    },
    ledger: () => funding.payerLedger,
    progress: () => ({ rounds, funder: reconciler.funding }),
    round,
    async stop() {
      stopped = true
      if (timer !== null) clearTimeout(timer)
      settledChannel.unsubscribe(onSettled)
      await running?.catch(() => {})
      await deps.lock.close()
    },
  }
}
