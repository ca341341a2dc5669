/**
 * The billing ledger on a real SQLite store: exact costs at awkward prices, reserve → settle → durable charge,
 * re-pricing, release, the cap at the reservation, budgets that hold under many concurrent holds, reset
 * periods at their UTC boundaries (injected clock), a failed commit reconciled, and books rebuilt from the
 * store (what a restart does).
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { Principal } from '../../src/auth/principal.js'
import { ChargeWriter } from '../../src/billing/charge-writer.js'
import { chatCost, chatWorstCase, DEFAULT_MAX_OUTPUT_TOKENS, maxOutputTokens } from '../../src/billing/cost.js'
import type { Bill, BilledCost } from '../../src/billing/budget.js'
import { Ledger } from '../../src/billing/ledger.js'
import { formatUsd, numberToDecimal, parseUsd, perTokenPrice } from '../../src/billing/money.js'
import { periodBounds } from '../../src/billing/periods.js'
import { RouterError } from '../../src/errors.js'
import type { Offer } from '../../src/routing/offers.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import type { ResetPeriod, Store } from '../../src/store/store.js'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

const A = '0x' + 'a'.repeat(40)
const usd = (text: string): bigint => parseUsd(text)!

function offer(prompt: string, completion: string, extra: { maxCompletionTokens?: number; contextLength?: number | null } = {}): Offer {
  return {
    promptPrice: perTokenPrice(prompt)!,
    completionPrice: perTokenPrice(completion)!,
    maxCompletionTokens: extra.maxCompletionTokens ?? -1,
    model: { context_length: extra.contextLength ?? null },
  } as unknown as Offer
}

function principal(keyId: string | null, creditLimit: string | null = null, resetPeriod: ResetPeriod = 'never'): Principal {
  return {
    accountId: A,
    keyId,
    tier: -1,
    allowedModels: null,
    allowedProviders: null,
    rateLimit: 600,
    creditLimit: creditLimit === null ? null : usd(creditLimit),
    resetPeriod,
  }
}

function bill(cost: bigint, output = 0n): Bill {
  return { model: 'm', provider: '0x' + '1'.repeat(40), promptTokens: 1, completionTokens: 1, images: 0, audioMs: 0, cost: { input: cost, output } }
}

interface Books {
  store: Store
  writer: ChargeWriter
  ledger: Ledger
  keyId: string
  clock: { now: number }
}

async function books(
  t: Test,
  deposit = '10',
  creditLimit: string | null = null,
  period: ResetPeriod = 'never',
  now = Date.UTC(2025, 0, 15, 12),
  options: { budgetWaitMs?: number } = {},
): Promise<Books> {
  const store = await openSqliteStore({ path: ':memory:' })
  const writer = new ChargeWriter(store.ledger)
  t.teardown(async () => {
    await writer.close()
    await store.close()
  })
  await store.ledger.addFunds(A, 'deposit', usd(deposit), 'test', now)
  const keyId = randomUUID()
  await store.keys.createApiKey({
    id: keyId,
    accountId: A,
    hash: randomUUID(),
    preview: 'sk-x',
    name: 'k',
    trustMode: null,
    creditLimit: creditLimit === null ? null : usd(creditLimit),
    resetPeriod: period,
    expiresAt: null,
    allowedModels: null,
    allowedProviders: null,
    createdAt: now,
  })
  const clock = { now }
  const ledger = new Ledger(store.ledger, writer, { now: () => clock.now, ...options })
  return { store, writer, ledger, keyId, clock }
}

/** Settles and waits for the durable commit. */
function settle(r: ReturnType<Ledger['open']>, b: Bill): Promise<{ billed: BilledCost; err: RouterError | null }> {
  return new Promise((resolve) => {
    r.settle(b, (billed, err) => resolve({ billed, err }))
  })
}

