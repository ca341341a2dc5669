/**
 * 'full' durability without an fsync on the event loop (store/sqlite/connection.ts durable()): every write's
 * promise resolves after an fdatasync of the WAL on libuv's thread pool, concurrent writes share flushes, the
 * event loop keeps turning while a flush runs, and 'normal' never flushes. The database lives on the test's
 * own directory (a real disk), not on a tmpfs where a flush costs nothing.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { Database } from '../../src/store/sqlite/driver.js'
import type { Worker } from 'node:worker_threads'
import t from 'tap'
import { SqliteLedger } from '../../src/store/sqlite/ledger.js'
import { SqliteConnection } from '../../src/store/sqlite/connection.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import type { Charge } from '../../src/store/store.js'

const ACCOUNT = '0x' + 'a'.repeat(40)

function charge(i: number): Charge {
  return { requestId: `r-${i}`, accountId: ACCOUNT, keyId: 'k', model: 'm', provider: '0x' + 'b'.repeat(40), at: Date.now(), promptTokens: 1, completionTokens: 1, images: 0, audioMs: 0, cost: 10n }
}

/** Closes `conn` after its upkeep thread: one still starting would create the file again once it is removed. */
async function shut(conn: SqliteConnection): Promise<void> {
  await conn.stopUpkeep()
  conn.close()
}

/** A funded account with key 'k' on a fresh file database; `upkeepEvery` huge: only the upkeeps a test asks for. */
async function open(t: { testdir(): string; teardown(fn: () => void): void }, synchronous: 'full' | 'normal', upkeepEvery?: number) {
  let conn: SqliteConnection | null = null
  // Registered before t.testdir(): the connection and its upkeep thread are closed before the directory is removed
  // (test/helpers/stack.ts).
  t.teardown(() => (conn === null ? undefined : shut(conn)))
  const path = join(t.testdir(), 'svc.db')
  conn = new SqliteConnection({ path, synchronous, upkeepEvery })
  const ledger = new SqliteLedger(conn)
  await ledger.addFunds(ACCOUNT, 'deposit', 10n ** 20n, 'test', Date.now())
  // The key row the charges point at.
  conn.db.prepare("INSERT INTO api_keys (id, account_id, hash, preview, name, reset_period, created_at) VALUES ('k', ?, ?, 'sk-x', 'k', 'never', 0)").run(ACCOUNT, 'h'.repeat(43))
  return { conn, ledger, path }
}

/**
 * Appends `n` charges of 7 straight into the journal, as another process would, past anything that folds them:
 * 20,000 take the fold some tens of milliseconds.
 */
function appendUnfolded(conn: SqliteConnection, prefix: string, n: number): void {
  const append = conn.db.prepare(`INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at, model, provider,
    prompt_tokens, completion_tokens, images, audio_ms) VALUES (?, 'charge', '7', ?, 'k', '', ?, 'm', 'p', 1, 1, 0, 0)`)
  conn.db.transaction(() => {
    for (let i = 0; i < n; i++) append.run(ACCOUNT, `${prefix}-${i}`, Date.now())
  })()
}

/** How many times the event loop turns while `work` is awaited. */
async function turnsDuring<T>(work: () => Promise<T>): Promise<{ turns: number; value: T }> {
  let turns = 0
  let running = true
  const spin = (): void => {
    if (!running) return
    turns++
    setImmediate(spin)
  }
  setImmediate(spin)
  try {
    return { value: await work(), turns }
  } finally {
    running = false
  }
}

t.test("'full': each write resolves after a WAL flush, and concurrent writes share flushes", async (t) => {
  const { conn, ledger } = await open(t, 'full')
  const before = conn.flushes
  await ledger.recordCharges([charge(0)])
  t.equal(conn.flushes, before + 1, 'one flush for one write')
  const writes = Array.from({ length: 20 }, (_, i) => ledger.recordCharges([charge(i + 1)]))
  const outcomes = await Promise.all(writes)
  t.ok(outcomes.every((o) => !(o[0] instanceof Error)), 'every charge written')
  const used = conn.flushes - before - 1
  t.ok(used >= 1 && used <= 2, `20 concurrent writes shared ${used} flush(es): the one under way and one after it`)
})

