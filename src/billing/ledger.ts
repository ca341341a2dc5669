/**
 * The billing ledger in memory (DESIGN.md §4, budgets): per account what is available (deposited + credited −
 * spent − reserved) and per key what its current reset period has used and what its in-flight requests hold.
 * Admission reserves a request's worst case against both; settlement replaces the reservation by the real cost
 * and hands the charge to the group-commit writer; a failed request releases it.
 *
 * Exact under concurrency because Node runs one turn at a time: every check and the update it guards happen
 * synchronously in the same turn, so no two requests can both see room that only one of them fits in. The
 * books are read from the store once (on a principal's first request, on a period change, when another
 * process wrote to the store) and then kept current here: no store read on the hot path once warm.
 *
 * Reservations live only in memory, so a crash releases them by construction; on start the books are rebuilt
 * from the durable totals (deposits − charges), which is the ledger's recovery.
 */
import type { Principal } from '../auth/principal.js'
import { RouterError } from '../errors.js'
import { log } from '../log.js'
import type { Charge, LedgerStore, ResetPeriod } from '../store/store.js'
import { availableFunds } from './available.js'
import type { ChargeWriter } from './charge-writer.js'
import { formatUsd } from './money.js'
import { BudgetWaiters } from './budget-waiters.js'
import type { Books } from './books.js'
import type { Bill, BilledCost, Settled } from './budget.js'
import { periodBounds } from './periods.js'
import { usageCount } from './usage-bound.js'

interface AccountBook {
  deposited: bigint
  credited: bigint
  /** Durable charges plus those settled and still on their way to the store. */
  spent: bigint
  reserved: bigint
}

interface KeyBook {
  readonly accountId: string
  period: ResetPeriod
  /** Bounds of the current period, epoch ms. */
  start: number
  end: number
  /** Spend of the current period, settled charges included as soon as they settle. */
  used: bigint
  reserved: bigint
  /** The key was revoked: nothing more is held for it (spec §3: at once, requests waiting for room included). */
  revoked?: true
  /**
   * Changes of the key's credit limit seen since the book was read, and the latest one's limit. A reservation
   * holds against its principal's limit unless the limit changed after it opened (Reservation#limit).
   */
  limitChanges: number
  limit: bigint | null
}

export interface LedgerOptions {
  /** The clock that decides reset periods and charge times (injectable for the boundary tests). */
  readonly now?: () => number
  /**
   * How long a request whose reservation is blocked only by the holds of requests in flight waits for them to
   * settle before its 402 (budget-waiters.ts); 0 refuses at once.
   */
  readonly budgetWaitMs?: number
}

/** A count as stored: the bounded figure (usage-bound.ts), 0 for one that is not a count. */
function tokenCount(n: number): number {
  return Math.max(0, usageCount(n))
}

/**
 * What `bill` is billed against a hold of `held`: its cost, or the hold when the cost exceeded it (`capped`,
 * logged). A provider reporting more usage than the request could produce is billed min(actual, hold), which
 * keeps "balance never below zero, used never past the credit limit" a hard guarantee whatever it reports.
 */
export function billedWithin(bill: Bill, held: bigint, requestId: string): BilledCost {
  let input = bill.cost.input
  let output = bill.cost.output
  const capped = input + output > held
  if (capped) {
    log.warn('billed cost capped at the reservation: the provider reported more than the request could produce', {
      request_id: requestId,
      provider: bill.provider,
      cost: formatUsd(input + output),
      reserved: formatUsd(held),
    })
    if (input > held) input = held
    output = held - input
  }
  return { input, output, capped }
}