t.test('costs at awkward prices are exact to the last digit', async (t) => {
  const cheap = offer('0.07', '0.000000001')
  t.equal(formatUsd(chatCost(cheap, { prompt_tokens: 123_457, completion_tokens: 0, total_tokens: 0 }).input), '0.00864199', '123457 × 0.07 / 1M')
  t.equal(formatUsd(chatCost(cheap, { prompt_tokens: 0, completion_tokens: 1, total_tokens: 0 }).output), '0.000000000000001', '1 × 1e-9 / 1M')
  t.equal(formatUsd(chatCost(cheap, { prompt_tokens: 0, completion_tokens: 999_999_999, total_tokens: 0 }).output), '0.000000999999999', '999999999 × 1e-9 / 1M')
  t.equal(numberToDecimal(1e-9), '0.000000001', 'a YAML 1e-9 is the decimal written')
  const steps = offer(numberToDecimal(3.000000001)!, numberToDecimal(1e-9)!)
  const c = chatCost(steps, { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })
  t.equal(formatUsd(c.input), '0.000021000000007', '7 × 3.000000001 / 1M')
  t.equal(formatUsd(c.output), '0.000000000000003')
  t.equal(formatUsd(c.input + c.output), '0.00002100000001')
  t.equal(perTokenPrice('0.0000000000001'), null, 'a price finer than 1 atto-USD per token is refused, not rounded')
  const sum = Array.from({ length: 1000 }, () => chatCost(cheap, { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 })).reduce((s, x) => s + x.input + x.output, 0n)
  t.equal(formatUsd(sum), '0.000070000001', '1000 × (0.07 + 1e-9) / 1M adds up exactly')
})

t.test('formatUsd writes every amount as the plain decimal that parseUsd reads back exactly', async (t) => {
  const cases: [bigint, string][] = [
    [0n, '0'],
    [1n, '0.000000000000000001'],
    [10n ** 18n, '1'],
    [10n ** 18n + 5n * 10n ** 17n, '1.5'],
    [-(10n ** 16n), '-0.01'],
    [123_456_789_000_000_000_000n, '123.456789'],
    [999_999_999_999_999_999n, '0.999999999999999999'],
    [5n * 10n ** 17n, '0.5'],
    [21_000_000_000_000n, '0.000021'],
  ]
  for (const [atto, text] of cases) t.equal(formatUsd(atto), text, `${atto}`)
  // Random amounts across the whole range a ledger holds, signs included.
  let seed = 7n
  const wrong: string[] = []
  for (let i = 0; i < 2000; i++) {
    seed = (seed * 6364136223846793005n + 1442695040888963407n) % 2n ** 64n
    const atto = (seed % 10n ** BigInt(1 + (i % 30))) * (i % 3 === 0 ? -1n : 1n)
    const text = formatUsd(atto)
    const back = parseUsd(text.startsWith('-') ? text.slice(1) : text)
    const exact = back !== null && (text.startsWith('-') ? -back : back) === atto
    // No exponent, no trailing point, no trailing zero after the point.
    if (!exact || /e|\.$|\.\d*0$/.test(text)) wrong.push(`${atto} → ${text}`)
  }
  t.same(wrong, [], '2,000 random amounts')
})

t.test('the worst case: body bytes as prompt tokens plus the most output the request can produce', async (t) => {
  const o = offer('1', '2', { maxCompletionTokens: 100, contextLength: 1000 })
  t.equal(maxOutputTokens(o, 7), 7, 'max_tokens when sent')
  t.equal(maxOutputTokens(o, -1), 100, 'else the offer output cap')
  t.equal(maxOutputTokens(offer('1', '2', { contextLength: 1000 }), -1), 1000, 'else the context length')
  t.equal(maxOutputTokens(offer('1', '2'), -1), DEFAULT_MAX_OUTPUT_TOKENS, 'else the default')
  t.equal(formatUsd(chatWorstCase(o, 50, 7)), '0.000064', '50 × 1 / 1M + 7 × 2 / 1M')
})

