/**
 * The billing ledger of a replica that shares its budgets with others (DESIGN.md §6, store.kind: postgres):
 * the same admission contract as the single-process ledger (ledger.ts: hold the worst case, settle on the real
 * cost, release on failure), but what a key may spend here is a lease taken from the database
 * (store/leases.ts), never a figure read once and trusted. The sum of all replicas' leases never exceeds what an
 * account has available or what a key's credit limit leaves, so no interleaving of replicas can overspend.
 *
 * Per key, a book holds this replica's lease and what its requests in flight hold of it. A hold that fits in
 * the lease is taken synchronously, with no I/O (a warm key at steady load); one that does not asks the
 * database for more, for the whole queue of holds waiting on that key at once, and holds queue behind that
 * request in arrival order. What a book does not use is given back shortly after its last request ends
 * (`lingerMs`), so another replica can take it, and the funds endpoint's `reserved` (every lease on the account)
 * returns to 0 when nothing is in flight.
 *
 * A settled charge stays in the lease (as `settling`) until its commit returns: the store pays it out of the
 * lease in the same transaction (Charge.leased), so the books never count it twice or let it go.
 */
import type { Principal } from '../auth/principal.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import type { LeaseGrant, LeaseStore } from '../store/leases.js'
import type { ResetPeriod } from '../store/store.js'
import type { Books } from './books.js'
import type { Budget } from './budget.js'
import type { ChargeWriter } from './charge-writer.js'
import type { Bill, BilledCost, Settled } from './budget.js'
import { billedWithin, chargeNotRecorded, chargeOf } from './ledger.js'
import { formatUsd } from './money.js'
import { periodBounds } from './periods.js'

export interface LeasedLedgerOptions {
  readonly now?: () => number
  /** How long a hold the database has no room for keeps asking (room held by other requests may come back). */
  readonly budgetWaitMs?: number
  /** How long an unused lease stays with this replica after its key's last request ended. */
  readonly lingerMs?: number
  /** Between two asks of a hold waiting for room. */
  readonly retryMs?: number
}

interface PendingHold {
  readonly amount: bigint
  readonly reservation: LeasedReservation
  readonly resolve: (refused: RouterError | null) => void
  /** Epoch ms after which a hold with no room is refused rather than asked again. */
  readonly deadline: number
}

class KeyBook {
  readonly accountId: string
  readonly keyId: string
  /** This replica's lease on the key, as the database holds it (grants and charges committed). */
  lease = 0n
  /** Held by requests in flight here. */
  reserved = 0n
  /** Settled charges whose commit has not returned: still in the lease. */
  settling = 0n
  revoked = false
  /** Holds waiting, in arrival order, for the lease to grow. */
  readonly queue: PendingHold[] = []
  asking = false
  linger: NodeJS.Timeout | null = null

  constructor(accountId: string, keyId: string) {
    this.accountId = accountId
    this.keyId = keyId
  }

  get free(): bigint {
    return this.lease - this.reserved - this.settling
  }

  get idle(): boolean {
    return this.reserved === 0n && this.settling === 0n && this.queue.length === 0 && !this.asking
  }
}

function periodStartOf(period: ResetPeriod, now: number): number {
  const start = periodBounds(period, now).start
  return Number.isFinite(start) ? start : 0
}

/** The 402 a grant of nothing answers with, with the figures the database reported. */
function refusalOf(grant: LeaseGrant, amount: bigint): RouterError {
  if (grant.keyLimit !== null && grant.keyUsed + grant.keyLeased + amount > grant.keyLimit) {
    return new RouterError(
      'credit_limit_exceeded',
      `this key's credit limit of ${formatUsd(grant.keyLimit)} USD cannot cover this request: ${formatUsd(grant.keyUsed)} used this period, ` +
        `${formatUsd(grant.keyLeased)} held by requests in flight, up to ${formatUsd(amount)} needed`,
    )
  }
  const room = grant.accountRoom < 0n ? 0n : grant.accountRoom
  return new RouterError(
    'insufficient_balance',
    `the account balance cannot cover this request: ${formatUsd(room)} USD available, up to ${formatUsd(amount)} needed`,
  )
}

