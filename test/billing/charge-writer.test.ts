/**
 * Group commit: charges settled in one turn share one transaction, a full batch goes at once, callbacks run
 * after the commit, a duplicate fails alone, and a failed transaction fails every charge of its batch.
 */
import t from 'tap'
import { ChargeWriter } from '../../src/billing/charge-writer.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { StoreConflictError, type Charge, type JournalEntry } from '../../src/store/store.js'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

const A = '0x' + 'a'.repeat(40)

function charge(requestId: string, cost = 1n): Charge {
  return { requestId, accountId: A, keyId: 'k', model: 'm', provider: 'p', at: Date.UTC(2025, 0, 15), promptTokens: 1, completionTokens: 1, images: 0, audioMs: 0, cost }
}

async function setup(t: Test, maxBatch?: number) {
  const store = await openSqliteStore({ path: ':memory:' })
  await store.ledger.addFunds(A, 'deposit', 10n ** 20n, '', 0)
  const writer = new ChargeWriter(store.ledger, maxBatch === undefined ? {} : { maxBatch })
  t.teardown(async () => {
    await writer.close()
    await store.close()
  })
  return { store, writer }
}

const enqueue = (writer: ChargeWriter, c: Charge): Promise<JournalEntry | Error> => new Promise((resolve) => writer.enqueue(c, resolve))

t.test('charges of one turn share one transaction; done runs after the commit', async (t) => {
  const { store, writer } = await setup(t)
  let calls = 0
  const original = store.ledger.recordCharges.bind(store.ledger)
  store.ledger.recordCharges = (batch) => {
    calls++
    return original(batch)
  }
  const all = Array.from({ length: 100 }, (_, i) => enqueue(writer, charge(`r${i}`)))
  t.equal(calls, 0, 'nothing is written inside the turn')
  t.equal(writer.queued, 100)
  const out = await Promise.all(all)
  t.equal(calls, 1, 'one transaction for the whole turn')
  t.ok(out.every((o) => !(o instanceof Error)))
  t.equal((await store.ledger.totals(A)).spent, 100n)
  t.equal(writer.batches, 1)
  t.equal(writer.written, 100)
})

t.test('a full batch is written at once, the rest in the next one', async (t) => {
  const { store, writer } = await setup(t, 8)
  const sizes: number[] = []
  const original = store.ledger.recordCharges.bind(store.ledger)
  store.ledger.recordCharges = (batch) => {
    sizes.push(batch.length)
    return original(batch)
  }
  const all = Array.from({ length: 20 }, (_, i) => enqueue(writer, charge(`r${i}`)))
  t.strictSame(sizes, [8], 'a full batch went without waiting for the end of the turn')
  await Promise.all(all)
  t.strictSame(sizes, [8, 8, 4])
  t.equal((await store.ledger.journal(A)).length, 21)
})

t.test('a duplicate request id fails alone; a failed transaction fails its whole batch', async (t) => {
  const { store, writer } = await setup(t)
  const [a, dup, b] = await Promise.all([enqueue(writer, charge('x', 5n)), enqueue(writer, charge('x', 7n)), enqueue(writer, charge('y', 1n))])
  t.notOk(a instanceof Error)
  t.type(dup, StoreConflictError)
  t.notOk(b instanceof Error)
  t.equal((await store.ledger.totals(A)).spent, 6n, 'never billed twice')

  store.ledger.recordCharges = async () => {
    throw new Error('disk full')
  }
  const failed = await Promise.all([enqueue(writer, charge('z1')), enqueue(writer, charge('z2'))])
  t.ok(failed.every((o) => o instanceof Error && o.message === 'disk full'))
})

t.test('quiesce holds commits back; pending() lists what is settled and not yet durable', async (t) => {
  const { store, writer } = await setup(t)
  let seen = -1
  const done = writer.quiesce(async () => {
    const later = enqueue(writer, charge('q1', 3n))
    await new Promise((r) => setImmediate(r))
    await new Promise((r) => setImmediate(r))
    seen = [...writer.pending()].length
    t.equal((await store.ledger.totals(A)).spent, 0n, 'nothing committed while quiesced')
    return { later }
  })
  const outcome = await (await done).later
  t.equal(seen, 1)
  t.notOk(outcome instanceof Error)
  t.equal((await store.ledger.totals(A)).spent, 3n)
})

t.test('concurrency 2: a second batch goes while the first commits; each charge learns its own outcome; quiesce waits for both', async (t) => {
  const store = await openSqliteStore({ path: ':memory:' })
  await store.ledger.addFunds(A, 'deposit', 10n ** 20n, '', 0)
  const writer = new ChargeWriter(store.ledger, { concurrency: 2 })
  t.teardown(async () => {
    await writer.close()
    await store.close()
  })
  // The store's answer to each batch is held until the test lets it go (a slow server), then written for real.
  const held: { batch: readonly Charge[]; release: () => void }[] = []
  const original = store.ledger.recordCharges.bind(store.ledger)
  store.ledger.recordCharges = (batch) =>
    new Promise<void>((release) => held.push({ batch, release })).then(() => original(batch))
  const turn = (): Promise<void> => new Promise((r) => setImmediate(r))

  const first = [enqueue(writer, charge('a1', 1n)), enqueue(writer, charge('a2', 2n))]
  await turn()
  const second = [enqueue(writer, charge('b1', 4n)), enqueue(writer, charge('a1', 8n))]
  await turn()
  const third = enqueue(writer, charge('c1', 16n))
  await turn()
  t.strictSame(held.map((h) => h.batch.map((c) => c.requestId)), [['a1', 'a2'], ['b1', 'a1']], 'two batches in flight, the third waits')
  t.strictSame([...writer.pending()].map((c) => c.requestId).sort(), ['a1', 'a1', 'a2', 'b1', 'c1'], 'pending lists both batches and the queue')
  let quiesced = false
  const quiet = writer.quiesce(async () => {
    quiesced = true
    return [...writer.pending()].map((c) => c.requestId)
  })
  // The second batch answers first: its a1 is the one billed, and the first batch's a1 is refused.
  held[1]!.release()
  const [b1, a1later] = await Promise.all(second)
  t.notOk(b1 instanceof Error, 'b1 committed')
  t.notOk(a1later instanceof Error, 'the a1 committed first is billed')
  t.notOk(quiesced, 'quiesce waits while a batch is still in flight')
  held[0]!.release()
  const [a1, a2] = await Promise.all(first)
  t.ok(a1 instanceof StoreConflictError, 'the other a1 is refused as billed already')
  t.notOk(a2 instanceof Error)
  t.strictSame(await quiet, ['c1'], 'quiesced once nothing was in flight: only the queue is pending')
  await turn()
  t.equal(held.length, 3, 'the third batch went after quiesce')
  held[2]!.release()
  t.notOk((await third) instanceof Error)
  t.equal((await store.ledger.totals(A)).spent, 2n + 4n + 8n + 16n, 'each request billed once')
  t.equal(writer.queued, 0)
})

t.test('concurrency must be a whole number of batches', async (t) => {
  const store = await openSqliteStore({ path: ':memory:' })
  t.teardown(() => store.close())
  t.throws(() => new ChargeWriter(store.ledger, { concurrency: 0 }), RangeError)
  t.throws(() => new ChargeWriter(store.ledger, { concurrency: 1.5 }), RangeError)
})