t.test('reserve, settle, durable: the charge is in the store when done runs, exactly once', async (t) => {
  const { store, ledger, keyId } = await books(t)
  const p = principal(keyId)
  t.not(ledger.prepare(p), null, 'cold: the books are read once')
  await ledger.prepare(p)
  t.equal(ledger.prepare(p), null, 'warm: admission is synchronous')
  const r = ledger.open(p, 'req_1')
  t.equal(r.reserve(usd('4')), null)
  t.equal(ledger.reserved(A), usd('4'))
  t.equal(ledger.available(A), usd('6'))
  t.equal(r.reserve(usd('1.5')), null, 'failover re-prices')
  t.equal(ledger.reserved(A), usd('1.5'), 'the old hold is replaced, not added to')
  const { billed, err } = await settle(r, bill(usd('0.000000000000000003'), usd('1')))
  t.equal(err, null)
  t.strictSame(billed, { input: 3n, output: usd('1'), capped: false })
  t.equal(ledger.reserved(A), 0n)
  t.equal((await store.ledger.totals(A)).spent, usd('1.000000000000000003'), 'durable before done')
  t.equal(ledger.available(A), usd('8.999999999999999997'))
  t.equal(ledger.used(keyId, 'never'), usd('1.000000000000000003'))
  t.throws(() => r.settle(bill(1n), () => {}), 'a reservation settles once')
  r.release()
  t.equal(ledger.reserved(A), 0n, 'release after settle changes nothing')
  const journal = await store.ledger.journal(A)
  t.strictSame(journal.map((e) => [e.kind, e.requestId]), [['deposit', null], ['charge', 'req_1']])
})

t.test('release gives the hold back; a refused re-price keeps nothing held', async (t) => {
  const { ledger, keyId } = await books(t, '10')
  const p = principal(keyId)
  await ledger.prepare(p)
  const r = ledger.open(p, 'req_r')
  t.equal(r.reserve(usd('3')), null)
  r.release()
  t.equal(ledger.reserved(A), 0n)
  const q = ledger.open(p, 'req_q')
  t.equal(q.reserve(usd('3')), null)
  const refused = q.reserve(usd('10.000000000000000001'))
  t.type(refused, RouterError)
  t.equal(refused?.code, 'insufficient_balance')
  t.equal(ledger.reserved(A), 0n, 'nothing stays held after a refused re-price')
})

t.test('a provider reporting more than the request could produce is billed the reservation', async (t) => {
  const { store, ledger, keyId } = await books(t)
  const p = principal(keyId)
  await ledger.prepare(p)
  const r = ledger.open(p, 'req_cap')
  r.reserve(usd('0.5'))
  const { billed } = await settle(r, bill(usd('0.4'), usd('0.3')))
  t.strictSame(billed, { input: usd('0.4'), output: usd('0.1'), capped: true })
  t.equal((await store.ledger.totals(A)).spent, usd('0.5'))
})

t.test('lower: a hold falls in place (never rises), its room goes to a waiter at once, and settle caps at it', async (t) => {
  const { ledger, keyId, store } = await books(t, '10', '1', 'never', Date.UTC(2025, 0, 15, 12), { budgetWaitMs: 60_000 })
  const p = principal(keyId, '1')
  await ledger.prepare(p)
  const r = ledger.open(p, 'req_low')
  t.equal(r.reserve(usd('0.9')), null)
  // Blocked only by r's hold: it waits.
  const waiting = ledger.open(p, 'req_wait').hold(usd('0.5'))
  t.type(waiting, Promise)
  r.lower(usd('1'))
  t.equal(r.amount, usd('0.9'), 'a higher amount is no lowering')
  r.lower(usd('0.3'))
  t.equal(r.amount, usd('0.3'))
  t.equal(await waiting, null, 'the room freed went to the waiter')
  t.equal(ledger.reserved(A), usd('0.8'), '0.3 + 0.5 held')
  const { billed } = await settle(r, bill(usd('0.6')))
  t.strictSame(billed, { input: usd('0.3'), output: 0n, capped: true }, 'billed at most the lowered hold')
  t.equal((await store.ledger.totals(A)).spent, usd('0.3'))
  r.lower(0n)
  t.equal(ledger.reserved(A), usd('0.5'), 'a settled reservation is not touched')
})

