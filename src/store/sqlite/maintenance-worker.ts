/**
 * The upkeep of a SQLite store (connection.ts), on a thread of its own with its own connection, so that none of
 * it runs on the event loop:
 * - the fold (sqlite/ledger.ts fold()): charges appended to the journal are added into accounts.spent and the
 *   daily roll-up behind their watermark, about a millisecond for 256 charges;
 * - the WAL checkpoint: committed pages copied into the database file and both fsynced, which SQLite's
 *   automatic checkpoint would otherwise do inside whichever commit crossed its threshold.
 * It runs when the connection asks, while the connection holds its charge batches back (so the fold takes the
 * write lock from no one, and the checkpoint can complete and let the next commit restart the WAL), and
 * answers when done.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { SqliteConnection } from './connection.js'
import { SqliteLedger } from './ledger.js'

const { path } = workerData as { path: string }
const conn = new SqliteConnection({ path, synchronous: 'normal', upkeep: false })
const ledger = new SqliteLedger(conn)
parentPort!.on('message', (message: unknown) => {
  if (message === 'upkeep') {
    let ok = true
    try {
      ledger.fold()
    } catch {
      // Busy (another process holds the write lock): the next upkeep, or the next reader, folds.
      ok = false
    }
    try {
      // PASSIVE: never waits for a lock, never blocks a writer.
      conn.db.pragma('wal_checkpoint(PASSIVE)')
    } catch {
      ok = false
    }
    parentPort!.postMessage(ok)
  } else if (message === 'close') {
    conn.close()
    parentPort!.close()
  }
})