t.test("'full': the event loop keeps serving while a flush runs", async (t) => {
  const { ledger } = await open(t, 'full')
  const { turns } = await turnsDuring(async () => {
    for (let i = 0; i < 20; i++) await ledger.recordCharges([charge(100 + i)])
  })
  t.ok(turns >= 20, `the loop turned ${turns} times during 20 flushed writes`)
})

t.test("'normal': writes resolve without a flush", async (t) => {
  const { conn, ledger } = await open(t, 'normal')
  for (let i = 0; i < 5; i++) await ledger.recordCharges([charge(200 + i)])
  t.equal(conn.flushes, 0)
})

t.test('the WAL is checkpointed off the event loop and stays bounded under a steady stream of charges', async (t) => {
  const { conn, ledger, path } = await open(t, 'normal', 50)
  t.equal(conn.db.pragma('wal_autocheckpoint', { simple: true }), 0, 'SQLite never checkpoints inside a commit')
  const wal = () => statSync(path + '-wal').size
  // The thread started: until it runs, writes go on and the WAL grows (by what commits while a thread starts).
  t.ok(conn.upkeep(), 'there is an upkeep thread')
  await conn.upkept()
  // A steady stream, never idle for long: a charge batch every turn of the loop's timers (about a millisecond),
  // as under load. Without the hold the checkpoint would never copy back the whole WAL, which would only grow
  // (about 9 KB a commit: some 13 MB here). With it, the WAL grows only by what commits during one upkeep.
  const salts = new Set<string>()
  for (let i = 0; i < 1500; i++) {
    await ledger.recordCharges([charge(i)])
    salts.add(walSalt(path))
    await new Promise((resolve) => setTimeout(resolve, 0))
  }
  t.ok(salts.size >= 5, `the WAL was started over ${salts.size - 1} times in 1,500 charges`)
  t.ok(wal() < 2 * 1024 * 1024, `and stayed small (${wal()} bytes)`)
  const totals = await ledger.totals(ACCOUNT)
  t.equal(totals.spent, 15_000n, 'every charge is there')
  conn.close()
  const again = new SqliteConnection({ path, synchronous: 'normal' })
  t.teardown(() => shut(again))
  t.equal((await new SqliteLedger(again).totals(ACCOUNT)).spent, 15_000n, 'and after a reopen')
})

/** The WAL header's salts (bytes 16–23): SQLite draws new ones each time it starts the file over. */
function walSalt(path: string): string {
  return readFileSync(path + '-wal').subarray(16, 24).toString('hex')
}

t.test('the WAL is started over on the upkeep thread, so no commit on the event loop writes and fsyncs its header', async (t) => {
  const { conn, ledger, path } = await open(t, 'normal', 1_000_000)
  const upkeep = async (): Promise<void> => {
    t.ok(conn.upkeep(), 'there is an upkeep thread')
    await conn.upkept()
  }
  for (let i = 0; i < 50; i++) await ledger.recordCharges([charge(5_000 + i)])
  let salt = walSalt(path)
  // With charges to fold: the fold's write, after the checkpoint, is the one that starts the WAL over.
  await upkeep()
  t.not(walSalt(path), salt, 'the WAL has a new header before the loop commits again')
  salt = walSalt(path)
  await ledger.recordCharges([charge(5_100)])
  t.equal(walSalt(path), salt, "the loop's next commit appends to it")

  // Nothing to fold (a deposit is not a charge): a no-op write starts it over instead.
  await upkeep()
  salt = walSalt(path)
  await ledger.addFunds(ACCOUNT, 'credit', 5n, 'test', Date.now())
  await upkeep()
  t.not(walSalt(path), salt, 'started over with nothing to fold')
  salt = walSalt(path)
  await ledger.recordCharges([charge(5_101)])
  t.equal(walSalt(path), salt, 'appended to again')

  t.equal((await ledger.totals(ACCOUNT)).spent, 520n, 'every charge folded once')
})