t.test('concurrent holds never push used past the credit limit nor the balance below zero', async (t) => {
  const { store, ledger, keyId } = await books(t, '1000', '1')
  const p = principal(keyId, '1')
  await ledger.prepare(p)
  const holds = Array.from({ length: 500 }, (_, i) => ledger.open(p, `req_${i}`))
  const outcomes = holds.map((h) => h.reserve(usd('0.1')))
  t.equal(outcomes.filter((o) => o === null).length, 10, 'exactly the 10 that fit')
  t.ok(outcomes.every((o) => o === null || o.code === 'credit_limit_exceeded'))
  await Promise.all(holds.filter((_, i) => outcomes[i] === null).map((h) => settle(h, bill(usd('0.1')))))
  t.equal(ledger.used(keyId, 'never'), usd('1'))
  t.equal((await store.ledger.spendByKey(A, null)).get(keyId), usd('1'))
  t.equal(ledger.open(p, 'req_more').reserve(1n)?.code, 'credit_limit_exceeded', 'the limit is reached')

  const poor = await books(t, '1')
  const pp = principal(poor.keyId)
  await poor.ledger.prepare(pp)
  const many = Array.from({ length: 500 }, (_, i) => poor.ledger.open(pp, `req_${i}`))
  const got = many.map((h) => h.reserve(usd('0.1')))
  t.equal(got.filter((o) => o === null).length, 10)
  t.ok(got.every((o) => o === null || o.code === 'insufficient_balance'))
  await Promise.all(many.filter((_, i) => got[i] === null).map((h) => settle(h, bill(usd('0.1')))))
  t.equal(poor.ledger.available(pp.accountId), 0n, 'the balance reaches zero, never below')
})

t.test('reset periods roll over at 00:00 UTC; weeks start on Monday, months on the 1st', async (t) => {
  // 2025-01-15 is a Wednesday.
  t.strictSame(periodBounds('daily', Date.UTC(2025, 0, 15, 23, 59, 59, 999)), {
    start: Date.UTC(2025, 0, 15),
    end: Date.UTC(2025, 0, 16),
    startDay: '2025-01-15',
  })
  t.equal(periodBounds('weekly', Date.UTC(2025, 0, 15, 12)).startDay, '2025-01-13', 'the Monday before')
  t.equal(periodBounds('weekly', Date.UTC(2025, 0, 19, 23, 59)).startDay, '2025-01-13', 'Sunday is still that week')
  t.equal(periodBounds('weekly', Date.UTC(2025, 0, 20)).startDay, '2025-01-20', 'Monday 00:00 starts the next')
  t.equal(periodBounds('monthly', Date.UTC(2024, 1, 29, 8)).end, Date.UTC(2024, 2, 1), 'a leap February ends on March 1st')
  t.equal(periodBounds('monthly', Date.UTC(2024, 11, 31, 23)).end, Date.UTC(2025, 0, 1), 'December rolls into the next year')
  t.strictSame(periodBounds('never', 0), { start: -Infinity, end: Infinity, startDay: null })

  const cases: [ResetPeriod, number, number][] = [
    ['daily', Date.UTC(2025, 0, 15, 23, 59, 59, 999), Date.UTC(2025, 0, 16)],
    ['weekly', Date.UTC(2025, 0, 19, 23, 59, 59, 999), Date.UTC(2025, 0, 20)],
    ['monthly', Date.UTC(2025, 0, 31, 23, 59, 59, 999), Date.UTC(2025, 1, 1)],
  ]
  for (const [period, before, boundary] of cases) {
    const { ledger, keyId, clock, store } = await books(t, '100', '1', period, before)
    const p = principal(keyId, '1', period)
    await ledger.prepare(p)
    const r = ledger.open(p, `req_${period}_1`)
    t.equal(r.reserve(usd('1')), null)
    await settle(r, bill(usd('1')))
    t.equal(ledger.used(keyId, period), usd('1'), `${period}: used in the period`)
    t.equal(ledger.open(p, `req_${period}_2`).reserve(1n)?.code, 'credit_limit_exceeded', `${period}: the limit holds until the boundary`)
    clock.now = boundary
    t.equal(ledger.used(keyId, period), 0n, `${period}: used resets at the boundary`)
    const after = ledger.open(p, `req_${period}_3`)
    t.equal(after.reserve(usd('1')), null, `${period}: the new period has the whole limit`)
    await settle(after, bill(usd('0.25')))
    // A ledger rebuilt from the store (a restart) agrees: the store rolls up by the same UTC days.
    const fresh = new Ledger(store.ledger, new ChargeWriter(store.ledger), { now: () => clock.now })
    await fresh.prepare(p)
    t.equal(fresh.used(keyId, period), usd('0.25'), `${period}: the store agrees after the boundary`)
    const days = await store.ledger.usage(A, { fromDay: '2025-01-01', toDay: '2025-12-31' })
    t.strictSame(days.map((r) => r.cost), [usd('1'), usd('0.25')], `${period}: each charge on the UTC day it settled`)
  }
})

