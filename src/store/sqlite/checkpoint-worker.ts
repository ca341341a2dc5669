/**
 * The WAL checkpointer of a SQLite store (connection.ts), on a thread of its own: it copies committed pages
 * from the WAL into the database file and fsyncs both, work that SQLite's automatic checkpoint would otherwise
 * do inside whichever commit crossed its threshold, on the event loop, stalling every request for milliseconds.
 * It runs when the connection asks (while the connection holds its charge batches back, so the checkpoint can
 * complete and the next commit rewinds the WAL to its start) and answers when done.
 */
import { parentPort, workerData } from 'node:worker_threads'
import Database from 'better-sqlite3'

const { path } = workerData as { path: string }
const db = new Database(path, { fileMustExist: true })
db.pragma('synchronous = NORMAL')
parentPort!.on('message', (message: unknown) => {
  if (message === 'checkpoint') {
    let ok = true
    try {
      // PASSIVE: never waits for a lock, never blocks a writer.
      db.pragma('wal_checkpoint(PASSIVE)')
    } catch {
      ok = false
    }
    parentPort!.postMessage(ok)
  } else if (message === 'close') {
    db.close()
    parentPort!.close()
  }
})