/** Whether requests in flight (anywhere) hold room that may come back: then waiting can help. */
function blockedByHolds(grant: LeaseGrant, amount: bigint, ownHeld: bigint): boolean {
  const keyFinal = grant.keyLimit !== null && grant.keyUsed + amount > grant.keyLimit
  if (keyFinal) return false
  // Leases of every replica (ours included, minus what is ours and free) may be given back or settle for less.
  return grant.keyLeased > 0n || grant.accountRoom + grant.keyLeased + ownHeld >= amount
}

export class LeasedLedger implements Books {
  readonly #leases: LeaseStore
  readonly #writer: ChargeWriter
  readonly #now: () => number
  readonly #waitMs: number
  readonly #lingerMs: number
  readonly #retryMs: number
  readonly #books = new Map<string, KeyBook>()
  #closed = false

  constructor(leases: LeaseStore, writer: ChargeWriter, options: LeasedLedgerOptions = {}) {
    this.#leases = leases
    this.#writer = writer
    this.#now = options.now ?? Date.now
    this.#waitMs = options.budgetWaitMs ?? 0
    this.#lingerMs = options.lingerMs ?? 200
    this.#retryMs = options.retryMs ?? 25
  }

  /** Holds waiting for room. */
  get waiting(): number {
    let n = 0
    for (const book of this.#books.values()) n += book.queue.length
    return n
  }

  /** Nothing to load: every figure that matters is in the database and asked for when a lease runs short. */
  prepare(_principal: Principal): null {
    return null
  }

  open(principal: Principal, requestId: string): LeasedReservation {
    const keyId = principal.keyId
    if (keyId === null) throw new Error('ledger: a request without a key has no budget to lease')
    let book = this.#books.get(keyId)
    if (book === undefined) this.#books.set(keyId, (book = new KeyBook(principal.accountId, keyId)))
    return new LeasedReservation(this, book, requestId, principal)
  }

  keyRevoked(keyId: string): void {
    const book = this.#books.get(keyId)
    if (book === undefined || book.revoked) return
    book.revoked = true
    const revoked = new RouterError('invalid_api_key', 'the API key was revoked')
    for (const pending of book.queue.splice(0)) pending.resolve(revoked)
    this.#maybeLinger(book)
  }

  hasKey(keyId: string): boolean {
    return this.#books.has(keyId)
  }

  /** What this replica's requests in flight hold of the account (the funds endpoint reads every replica's leases). */
  reserved(accountId: string): bigint {
    let held = 0n
    for (const book of this.#books.values()) if (book.accountId === accountId) held += book.reserved
    return held
  }

  /** Spend is read from the store (every replica's charges are there before their last byte). */
  used(_keyId: string, _period: ResetPeriod): null {
    return null
  }

  /**
   * The other replicas presumed this one dead and released its leases (store/postgres/replicas.ts): none is
   * ours any more. Charges under way are then paid out of free room, or fail (svc_lease_pay).
   */
  leasesLost(): void {
    for (const book of this.#books.values()) book.lease = 0n
  }

  /**
   * A key changed (its credit limit or reset period may be new): the lease this replica holds for it and does
   * not use is no longer its to spend, so the next hold asks the database, which applies the new terms. Holds
   * of requests already admitted stay (as a request admitted alone on its store keeps its hold).
   */
  keyChanged(keyId: string): void {
    const book = this.#books.get(keyId)
    if (book === undefined) return
    const free = book.free
    if (free <= 0n) return
    book.lease -= free
    this.#leases.giveBack(book.accountId, book.keyId, free).catch((err: unknown) => {
      // Still leased in the database: it goes back with the next whole give-back, or when this replica leaves.
      book.lease += free
      log.warn('billing: giving back the lease of a changed key failed', { account: book.accountId, err: String(err) })
    })
  }

  refresh(): Promise<void> {
    return Promise.resolve()
  }

  refreshAccount(_accountId: string): Promise<void> {
    return Promise.resolve()
  }

  /** Gives every unused lease back (shutdown: what requests still hold was settled or released before). */
  async close(): Promise<void> {
    this.#closed = true
    const returns: Promise<void>[] = []
    for (const book of this.#books.values()) {
      if (book.linger !== null) clearTimeout(book.linger)
      book.linger = null
      if (book.idle) returns.push(this.#giveBackNow(book))
    }
    await Promise.all(returns)
  }

  // ---- used by LeasedReservation ----

  hold(book: KeyBook, reservation: LeasedReservation, amount: bigint): RouterError | null | Promise<RouterError | null> {
    if (book.revoked) return new RouterError('invalid_api_key', 'the API key was revoked')
    if (book.linger !== null) {
      clearTimeout(book.linger)
      book.linger = null
    }
    // In arrival order: a hold may take free lease only when none is queued before it.
    if (book.queue.length === 0 && !book.asking && amount <= book.free) {
      book.reserved += amount
      return null
    }
    return new Promise((resolve) => {
      book.queue.push({ amount, reservation, resolve, deadline: this.#now() + this.#waitMs })
      this.#pump(book)
    })
  }

  unhold(book: KeyBook, amount: bigint): void {
    book.reserved -= amount
    this.#afterRelease(book)
  }

  settle(book: KeyBook, reservation: LeasedReservation, held: bigint, bill: Bill, principal: Principal, done: Settled): BilledCost {
    book.reserved -= held
    const billed = billedWithin(bill, held, reservation.requestId)
    const total = billed.input + billed.output
    book.settling += total
    const now = this.#now()
    // Paid out of this replica's lease on the key in the charge's own transaction.
    const charge = chargeOf(reservation.requestId, book.accountId, book.keyId, bill, total, now, true, periodStartOf(principal.resetPeriod, now))
    // What the request held beyond its cost is free again for the holds queued here.
    this.#afterRelease(book)
    this.#writer.enqueue(charge, (outcome) => {
      book.settling -= total
      if (!(outcome instanceof Error)) {
        // The store paid it out of our lease in the charge's transaction.
        book.lease -= total
        this.#afterRelease(book)
        return done(billed, null)
      }
      this.#afterRelease(book)
      done(billed, chargeNotRecorded(reservation.requestId, book.accountId, total, outcome))
    })
    return billed
  }

  #afterRelease(book: KeyBook): void {
    if (book.queue.length > 0) this.#pump(book)
    else this.#maybeLinger(book)
  }

  /**
   * Serves the queue's head from the lease, or asks the database for what the whole queue needs (at least what
   * the head needs). One ask per book at a time: the holds behind it wait for its answer.
   */
  #pump(book: KeyBook): void {
    if (book.asking) return
    while (book.queue.length > 0) {
      const head = book.queue[0]!
      if (head.amount > book.free) break
      book.queue.shift()
      if (!head.reservation.open) {
        head.resolve(new RouterError('server_error', 'the request ended while it waited for budget'))
        continue
      }
      book.reserved += head.amount
      head.reservation.held(head.amount)
      head.resolve(null)
    }
    if (book.queue.length === 0) return this.#maybeLinger(book)
    const head = book.queue[0]!
    let wanted = 0n
    for (const p of book.queue) wanted += p.amount
    const free = book.free > 0n ? book.free : 0n
    const min = head.amount - free
    // One head's worth more than the queue needs: the next request most likely fits without an ask.
    const want = wanted - free + head.amount
    book.asking = true
    this.#leases
      .acquire({ accountId: book.accountId, keyId: book.keyId, periodStart: periodStartOf(head.reservation.resetPeriod, this.#now()), min, want })
      .then(
        (grant) => {
          book.asking = false
          if (grant.granted > 0n) {
            book.lease += grant.granted
            return this.#pump(book)
          }
          // No room for the head now: wait for room held elsewhere to come back, or refuse.
          const now = this.#now()
          if (now < head.deadline && blockedByHolds(grant, head.amount, book.reserved + book.settling) && !this.#closed) {
            book.asking = true
            setTimeout(() => {
              book.asking = false
              this.#pump(book)
            }, this.#retryMs).unref()
            return
          }
          book.queue.shift()
          head.resolve(refusalOf(grant, head.amount))
          this.#pump(book)
        },
        (err: unknown) => {
          book.asking = false
          log.error('billing: asking the database for budget failed', { account: book.accountId, err: String(err) })
          // The whole queue is answered: the database is unreachable or refused, and every hold would wait on it.
          const refused = storeUnavailable(err)
          for (const pending of book.queue.splice(0)) pending.resolve(refused)
          this.#maybeLinger(book)
        },
      )
  }

  #maybeLinger(book: KeyBook): void {
    if (!book.idle || book.linger !== null) return
    if (book.lease === 0n) {
      // Nothing to keep: forget the book (a revoked key's book goes too; the key cache refuses the key).
      this.#books.delete(book.keyId)
      return
    }
    if (book.lease < 0n) {
      // Charges paid out of free room after the lease was lost (leasesLost) left the count below the
      // database's: whatever the database still holds for this replica goes back whole, and the book with it.
      this.#books.delete(book.keyId)
      this.#leases.giveBack(book.accountId, book.keyId, null).catch((err: unknown) => {
        log.warn('billing: giving back a lease after it was lost failed; released when this replica leaves', { account: book.accountId, err: String(err) })
      })
      return
    }
    if (this.#closed) return
    book.linger = setTimeout(() => {
      book.linger = null
      if (book.idle) this.#giveBack(book)
    }, this.#lingerMs)
    book.linger.unref()
  }

  #giveBack(book: KeyBook): void {
    this.#giveBackNow(book).catch(() => {})
  }

  /** Gives back the whole lease of an idle book (all of the database's row: the books may count less, never more). */
  async #giveBackNow(book: KeyBook): Promise<void> {
    if (!book.idle) return
    const amount = book.lease
    // Not ours to spend from now on, whether or not the database hears it (a lease it keeps expires with us).
    book.lease = 0n
    try {
      await this.#leases.giveBack(book.accountId, book.keyId, null)
    } catch (err) {
      book.lease += amount
      log.warn('billing: giving back an unused budget lease failed; kept for now', { account: book.accountId, err: String(err) })
      return
    }
    if (book.idle && book.lease === 0n && this.#books.get(book.keyId) === book) this.#books.delete(book.keyId)
    else if (book.queue.length > 0) this.#pump(book)
  }
}

function storeUnavailable(err: unknown): RouterError {
  const known = toRouterError(err)
  if (known.code !== 'server_error') return known
  return new RouterError('store_unavailable', 'the billing database could not reserve this request now; try again shortly')
}

/** One request's hold on its key's lease (the Budget the failover loop drives). */
export class LeasedReservation implements Budget {
  readonly requestId: string
  readonly resetPeriod: ResetPeriod
  readonly #ledger: LeasedLedger
  readonly #book: KeyBook
  readonly #principal: Principal
  #amount = 0n
  #open = true

  constructor(ledger: LeasedLedger, book: KeyBook, requestId: string, principal: Principal) {
    this.#ledger = ledger
    this.#book = book
    this.requestId = requestId
    this.#principal = principal
    this.resetPeriod = principal.resetPeriod
  }

  get open(): boolean {
    return this.#open
  }

  get amount(): bigint {
    return this.#amount
  }

  /** The ledger granted `amount` to this reservation from its queue. */
  held(amount: bigint): void {
    this.#amount = amount
  }

  hold(amount: bigint): RouterError | null | Promise<RouterError | null> {
    if (!this.#open) throw new Error(`reservation of ${this.requestId} is closed`)
    this.#unhold()
    const outcome = this.#ledger.hold(this.#book, this, amount)
    if (outcome === null) this.#amount = amount
    return outcome
  }

  /** Lowers the hold in place (never raises it, never fails): what it frees goes to the holds queued behind it. */
  lower(amount: bigint): void {
    if (!this.#open || amount < 0n || amount >= this.#amount) return
    const freed = this.#amount - amount
    this.#amount = amount
    this.#ledger.unhold(this.#book, freed)
  }

  settle(bill: Bill, done: Settled): BilledCost {
    if (!this.#open) throw new Error(`reservation of ${this.requestId} is closed`)
    this.#open = false
    const held = this.#amount
    this.#amount = 0n
    return this.#ledger.settle(this.#book, this, held, bill, this.#principal, done)
  }

  release(): void {
    if (!this.#open) return
    this.#open = false
    this.#unhold()
  }

  #unhold(): void {
    const amount = this.#amount
    if (amount === 0n) return
    this.#amount = 0n
    this.#ledger.unhold(this.#book, amount)
  }
}