t.test('a key whose reset period changed is re-read for the new period', async (t) => {
  const now = Date.UTC(2025, 0, 15, 12)
  const { ledger, keyId, store } = await books(t, '100', null, 'daily', now)
  await store.ledger.recordCharge({ requestId: 'old', accountId: A, keyId, model: 'm', provider: 'p', at: now - 3 * 86_400_000, promptTokens: 0, completionTokens: 0, images: 0, audioMs: 0, cost: usd('2') })
  await ledger.prepare(principal(keyId, null, 'daily'))
  t.equal(ledger.used(keyId, 'daily'), 0n)
  t.not(ledger.prepare(principal(keyId, null, 'never')), null)
  await ledger.prepare(principal(keyId, null, 'never'))
  t.equal(ledger.used(keyId, 'never'), usd('2'))
})

t.test('a commit that fails ends the request with an error and takes the charge back out of the books', async (t) => {
  const { store, writer, ledger, keyId } = await books(t)
  const p = principal(keyId)
  await ledger.prepare(p)
  const original = store.ledger.recordCharges.bind(store.ledger)
  store.ledger.recordCharges = async () => {
    throw new Error('disk I/O error')
  }
  const r = ledger.open(p, 'req_fail')
  r.reserve(usd('1'))
  const { err } = await settle(r, bill(usd('1')))
  t.equal(err?.code, 'server_error')
  t.equal(ledger.available(A), usd('10'), 'the failed charge is no longer counted')
  t.equal(ledger.used(keyId, 'never'), 0n)
  store.ledger.recordCharges = original
  const ok = ledger.open(p, 'req_ok')
  ok.reserve(usd('1'))
  t.equal((await settle(ok, bill(usd('1')))).err, null)
  t.equal((await store.ledger.totals(A)).spent, usd('1'))
  t.equal(writer.queued, 0)
})

t.test('books rebuilt from the store: deposits − charges, nothing held, pending charges counted once', async (t) => {
  const { store, ledger, keyId, writer } = await books(t)
  const p = principal(keyId)
  await ledger.prepare(p)
  const r = ledger.open(p, 'req_a')
  r.reserve(usd('2'))
  const held = ledger.open(p, 'req_held')
  held.reserve(usd('3'))
  // Settled, not committed yet (the flush waits for setImmediate): a refresh must count it exactly once.
  const done = settle(r, bill(usd('1')))
  t.equal(writer.queued, 1)
  await store.ledger.addFunds(A, 'deposit', usd('5'), 'from the CLI', Date.now())
  await ledger.refresh()
  await done
  t.equal(ledger.available(A), usd('11'), '10 + 5 − 1 spent − 3 held')
  t.equal(ledger.used(keyId, 'never'), usd('1'))

  const restarted = new Ledger(store.ledger, new ChargeWriter(store.ledger))
  await restarted.prepare(p)
  t.equal(restarted.reserved(A), 0n, 'a restart holds nothing')
  t.equal(restarted.available(A), usd('14'), 'deposits − charges')
  const journal = await store.ledger.journal(A)
  const balance = journal.reduce((s, e) => (e.kind === 'charge' ? s - e.amount : s + e.amount), 0n)
  t.equal(balance, usd('14'), 'the journal balances')
})