/** The charge of a settled request, its counts made safe (a count that is not one is billed as 0). */
export function chargeOf(requestId: string, accountId: string, keyId: string, bill: Bill, cost: bigint, at: number, leased = false, periodStart = 0): Charge {
  // Every member always set, in one order: every charge has one shape for the code that reads batches of them.
  return {
    requestId,
    accountId,
    keyId,
    model: bill.model,
    provider: bill.provider,
    at,
    promptTokens: tokenCount(bill.promptTokens),
    completionTokens: tokenCount(bill.completionTokens),
    images: tokenCount(bill.images),
    audioMs: tokenCount(bill.audioMs),
    cost,
    neuron: bill.neuron ?? null,
    leased,
    periodStart,
  }
}

/** A charge the store did not record: logged loudly, and the error its response ends with instead of its last byte. */
export function chargeNotRecorded(requestId: string, accountId: string, cost: bigint, err: Error): RouterError {
  log.error('CHARGE NOT RECORDED: the response ends with an error instead of its last byte', {
    request_id: requestId,
    account: accountId,
    cost: formatUsd(cost),
    err: err.message,
  })
  return new RouterError('server_error', 'the charge for this request could not be recorded, so the response was not completed')
}

function roll(key: KeyBook, now: number): void {
  if (now < key.end && now >= key.start) return
  // Every charge settled so far has `at` < end (settling rolls first), so the new period starts empty.
  const b = periodBounds(key.period, now)
  key.start = b.start
  key.end = b.end
  key.used = 0n
}

export class Ledger implements Books {
  readonly #store: LedgerStore
  readonly #writer: ChargeWriter
  readonly #now: () => number
  readonly #accounts = new Map<string, AccountBook>()
  readonly #keys = new Map<string, KeyBook>()
  readonly #loads = new Map<string, Promise<void>>()
  #refreshing: Promise<void> | null = null
  #refreshAgain = false
  readonly #waiters = new BudgetWaiters()
  readonly #waitMs: number

  constructor(store: LedgerStore, writer: ChargeWriter, options: LedgerOptions = {}) {
    this.#store = store
    this.#writer = writer
    this.#now = options.now ?? Date.now
    this.#waitMs = options.budgetWaitMs ?? 0
  }

  /** Requests waiting for room in a budget. */
  get waiting(): number {
    return this.#waiters.size
  }