t.test("a reader's fold runs on the upkeep thread: the event loop keeps turning, and the totals are exact", async (t) => {
  const { conn, ledger } = await open(t, 'normal', 1_000_000)
  appendUnfolded(conn, 'other', 20_000)
  const { turns, value: totals } = await turnsDuring(() => ledger.totals(ACCOUNT))
  t.equal(totals.spent, 140_000n, 'every appended charge is in the totals')
  t.ok(turns >= 10, `the loop turned ${turns} times while the totals were folded`)
  const usage = await ledger.usage(ACCOUNT, { fromDay: '2000-01-01', toDay: '2999-12-31' })
  t.equal(usage.reduce((n, row) => n + row.requests, 0), 20_000, 'and in the daily usage, once')

  // A short tail (at most READ_FOLD_MAX charges) is folded by the reader itself: no upkeep per read, which a
  // refresh of many accounts' books would otherwise pay one by one.
  const upkeeps = conn.upkeeps
  appendUnfolded(conn, 'short', 10)
  t.equal((await ledger.totals(ACCOUNT)).spent, 140_070n, 'the short tail is in the totals')
  t.equal((await ledger.spendByKey(ACCOUNT, null)).get('k'), 140_070n, 'and in the spend by key')
  t.equal(conn.upkeeps, upkeeps, 'without an upkeep')
})

t.test('a write made while the upkeep thread folds waits for it without holding the event loop', async (t) => {
  const { conn, ledger } = await open(t, 'normal', 1_000_000)
  appendUnfolded(conn, 'other', 20_000)
  // The thread checkpoints and reads the first sums, then holds writes back and folds the 20,000 charges, holding
  // the write lock for some tens of milliseconds.
  t.ok(conn.upkeep(), 'there is an upkeep thread')
  while (!conn.holdingWrites) await new Promise((resolve) => setImmediate(resolve))
  // Without the wait, this write's transaction slept in SQLite's busy handler, on the loop, until the fold ended.
  const { turns, value: credit } = await turnsDuring(() => ledger.addFunds(ACCOUNT, 'credit', 3n, 'during an upkeep', Date.now()))
  t.equal(credit.amount, 3n, 'the write went through')
  t.ok(turns >= 5, `the loop turned ${turns} times while the write waited`)
  t.equal((await ledger.totals(ACCOUNT)).credited, 3n)
})

t.test('writes go on while the upkeep thread checkpoints and reads the sums; held only for the rest', async (t) => {
  const { conn, ledger, path } = await open(t, 'normal', 1_000_000)
  // A WAL to copy back and charges to sum: the thread's first part has work to do.
  appendUnfolded(conn, 'other', 3_000)
  const salt = walSalt(path)
  t.ok(conn.upkeep(), 'there is an upkeep thread')
  // Until the thread asks for the hold, a write commits at once; once it holds, writes wait for its end.
  let before = 0
  let n = 0
  while (!conn.holdingWrites) {
    await ledger.recordCharges([charge(20_000 + n++)])
    if (!conn.holdingWrites) before++
    await new Promise((resolve) => setImmediate(resolve))
  }
  t.ok(before >= 1, `${before} charge batches committed while the upkeep ran, before it held writes back`)
  const during = ledger.recordCharges([charge(20_000 + n++)])
  await conn.upkept()
  t.notOk(conn.holdingWrites, 'the hold ends with the upkeep')
  await during
  t.not(walSalt(path), salt, 'the WAL was copied back whole and started over, the charges written meanwhile included')
  const totals = await ledger.totals(ACCOUNT)
  t.equal(totals.spent, 3_000n * 7n + BigInt(n) * 10n, 'every charge counted once: those the thread summed and those written meanwhile')
  const usage = await ledger.usage(ACCOUNT, { fromDay: '2000-01-01', toDay: '2999-12-31' })
  t.equal(usage.reduce((sum, row) => sum + row.requests, 0), 3_000 + n, 'and in the daily usage, once')
})