t.test('refreshAccount re-reads that account book alone, keeps what is held, and skips books not in memory', async (t) => {
  const { store, ledger, keyId } = await books(t)
  const B = '0x' + 'b'.repeat(40)
  const C = '0x' + 'c'.repeat(40)
  const ofB: Principal = { ...principal(null), accountId: B }
  await store.ledger.addFunds(B, 'deposit', usd('3'), 'test', Date.now())
  await ledger.prepare(principal(keyId))
  await ledger.prepare(ofB)
  const held = ledger.open(principal(keyId), 'req_held')
  held.reserve(usd('4'))
  // Another process (the operator CLI) deposits to both accounts; only A's change is applied here.
  await store.ledger.addFunds(A, 'deposit', usd('5'), 'from the CLI', Date.now())
  await store.ledger.addFunds(B, 'deposit', usd('5'), 'from the CLI', Date.now())
  await ledger.refreshAccount(A)
  t.equal(ledger.available(A), usd('11'), '10 + 5 − 4 held')
  t.equal(ledger.available(B), usd('3'), 'B was not re-read')

  let reads = 0
  const totals = store.ledger.totals.bind(store.ledger)
  store.ledger.totals = (id) => {
    reads++
    return totals(id)
  }
  await ledger.refreshAccount(C)
  t.equal(reads, 0, 'a book not in memory is read when first needed, not now')
  t.equal(ledger.available(C), null)
  await ledger.refreshAccount(B)
  t.equal(reads, 1)
  t.equal(ledger.available(B), usd('8'))
})

t.test('a hold blocked only by holds in flight waits for them; one that can never fit is refused at once', async (t) => {
  const { ledger, keyId } = await books(t, '100', '1', 'never', undefined, { budgetWaitMs: 5_000 })
  const p = principal(keyId, '1')
  await ledger.prepare(p)
  const first = ledger.open(p, 'req_first')
  t.equal(first.hold(usd('0.8')), null, 'the first fits')
  const second = ledger.open(p, 'req_second')
  const waiting = second.hold(usd('0.5'))
  t.type(waiting, Promise, 'the second waits: 0.8 is only held, not spent')
  t.equal(ledger.waiting, 1)
  const never = ledger.open(p, 'req_never').hold(usd('1.5'))
  t.equal((never as RouterError).code, 'credit_limit_exceeded', 'more than the whole cap is refused at once')
  await settle(first, bill(usd('0.3')))
  t.equal(await waiting, null, 'the settle made room: the waiter holds its amount')
  t.equal(ledger.reserved(p.accountId), usd('0.5'))
  const third = ledger.open(p, 'req_third').hold(usd('0.5'))
  t.type(third, Promise)
  await settle(second, bill(usd('0.5')))
  t.equal(((await third) as RouterError).code, 'credit_limit_exceeded', 'once the spend leaves no room, the waiter gets its 402')
  t.equal(ledger.waiting, 0)
  t.equal(ledger.reserved(p.accountId), 0n)
})

t.test('a waiter gives up after the budget wait with its 402, holding nothing', async (t) => {
  const { ledger, keyId } = await books(t, '100', '1', 'never', undefined, { budgetWaitMs: 50 })
  const p = principal(keyId, '1')
  await ledger.prepare(p)
  const first = ledger.open(p, 'req_first')
  t.equal(first.hold(usd('0.8')), null)
  const waiting = ledger.open(p, 'req_second').hold(usd('0.5'))
  t.equal(((await waiting) as RouterError).code, 'credit_limit_exceeded')
  t.equal(ledger.reserved(p.accountId), usd('0.8'), 'only the first still holds')
  first.release()
})
