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
 * Funding policy: every provider of the registry is funded, in registry order, up to `target`; a provider that
 * cannot be (ledger too low, a transaction failing) is left unrouted with its reason until a later round can.
 */
import { createPublicClient, http, type LocalAccount, type PublicClient } from 'viem'
import { log } from '../log.js'
import type { RegistryProvider, RegistrySnapshot } from '../registry/types.js'
import { settled as settledChannel, type SettleEvent } from '../telemetry/events.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI, format0g, parse0g, type PayerLedger, type SubAccount } from './abi.js'
import type { FundingLock } from './funding-lock.js'
import type { SettlementStore } from '../store/settlement.js'
import { freeTokenId, RENEW_BEFORE_MS, signSessionToken, type SessionToken } from './session-token.js'
import { errorText, TxSender } from './sender.js'
import { SettlementEvents, type SettlementResult, type SettlementStatus } from './settlement-events.js'

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

interface Entry {
  readonly address: `0x${string}`
  record: RegistryProvider
  account: SubAccount | null
  token: SessionToken | null
  reason: string | null
  served: bigint
  settled: bigint
  flagged: boolean
  /** The balance last read, to see what the provider took since (null before the first read). */
  lastBalance: bigint | null
  /** The block that balance was read at, where the next window of settlement events starts (null: never read). */
  lastBlock: bigint | null
  results: Map<SettlementStatus, number>
  /** Served by this replica since the books were last read (the books hold it already: it is durable with each charge). */
  metered: bigint
  /** A renewal under way (401), shared by the requests that met it. */
  renewing: Promise<boolean> | null
}

const NO_PROVIDERS: RegistrySnapshot['providers'] = []
/** The longest range of blocks one getLogs asks for (RPC nodes cap getLogs ranges). */
const MAX_EVENT_BLOCKS = 5_000n
/** The most getLogs ranges one read of a sub-account reads on from the books' last block. */
const MAX_EVENT_WINDOWS = 20n