t.test('an upkeep thread that ends mid-upkeep without an error (terminated) releases the writes held for it', async (t) => {
  // The connection's thread, caught as it starts.
  let thread: Worker | undefined
  let online: Promise<void> | undefined
  const onWorker = (worker: Worker): void => {
    if (thread !== undefined) return
    thread = worker
    online = new Promise<void>((resolve) => worker.once('online', () => resolve()))
  }
  process.on('worker', onWorker)
  const { conn, ledger } = await open(t, 'full', 1_000_000).finally(() => process.off('worker', onWorker))
  if (thread === undefined) throw new Error('no upkeep thread started')
  const warnings: string[] = []
  const onWarning = (w: Error): void => void warnings.push(w.message)
  process.on('warning', onWarning)
  t.teardown(() => process.off('warning', onWarning))
  // A long upkeep (the fold of 20,000 charges), ended from outside while it runs: an 'exit' with no 'error'.
  appendUnfolded(conn, 'other', 20_000)
  // Running its own code first: a thread terminated while it still loads may report exit code 0 (seen under load).
  // The connection unrefs its thread, and nothing else keeps this process up meanwhile: without the timer a slow
  // start ended the process with the test unfinished (seen under Node 22).
  const alive = setInterval(() => {}, 1_000)
  t.teardown(() => clearInterval(alive))
  await online
  t.ok(conn.upkeep(), 'an upkeep is under way')
  await new Promise((resolve) => setTimeout(resolve, 5))
  await thread.terminate()
  await new Promise((resolve) => setImmediate(resolve))
  const credit = await ledger.addFunds(ACCOUNT, 'credit', 3n, 'after the thread ended', Date.now())
  t.equal(credit.amount, 3n, 'a write after the loss goes through')
  await ledger.recordCharges([charge(1)])
  t.notOk(conn.upkeep(), 'no upkeep thread any more: the ledger folds inline')
  t.equal(warnings.length, 1, 'the loss is reported once')
  t.match(warnings[0], /SQLite upkeep thread stopped \(exit code 1\)/, 'as the thread terminated')
  const totals = await ledger.totals(ACCOUNT)
  t.equal(totals.spent, 140_010n, 'every charge counted once, whatever the thread had folded')
  t.equal(totals.credited, 3n)
})

t.test("a closed store's files stay still: the upkeep thread's connection closes first, ours last removes the WAL", async (t) => {
  for (let i = 0; i < 5; i++) {
    const path = join(t.testdir(), `svc-${i}.db`)
    // An upkeep after every write: the close comes while the thread checkpoints and folds.
    const store = await openSqliteStore({ path, synchronous: 'full', upkeepEvery: 1 })
    const raw = new Database(path)
    const append = raw.prepare(`INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at, model, provider,
      prompt_tokens, completion_tokens, images, audio_ms) VALUES (?, 'charge', '7', ?, NULL, '', ?, 'm', 'p', 1, 1, 0, 0)`)
    await store.ledger.addFunds(ACCOUNT, 'deposit', 5n, 'test', Date.now())
    raw.transaction(() => {
      for (let j = 0; j < 20_000; j++) append.run(ACCOUNT, `other-${j}`, Date.now())
    })()
    raw.close()
    await store.ledger.addFunds(ACCOUNT, 'credit', 1n, 'test', Date.now())
    await store.close()
    t.same(readdirSync(dirname(path)).filter((f) => f.startsWith(`svc-${i}.db-`)), [], 'no WAL or shared-memory file once close() resolved')
  }
})
