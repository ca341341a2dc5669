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