export function createSettlement(settings: SettlementSettings, deps: SettlementDeps): Settlement {
  const parsed = [settings.sub_account.min_0g, settings.sub_account.target_0g, settings.over_settle_tolerance_0g].map(parse0g)
  if (parsed.some((v) => v === null)) throw new Error('settlement: sub_account amounts must be decimal 0G strings')
  const [min, target, tolerance] = parsed as [bigint, bigint, bigint]
  if (target < min) throw new Error('settlement.sub_account.target_0g must be at least min_0g')
  const timeout = Math.max(2000, Math.min(settings.interval_ms * 2, 15_000))
  const client = createPublicClient({ transport: http(deps.rpcUrl, { timeout, retryCount: 0 }) }) as PublicClient
  const payer = deps.payer
  const sender = new TxSender(client, payer, deps.rpcUrl, undefined, timeout)
  const events = new SettlementEvents(client, deps.serving, payer.address)
  const entries = new Map<string, Entry>()
  let providers: RegistrySnapshot['providers'] = NO_PROVIDERS
  let ledgerAddress: `0x${string}` | null = settings.ledger === '' ? null : (settings.ledger as `0x${string}`)
  let serviceName = settings.service_name
  let payerLedger: PayerLedger | null = null
  let routableKey = ''
  let running: Promise<void> | null = null
  let again = false
  let stopped = false
  let timer: NodeJS.Timeout | null = null
  /** Whether this replica funds in the round under way (only the funder reconciles and writes the books' settled side). */
  let funding = false
  let rounds = 0

  function entry(p: RegistryProvider): Entry {
    let e = entries.get(p.address)
    if (e === undefined) {
      e = { address: p.address as `0x${string}`, record: p, account: null, token: null, reason: 'not funded yet', served: 0n, settled: 0n, flagged: false, lastBalance: null, lastBlock: null, results: new Map(), metered: 0n, renewing: null }
      entries.set(p.address, e)
    }
    e.record = p
    return e
  }

  function free(e: Entry): bigint {
    const a = e.account
    if (a === null) return 0n
    const unsettled = e.served > e.settled ? e.served - e.settled : 0n
    return a.balance - a.pendingRefund - unsettled
  }

  /** Sets why `e` is not routed (null: it is), logging each change once. */
  function setReason(e: Entry, reason: string | null): void {
    if (e.reason === reason) return
    if (reason === null) log.info('settlement: provider paid for and routable', { provider: e.address, free_0g: format0g(free(e)) })
    else log.warn('settlement: provider not routable', { provider: e.address, reason })
    e.reason = reason
  }

  /**
   * Reads `e`'s sub-account. The funding replica also reconciles what the provider took since the last read, from
   * two sources over the same window of blocks: the fall of the balance, and the TEESettlementResult events of its
   * settlements (settlement-events.ts). Each is a lower bound (a top-up in the window hides a settlement from the
   * balance; a window too long is not read for events), and both count the same takes: the window adds the
   * larger, never their sum. The router takes funds back only from a flagged provider, whose settlements are not
   * counted. The books get the block with the balance and what was settled, in one row write, every read.
   */
  async function readAccount(e: Entry, reconcile = true): Promise<SubAccount | null> {
    const block = funding && reconcile ? await client.getBlockNumber({ cacheTime: 0 }) : undefined
    let account: SubAccount | null
    try {
      const a = await client.readContract({ address: deps.serving, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [payer.address, e.address], blockNumber: block })
      account = { balance: a.balance, pendingRefund: a.pendingRefund, acknowledged: a.acknowledged, generation: a.generation, revokedBitmap: a.revokedBitmap, nonce: a.nonce }
    } catch (err) {
      if (!errorText(err).startsWith('AccountNotExists')) throw err
      account = null
    }
    if (block === undefined) return account
    let evented = 0n
    // The window starts after the block of the last read, kept in the books with what it counted (a restart, or
    // another replica taking the lock, reads on from there), and is read in pieces a node answers getLogs for.
    // A window longer than MAX_EVENT_WINDOWS pieces (the books not written for days), or events the node does not
    // answer for, leave the balance's fall alone to count: a lower bound still, and the next window reads events.
    if (e.lastBlock !== null && block > e.lastBlock && block - e.lastBlock <= MAX_EVENT_BLOCKS * MAX_EVENT_WINDOWS) {
      const provider = e.address.toLowerCase()
      const noted: SettlementResult[] = []
      try {
        for (let from = e.lastBlock + 1n; from <= block; from += MAX_EVENT_BLOCKS) {
          const to = from + MAX_EVENT_BLOCKS - 1n < block ? from + MAX_EVENT_BLOCKS - 1n : block
          for (const r of await events.results(from, to)) {
            if (r.provider !== provider) continue
            evented += r.taken
            noted.push(r)
          }
        }
        for (const r of noted) noteResult(e, r)
      } catch (err) {
        evented = 0n
        log.warn('settlement: reading settlement events failed; this window counts the balance only', { provider: e.address, err: errorText(err) })
      }
    }
    const balance = account?.balance ?? 0n
    const before = { settled: e.settled, lastBalance: e.lastBalance, lastBlock: e.lastBlock, flagged: e.flagged }
    const fell = e.lastBalance !== null && balance < e.lastBalance ? e.lastBalance - balance : 0n
    if (!e.flagged) e.settled += fell > evented ? fell : evented
    e.lastBalance = balance
    e.lastBlock = block
    if (!e.flagged && e.settled > e.served + tolerance) {
      e.flagged = true
      log.error('settlement: provider settled more than it served; flagged, unfunded, refund requested', {
        provider: e.address,
        served_0g: format0g(e.served),
        settled_0g: format0g(e.settled),
      })
    }
    if (before.settled !== e.settled || before.lastBalance !== e.lastBalance || before.flagged !== e.flagged || before.lastBlock !== e.lastBlock) {
      await deps.books.record(e.address, { settled: e.settled, lastBalance: e.lastBalance, lastBlock: e.lastBlock, flagged: e.flagged })
    }
    return account
  }

  /** Counts a settlement's status (/metrics); one that did not take the whole fee is logged. */
  function noteResult(e: Entry, r: SettlementResult): void {
    e.results.set(r.status, (e.results.get(r.status) ?? 0) + 1)
    if (r.status === 'success') return
    const fields = { provider: e.address, status: r.status, fee_0g: format0g(r.totalFee), unsettled_0g: format0g(r.unsettled), tx: r.tx }
    if (r.status === 'partial') log.warn('settlement: a provider settled only part of its fee (the sub-account fell short)', fields)
    else log.warn('settlement: the contract refused a provider\'s settlement', fields)
  }

  /**
   * The books (every replica's charges, the flags) into memory. What was served is written with each charge
   * (store/settlement.ts), so a crash loses none of it; the meter only adds what was served since this read.
   * A charge metered while the read is under way may be in both until the next read: served is over-counted
   * for a moment (a top-up a little early), never under-counted (which could flag a provider falsely).
   */
  async function syncBooks(): Promise<void> {
    for (const e of entries.values()) e.metered = 0n
    const rows = new Map((await deps.books.rows()).map((r) => [r.provider, r]))
    for (const e of entries.values()) {
      const r = rows.get(e.address)
      e.served = (r?.served ?? 0n) + e.metered
      if (r === undefined) continue
      e.settled = r.settled
      e.lastBalance = r.lastBalance
      e.lastBlock = r.lastBlock
      if (e.flagged && !r.flagged) log.info('settlement: flag cleared by the operator', { provider: e.address })
      e.flagged = r.flagged
    }
  }

  /** Asks the flagged provider's sub-account back (retrieveFund: released to the ledger after the lock time). */
  async function retrieve(e: Entry): Promise<void> {
    if (e.account === null || e.account.balance === e.account.pendingRefund) return
    await sender.send({ address: ledgerAddress!, abi: LEDGER_MANAGER_ABI, functionName: 'retrieveFund', args: [[e.address], serviceName] })
    e.account = await readAccount(e)
  }

  async function readLedger(): Promise<PayerLedger | null> {
    try {
      const l = await client.readContract({ address: ledgerAddress!, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [payer.address] })
      return { availableBalance: l.availableBalance, totalBalance: l.totalBalance }
    } catch (err) {
      if (errorText(err).startsWith('LedgerNotExists')) return null
      throw err
    }
  }

  async function resolveNames(): Promise<void> {
    ledgerAddress ??= await client.readContract({ address: deps.serving, abi: SERVING_PAYMENT_ABI, functionName: 'ledgerAddress' })
    if (serviceName === '') {
      const [version] = await client.readContract({ address: ledgerAddress, abi: LEDGER_MANAGER_ABI, functionName: 'getRecommendedService', args: ['inference'] })
      serviceName = `inference-${version}`
    }
  }

  /**
   * The session token for `e`: kept while it has an hour left, its generation is the account's and its id is not
   * revoked. False when no token can be made (every id revoked: a new generation is needed).
   */
  async function ensureToken(e: Entry, force: boolean): Promise<boolean> {
    const a = e.account
    if (a === null) return false
    const t = e.token
    const fresh = t !== null && BigInt(t.claims.generation) === a.generation && (a.revokedBitmap & (1n << BigInt(t.claims.tokenId))) === 0n
    if (!force && fresh && t.claims.expiresAt - Date.now() > RENEW_BEFORE_MS) return true
    const id = freeTokenId(a.revokedBitmap)
    if (id < 0) {
      e.token = null
      return false
    }
    e.token = await signSessionToken(payer, e.address, a.generation, id)
    return true
  }

  /** Funds, acknowledges and signs for one provider; returns why it is not routable, or null. */
  async function settleOne(e: Entry, funder: boolean): Promise<string | null> {
    e.account = await readAccount(e)
    if (e.flagged) {
      if (funder) await retrieve(e).catch((err: unknown) => log.warn('settlement: retrieving a flagged sub-account failed', { provider: e.address, err: errorText(err) }))
      return 'flagged: it settled more than the router served (svc-router chain clear-flag)'
    }
    if (free(e) < min || e.account === null) {
      if (!funder) return e.account === null ? 'no sub-account yet (another replica funds)' : 'sub-account below min (another replica funds)'
      const need = target - free(e)
      const available = payerLedger?.availableBalance ?? 0n
      if (payerLedger === null) return 'the payer has no ledger (svc-router chain deposit)'
      const cost = e.account === null ? need : need > e.account.pendingRefund ? need - e.account.pendingRefund : 0n
      if (available < cost) return `the ledger holds ${format0g(available)} 0G, ${format0g(cost)} needed to fund it`
      try {
        await sender.send({ address: ledgerAddress!, abi: LEDGER_MANAGER_ABI, functionName: 'transferFund', args: [e.address, serviceName, need] })
      } catch (err) {
        return `funding failed: ${errorText(err)}`
      }
      log.info('settlement: sub-account funded', { provider: e.address, amount_0g: format0g(need) })
      payerLedger = await readLedger()
      e.account = await readAccount(e)
      if (e.account === null || free(e) < min) return 'sub-account below min after funding'
    }
    if (!e.account.acknowledged) {
      if (!funder) return 'signer not acknowledged (another replica funds)'
      try {
        await sender.send({ address: deps.serving, abi: SERVING_PAYMENT_ABI, functionName: 'acknowledgeTEESigner', args: [e.address, true] })
      } catch (err) {
        return `acknowledging failed: ${errorText(err)}`
      }
      e.account = await readAccount(e)
      if (e.account === null || !e.account.acknowledged) return 'signer not acknowledged'
    }
    if (!(await ensureToken(e, false))) {
      if (!funder) return 'every session token id is revoked (another replica funds)'
      try {
        await sender.send({ address: deps.serving, abi: SERVING_PAYMENT_ABI, functionName: 'revokeAllTokens', args: [e.address] })
      } catch (err) {
        return `starting a new token generation failed: ${errorText(err)}`
      }
      e.account = await readAccount(e)
      if (!(await ensureToken(e, true))) return 'every session token id is revoked'
    }
    return null
  }

  async function runRound(): Promise<void> {
    await resolveNames()
    const funder = await deps.lock.held()
    funding = funder
    payerLedger = await readLedger()
    for (const p of providers) entry(p)
    await syncBooks()
    const wanted = new Set<string>()
    for (const p of providers) {
      wanted.add(p.address)
      const e = entry(p)
      let reason: string | null
      try {
        reason = await settleOne(e, funder)
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
    authorization(address) {
      const e = entries.get(address)
      return e === undefined || e.reason !== null || e.token === null ? null : e.token.authorization
    },
    refused(address, status) {
      const e = entries.get(address)
      if (e === undefined) return Promise.resolve(false)
      if (status !== 401) {
        // The provider finds the balance too low: a top-up now, and the next candidate meanwhile.
        void round()
        return Promise.resolve(false)
      }
      e.renewing ??= (async () => {
        try {
          // Not reconciled here: a round may be reading the same window (it would count the provider's takes twice).
          e.account = await readAccount(e, false)
          if (e.account === null) return false
          if (!(await ensureToken(e, true))) {
            // A new generation needs a transaction: the next round sends it; this request moves on.
            void round()
            return false
          }
          log.info('settlement: session token renewed after the provider refused it', { provider: address, generation: e.account.generation.toString() })
          return true
        } catch (err) {
          log.warn('settlement: renewing a refused token failed', { provider: address, err: errorText(err) })
          return false
        } finally {
          setTimeout(() => (e.renewing = null), 0).unref()
        }
      })()
      return e.renewing
    },
    states() {
      return [...entries.values()].map((e) => ({
        address: e.address,
        account: e.account,
        unsettled: e.served > e.settled ? e.served - e.settled : 0n,
        served: e.served,
        settled: e.settled,
        flagged: e.flagged,
        reason: e.reason,
        tokenExpiresAt: e.token?.claims.expiresAt ?? 0,
        results: e.results,
      }))
    },
    ledger: () => payerLedger,
    progress: () => ({ rounds, funder: funding }),
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
