/**
 * The upkeep of a SQLite store (connection.ts), on a thread of its own with its own connection, so that none of
 * it runs on the event loop:
 * - the fold (sqlite/ledger.ts fold()): charges appended to the journal are added into accounts.spent and the
 *   daily roll-up behind their watermark, about a millisecond for 256 charges;
 * - the WAL checkpoint: committed pages copied into the database file and both fsynced, which SQLite's
 *   automatic checkpoint would otherwise do inside whichever commit crossed its threshold;
 * - the WAL's restart. The first write after a checkpoint that copied the whole WAL starts the file over and
 *   fsyncs its new header before writing a frame (SQLite does so at any `synchronous` but OFF: without it a
 *   power cut could replay a stale frame of the old log over the database). Left to the next charge, that fsync
 *   ran inside a commit on the event loop, several times a second under load, and stalled every request for as
 *   long as the disk took (measured: 74 such fsyncs on the loop in 10 s at 2,000 req/s). So the
 *   checkpoint runs first and this thread writes next (the fold, or a no-op update when there is nothing to
 *   fold): the restart and its fsync happen here, and the loop's commits only ever append.
 * It runs when the connection asks, in two parts. The bulk while the loop's charges still commit: the checkpoint
 * of what the WAL holds, and the fold's sums read (planFold, a read: no lock). Then it asks the connection to
 * hold its writes back ('hold'), and once they are ('held'): a second checkpoint copies the few frames written
 * meanwhile, so it sees no new commit and completes, and the fold's sums are written (applyFold) and the WAL
 * restarted, taking the write lock from no one; then it answers ('done'). The writes wait only for that second
 * part: a few frames, a few rows and the fsyncs, not the whole checkpoint and fold.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { SqliteConnection } from './connection.js'
import { FOLD_EVERY, SqliteLedger, type FoldPlan } from './ledger.js'

const { path } = workerData as { path: string }
const conn = new SqliteConnection({ path, synchronous: 'normal', upkeep: false })
// Not reporting: the serving connection logs and counts what this thread's folds quarantine (on 'done').
const ledger = new SqliteLedger(conn, false)
/**
 * A write that changes nothing, to start the WAL over when the fold has nothing to write. SQLite skips a row
 * whose bytes stay the same, so it is a change and its undo in one transaction: the page is dirtied, the
 * commit writes a frame, and the row ends as it was.
 */
const nudge = conn.db.prepare<[number]>('UPDATE ledger_fold SET folded_seq = folded_seq + ? WHERE id = 1')
const restart = conn.db.transaction(() => {
  nudge.run(1)
  nudge.run(-1)
})

interface CheckpointResult {
  busy: number
  log: number
  checkpointed: number
}

/** The sums read while the loop's writes went on, applied once they are held. */
let plan: FoldPlan | null = null

parentPort!.on('message', (message: unknown) => {
  if (message === 'upkeep') {
    // The bulk, while the loop still commits: PASSIVE never waits for a lock nor blocks a writer, and the fold's
    // reads take none.
    try {
      conn.db.pragma('wal_checkpoint(PASSIVE)')
    } catch {
      // Checkpointed again once writes are held.
    }
    try {
      plan = ledger.planFold(FOLD_EVERY * 4)
    } catch {
      plan = null
    }
    parentPort!.postMessage('hold')
  } else if (message === 'held') {
    // Writes are held: copy the few frames written since, so the WAL is copied back whole, and write.
    let whole = false
    try {
      const [result] = conn.db.pragma('wal_checkpoint(PASSIVE)') as CheckpointResult[]
      whole = result !== undefined && result.busy === 0 && result.log > 0 && result.checkpointed === result.log
    } catch {
      // The next upkeep checkpoints again.
    }
    try {
      // The plan's write (or the fold's, or the no-op's) restarts the WAL on this thread. A plan another
      // connection overtook (it folded meanwhile) is dropped; a backlog longer than a plan (another process's
      // charges, or folds that failed) is folded whole here.
      let wrote = plan !== null && ledger.applyFold(plan)
      if (!wrote || ledger.backlogged()) wrote = ledger.fold() > 0 || wrote
      if (!wrote && whole) restart.immediate()
    } catch {
      // Busy (another process holds the write lock): the next upkeep, or the next reader, folds.
    }
    plan = null
    // Done, whatever came of it: the connection lets its writes go on.
    parentPort!.postMessage('done')
  } else if (message === 'close') {
    conn.close()
    parentPort!.close()
  }
})