  /** null when the principal's books are in memory; otherwise a Promise that resolves once they are. */
  prepare(principal: Principal): Promise<void> | null {
    const accountReady = this.#accounts.has(principal.accountId)
    const key = principal.keyId === null ? undefined : this.#keys.get(principal.keyId)
    const keyReady = principal.keyId === null || (key !== undefined && key.period === principal.resetPeriod)
    if (accountReady && keyReady) return null
    const loads: Promise<void>[] = []
    if (!accountReady) loads.push(this.#loadAccount(principal.accountId))
    if (!keyReady) loads.push(this.#loadKey(principal.accountId, principal.keyId!, principal.resetPeriod))
    return Promise.all(loads).then(() => undefined)
  }

  /** A request's reservation, empty until `reserve`. The principal must be prepared. */
  open(principal: Principal, requestId: string): Reservation {
    const account = this.#accounts.get(principal.accountId)
    const key = principal.keyId === null ? null : this.#keys.get(principal.keyId)
    if (account === undefined || key === undefined) throw new Error(`ledger: books of ${principal.accountId} are not loaded (call prepare first)`)
    return new Reservation(this.#writer, this.#now, requestId, principal, account, key, this.#waiters, this.#waitMs)
  }

  /**
   * The key was revoked (here or by another process): its requests still waiting for room, and any later hold
   * (a failover re-pricing), are refused with 401 invalid_api_key instead of being sent. Requests already sent
   * run to their end and are billed.
   */
  keyRevoked(keyId: string): void {
    const key = this.#keys.get(keyId)
    if (key === undefined || key.revoked === true) return
    key.revoked = true
    this.#waiters.wake()
  }

  /**
   * The key's credit limit changed (here or in another process): requests already admitted and those waiting
   * for room hold against the new one from their next hold on. A raised limit may make room for the waiting.
   */
  keyLimitChanged(keyId: string, creditLimit: bigint | null): void {
    const key = this.#keys.get(keyId)
    if (key === undefined) return
    key.limit = creditLimit
    key.limitChanges++
    this.#waiters.wake()
  }

  /** Whether the key's book is in memory (keyRevoked has something to mark). */
  hasKey(keyId: string): boolean {
    return this.#keys.has(keyId)
  }

  /** atto-USD held by the account's in-flight requests. */
  reserved(accountId: string): bigint {
    return this.#accounts.get(accountId)?.reserved ?? 0n
  }

  /** What the account can still reserve, or null when its books are not in memory. */
  available(accountId: string): bigint | null {
    const a = this.#accounts.get(accountId)
    return a === undefined ? null : availableFunds(a, a.reserved)
  }

  /** The key's spend in its current `period`, or null when the ledger does not hold that key's book. */
  used(keyId: string, period: ResetPeriod): bigint | null {
    const key = this.#keys.get(keyId)
    if (key === undefined || key.period !== period) return null
    roll(key, this.#now())
    return key.used
  }

  /**
   * Re-reads every book from the store (another process, e.g. the operator CLI's deposit, changed it).
   * Reservations are kept: they are this process's own.
   */
  refresh(): Promise<void> {
    if (this.#refreshing !== null) {
      this.#refreshAgain = true
      return this.#refreshing
    }
    const run = async (): Promise<void> => {
      do {
        this.#refreshAgain = false
        for (const id of [...this.#accounts.keys()]) await this.#loadAccount(id, true)
        for (const [id, key] of [...this.#keys]) await this.#loadKey(key.accountId, id, key.period, true)
      } while (this.#refreshAgain)
    }
    this.#refreshing = run().finally(() => {
      this.#refreshing = null
    })
    return this.#refreshing
  }

  /** Re-reads one account's book (another process added funds to it); a book not in memory is read when needed. */
  refreshAccount(accountId: string): Promise<void> {
    // A first read under way may have read before the change: read again after it.
    if (!this.#accounts.has(accountId) && !this.#loads.has('a:' + accountId)) return Promise.resolve()
    return this.#loadAccount(accountId, true)
  }

  #once(name: string, load: () => Promise<void>, force: boolean): Promise<void> {
    const running = this.#loads.get(name)
    if (running !== undefined && !force) return running
    const p = (running ?? Promise.resolve()).then(load).finally(() => {
      if (this.#loads.get(name) === p) this.#loads.delete(name)
    })
    this.#loads.set(name, p)
    return p
  }

  #loadAccount(accountId: string, force = false): Promise<void> {
    return this.#once(
      'a:' + accountId,
      () =>
        // Quiesced: no batch commits between the read and the sum below, so durable + pending counts each
        // settled charge exactly once.
        this.#writer.quiesce(async () => {
          const t = await this.#store.totals(accountId)
          let pending = 0n
          for (const c of this.#writer.pending()) if (c.accountId === accountId) pending += c.cost
          const book = this.#accounts.get(accountId)
          if (book === undefined) {
            this.#accounts.set(accountId, { deposited: t.deposited, credited: t.credited, spent: t.spent + pending, reserved: 0n })
            return
          }
          book.deposited = t.deposited
          book.credited = t.credited
          book.spent = t.spent + pending
          // A deposit may have made room for requests waiting on this account.
          this.#waiters.wake()
        }),
      force,
    )
  }

  #loadKey(accountId: string, keyId: string, period: ResetPeriod, force = false): Promise<void> {
    return this.#once(
      `k:${keyId}:${period}`,
      () =>
        this.#writer.quiesce(async () => {
          const b = periodBounds(period, this.#now())
          const spend = await this.#store.spendByKey(accountId, b.startDay)
          let used = spend.get(keyId) ?? 0n
          for (const c of this.#writer.pending()) if (c.keyId === keyId && c.at >= b.start) used += c.cost
          const book = this.#keys.get(keyId)
          if (book === undefined) {
            this.#keys.set(keyId, { accountId, period, start: b.start, end: b.end, used, reserved: 0n, limitChanges: 0, limit: null })
            return
          }
          book.period = period
          book.start = b.start
          book.end = b.end
          book.used = used
        }),
      force,
    )
  }
}

/**
 * One request's hold on its account and key. `reserve` (re)prices it for the candidate about to be tried,
 * `settle` turns it into a charge, `release` gives it back; after either of the last two it is closed and
 * every further call is a no-op (release) or an error (reserve, settle).
 */
export class Reservation {
  readonly requestId: string
  readonly #writer: ChargeWriter
  readonly #now: () => number
  readonly #accountId: string
  readonly #keyId: string | null
  readonly #limit: bigint | null
  /** The key book's limitChanges when this opened: its principal's limit is the key's until it moves. */
  readonly #limitChanges: number
  readonly #account: AccountBook
  readonly #key: KeyBook | null
  readonly #waiters: BudgetWaiters
  readonly #waitMs: number
  #amount = 0n
  #open = true

  constructor(
    writer: ChargeWriter,
    now: () => number,
    requestId: string,
    principal: Principal,
    account: AccountBook,
    key: KeyBook | null,
    waiters: BudgetWaiters = new BudgetWaiters(),
    waitMs = 0,
  ) {
    this.requestId = requestId
    this.#writer = writer
    this.#now = now
    this.#accountId = principal.accountId
    this.#keyId = principal.keyId
    this.#limit = principal.creditLimit
    this.#limitChanges = key === null ? 0 : key.limitChanges
    this.#account = account
    this.#key = key
    this.#waiters = waiters
    this.#waitMs = waitMs
  }

  /** atto-USD held now. */
  get amount(): bigint {
    return this.#amount
  }

  get open(): boolean {
    return this.#open
  }

  /**
   * Holds `amount` in place of what was held before (failover re-prices for the next candidate). The new
   * amount must fit on its own once the old one is given back; if it does not, nothing stays held and the 402
   * to answer with is returned.
   */
  reserve(amount: bigint): RouterError | null {
    if (!this.#open) throw new Error(`reservation of ${this.requestId} is closed`)
    this.#unhold()
    const outcome = this.#hold(amount)
    if (outcome === null) return null
    this.#waiters.wake()
    return outcome.err
  }

  /**
   * As reserve, except that a request blocked only by the holds of requests in flight (it would fit beside
   * what is settled) waits for them, at most the ledger's budget wait (budget-waiters.ts), and the promise
   * then says whether it holds the amount or which 402 to answer with. Nothing stays held while it waits.
   */
  hold(amount: bigint): RouterError | null | Promise<RouterError | null> {
    if (!this.#open) throw new Error(`reservation of ${this.requestId} is closed`)
    this.#unhold()
    const outcome = this.#hold(amount)
    if (outcome === null) return null
    // The hold given back above (a previous candidate's) may be what another request waits for.
    this.#waiters.wake()
    if (outcome.final || this.#waitMs <= 0) return outcome.err
    // The 402 to answer with if the wait ends without room, as of the last try (every release wakes one).
    let latest = outcome.err
    return this.#waiters.wait(
      () => {
        if (!this.#open) return latest
        const again = this.#hold(amount)
        if (again === null) return null
        latest = again.err
        return again.final ? again.err : 'blocked'
      },
      this.#waitMs,
      () => latest,
    )
  }

  /** Holds `amount` when it fits; otherwise why not, and whether settling the holds in flight could help. */
  #hold(amount: bigint): { readonly err: RouterError; readonly final: boolean } | null {
    const key = this.#key
    if (key !== null) {
      if (key.revoked === true) return { err: new RouterError('invalid_api_key', 'the API key was revoked'), final: true }
      roll(key, this.#now())
      // Lowered or raised while this request was admitted or waiting: the new limit binds its next hold.
      const limit = key.limitChanges === this.#limitChanges ? this.#limit : key.limit
      if (limit !== null && key.used + key.reserved + amount > limit) {
        const err = new RouterError(
          'credit_limit_exceeded',
          `this key's credit limit of ${formatUsd(limit)} USD cannot cover this request: ${formatUsd(key.used)} used this period, ` +
            `${formatUsd(key.reserved)} held by requests in flight, up to ${formatUsd(amount)} needed`,
        )
        return { err, final: key.used + amount > limit }
      }
    }
    const a = this.#account
    const available = availableFunds(a, a.reserved)
    if (amount > available) {
      const err = new RouterError(
        'insufficient_balance',
        `the account balance cannot cover this request: ${formatUsd(available < 0n ? 0n : available)} USD available, up to ${formatUsd(amount)} needed`,
      )
      return { err, final: amount > availableFunds(a, 0n) }
    }
    a.reserved += amount
    if (key !== null) key.reserved += amount
    this.#amount = amount
    return null
  }

  /**
   * Replaces the reservation by the charge of `bill` and queues it for the next group commit; `done` runs once
   * the charge is durable (or failed to be). Returns the billed amount at once, for the trace.
   *
   * Never bills more than was reserved: a provider reporting more usage than the request could produce is
   * billed min(actual, reservation), and logged. That keeps "balance never below zero, used never past the
   * credit limit" a hard guarantee whatever a provider reports.
   */
  settle(bill: Bill, done: Settled): BilledCost {
    if (!this.#open) throw new Error(`reservation of ${this.requestId} is closed`)
    this.#open = false
    const held = this.#amount
    this.#unhold()
    const billed = billedWithin(bill, held, this.requestId)
    const total = billed.input + billed.output
    const now = this.#now()
    const a = this.#account
    a.spent += total
    const key = this.#key
    let keyStart = 0
    if (key !== null) {
      roll(key, now)
      key.used += total
      keyStart = key.start
    }
    // After the books hold the charge (never between the hold's release and the spend: that room is not free).
    this.#waiters.wake()
    if (this.#keyId === null) {
      // No key, no usage record (the store keys them by key): nothing durable to wait for.
      queueMicrotask(() => done(billed, null))
      return billed
    }
    const charge = chargeOf(this.requestId, this.#accountId, this.#keyId, bill, total, now)
    this.#writer.enqueue(charge, (outcome) => {
      if (!(outcome instanceof Error)) return done(billed, null)
      // Not recorded: take it back out of the books so admission stays exact, and fail the response.
      a.spent -= total
      if (key !== null && key.start === keyStart) key.used -= total
      this.#waiters.wake()
      done(billed, chargeNotRecorded(this.requestId, this.#accountId, total, outcome))
    })
    return billed
  }

  /**
   * Lowers the hold to `amount` in place, never raising it (an edit's worst case fell once its `n` came): what
   * the request can no longer cost is room for others at once. Nothing is checked, so nothing can fail: the
   * rest of the hold stays as it was.
   */
  lower(amount: bigint): void {
    if (!this.#open || amount < 0n || amount >= this.#amount) return
    const freed = this.#amount - amount
    this.#account.reserved -= freed
    if (this.#key !== null) this.#key.reserved -= freed
    this.#amount = amount
    this.#waiters.wake()
  }

  /** Gives the reservation back without a charge (failed, refused or abandoned request). */
  release(): void {
    if (!this.#open) return
    this.#open = false
    this.#unhold()
    this.#waiters.wake()
  }

  #unhold(): void {
    const amount = this.#amount
    if (amount === 0n) return
    this.#account.reserved -= amount
    if (this.#key !== null) this.#key.reserved -= amount
    this.#amount = 0n
  }
}
