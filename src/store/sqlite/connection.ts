/**
 * The one better-sqlite3 connection that every part of the SQLite store shares (accounts.ts, keys.ts,
 * ledger.ts, changes.ts): opened in WAL mode and migrated before any part prepares a statement. Calls are
 * synchronous underneath and resolve at once; writes that read before they write take the write lock up front
 * (BEGIN IMMEDIATE), so running totals stay exact even with the operator CLI writing to the same file.
 */
import { chmodSync, closeSync, fchmodSync, fdatasync, mkdirSync, openSync } from 'node:fs'
import { dirname } from 'node:path'
import { Worker } from 'node:worker_threads'
import type BetterSqlite3 from 'better-sqlite3'
import { Database } from './driver.js'
import { migrate } from './migrate.js'

/** How long stopUpkeep() waits for the upkeep thread (a fold of a long backlog) before closing anyway. */
const UPKEEP_STOP_MS = 5_000

export interface SqliteStoreOptions {
  /** Database file, or ':memory:'. Its directory is created if missing. */
  readonly path: string
  /**
   * 'full' (default): a write's promise resolves once it is fsynced, so it survives a power cut; 'normal': at
   * once, and it survives a process crash. Either way the transaction itself never waits for a disk flush on
   * the event loop: see durable().
   */
  readonly synchronous?: 'full' | 'normal'
  /** How often to look for commits by other processes (PRAGMA data_version); default CHANGE_POLL_MS. */
  readonly changePollMs?: number
  /**
   * This process writes beside the server that serves from the file (the operator CLI): a key write resolves
   * only once the server, polling every CHANGE_POLL_MS, has heard it (SqliteChanges.settled), so a revocation
   * reported done is in force (spec §3).
   */
  readonly besideServer?: boolean
  /** Write transactions between two upkeeps (fold and WAL checkpoint, see upkeep()). */
  readonly upkeepEvery?: number
  /**
   * Whether the upkeep runs on a thread of its own (default, file databases); false: SQLite checkpoints inside
   * commits and the ledger folds inline (the upkeep thread's own connection, and in-memory databases).
   */
  readonly upkeep?: boolean
  readonly now?: () => number
}

export class SqliteConnection {
  readonly db: BetterSqlite3.Database
  readonly now: () => number
  /** An in-memory database: no other connection can ever see or change it. */
  readonly memory: boolean
  readonly #path: string
  readonly #full: boolean
  #closed = false
  /**
   * The upkeep thread (maintenance-worker.ts); the upkeep it is running (from the ask to its answer); and the
   * part of it that holds this connection's writes back (from the thread's 'hold' to its answer).
   */
  #upkeep: Worker | null = null
  #upkeepRunning: Promise<void> | null = null
  #endUpkeepRunning: (() => void) | null = null
  #upkeeping: Promise<void> | null = null
  #endUpkeep: (() => void) | null = null
  readonly #upkeepEvery: number
  readonly #upkeptListeners: (() => void)[] = []
  #writes = 0
  /** fdatasync calls made by durable() so far (group sync: fewer than the writes that waited for them). */
  flushes = 0
  /** Upkeeps asked of the thread so far. */
  upkeeps = 0
  /** The WAL file, opened once it exists; -1 before. Kept open for the connection's life (see durable). */
  #walFd = -1
  /** The fdatasync under way, and the one queued behind it for commits made meanwhile. */
  #syncing: Promise<void> | null = null
  #again: Promise<void> | null = null
  readonly #syncNext = (): Promise<void> => {
    this.#again = null
    return (this.#syncing = this.#sync())
  }

  constructor(options: SqliteStoreOptions) {
    this.now = options.now ?? Date.now
    this.memory = options.path === ':memory:' || options.path === ''
    this.#path = options.path
    this.#full = options.synchronous !== 'normal'
    this.#upkeepEvery = options.upkeepEvery ?? 500
    if (!this.memory) ownFiles(options.path)
    this.db = new Database(options.path)
    try {
      this.db.pragma('journal_mode = WAL')
      // NORMAL in both modes: in WAL mode a commit is written to the WAL and survives the process dying, with no
      // fsync inside the transaction (SQLite's FULL would fsync there, on the event loop, blocking every other
      // request for the flush). 'full' adds the flush afterwards, off the loop: durable().
      this.db.pragma('synchronous = NORMAL')
      this.db.pragma('foreign_keys = ON')
      this.db.pragma('busy_timeout = 5000')
      migrate(this.db, this.now())
      if (!this.memory && options.upkeep !== false) {
        // The fold and the checkpoints leave the event loop: SQLite's automatic checkpoint would run (and fsync
        // twice) inside the commit that crossed its threshold, stalling every request behind it.
        this.db.pragma('wal_autocheckpoint = 0')
        const worker = new Worker(new URL('./maintenance-worker.js', import.meta.url), {
          workerData: { path: options.path },
          // Not the parent's flags or loaders (a test runner's hooks, --cpu-prof): it runs two statements.
          execArgv: [],
          // A small heap: it folds a few hundred rows at a time (its isolate is most of its ~11 MiB).
          resourceLimits: { maxYoungGenerationSizeMb: 2, maxOldGenerationSizeMb: 32 },
        })
        worker.on('message', (message) => (message === 'hold' ? this.#hold(worker) : this.#upkept()))
        // An error is followed by 'exit'; an exit alone (the thread ended without one) is the same loss.
        worker.on('error', (err) => this.#lostUpkeep(worker, err.message))
        worker.on('exit', (code) => this.#lostUpkeep(worker, `exit code ${code}`))
        // After the listeners (adding a 'message' listener refs the port again): the thread never keeps the
        // process alive.
        worker.unref()
        this.#upkeep = worker
      }
    } catch (err) {
      this.db.close()
      throw err
    }
  }

  get closed(): boolean {
    return this.#closed
  }

  /** Throws once the store is closed: every call starts with it. */
  check(): void {
    if (this.#closed) throw new Error('store is closed')
  }

  /**
   * Once what was committed before this call is on disk: null in 'normal' mode (nothing to wait for), else a
   * promise that resolves after an fdatasync of the WAL file, run on libuv's thread pool so the event loop
   * serves other requests meanwhile. Commits made while a flush is under way share the next one (group sync).
   *
   * Why this is as durable as SQLite's synchronous=FULL: in WAL mode a commit is complete once its frames,
   * commit frame included, are in the WAL file; FULL only adds an fsync of that file at commit, which this is,
   * later. Checkpoints still sync the WAL and then the database file themselves before the WAL is reused.
   * The WAL file is never unlinked while the connection is open, and SQLite keeps no locks on it (they are on
   * the -shm and the database file), so holding a descriptor of our own is safe.
   */
  durable(): Promise<void> | null {
    // Every write ends here: count it towards the next upkeep.
    if (++this.#writes >= this.#upkeepEvery) this.upkeep()
    if (!this.#full || this.memory) return null
    if (this.#again !== null) return this.#again
    if (this.#syncing === null) return (this.#syncing = this.#sync())
    // The flush under way may have started before this commit was written: wait for the next one.
    return (this.#again = this.#syncing.then(this.#syncNext, this.#syncNext))
  }

  /**
   * Where every write on this connection starts: resolves once no upkeep holds writes back (at once when none
   * does). An upkeep runs in two parts (maintenance-worker.ts): the bulk of it (the checkpoint of what is in the
   * WAL, the sums of the fold read) while writes go on, then a short hold, in which the thread checkpoints the
   * few frames written meanwhile, so the WAL is wholly copied back, and writes the fold and the WAL's restart,
   * taking the write lock from no one. Without the hold, under a steady stream of charges, the WAL would never
   * be wholly copied back and would grow without bound, and a write meeting the thread's lock would wait for it
   * in SQLite's busy handler, asleep on the event loop. Only writes wait (a fraction of a millisecond, every few
   * hundred charges); the loop does not. Looks again after each hold: another may have started before this
   * write's turn came.
   */
  async writable(): Promise<void> {
    while (this.#upkeeping !== null) await this.#upkeeping
    this.check()
  }

  /** Whether an upkeep holds writes back now (see writable()). */
  get holdingWrites(): boolean {
    return this.#upkeeping !== null
  }

  /** Resolves once no upkeep runs, whole (a reader that asked for a fold waits for it). */
  async upkept(): Promise<void> {
    while (this.#upkeepRunning !== null) await this.#upkeepRunning
    this.check()
  }

  /**
   * Asks the upkeep thread to fold and checkpoint now (the ledger, every FOLD_EVERY charges). False when there
   * is no upkeep thread: the caller folds itself.
   */
  upkeep(): boolean {
    const worker = this.#upkeep
    if (worker === null || this.#closed) return false
    if (this.#upkeepRunning !== null) return true
    this.#writes = 0
    this.#upkeepRunning = new Promise<void>((resolve) => (this.#endUpkeepRunning = resolve))
    // Charges will wait for its answer: the thread keeps the process alive until it comes.
    worker.ref()
    worker.postMessage('upkeep')
    this.upkeeps++
    return true
  }

  /**
   * The thread has done the bulk of an upkeep and asks for the writes to stop: from here on they wait (writable)
   * until its answer. None is mid-way: a transaction runs whole within one turn of the loop.
   */
  #hold(worker: Worker): void {
    if (this.#upkeep !== worker || this.#closed) return
    // Always answered: a thread left waiting for 'held' would never end its upkeep, nor would any start again.
    this.#upkeeping ??= new Promise<void>((resolve) => (this.#endUpkeep = resolve))
    worker.postMessage('held')
  }

  /**
   * The upkeep thread ended while the connection was open: back to checkpoints in commits and inline folds rather
   * than a WAL that only grows, and the writes held back for its answer go on.
   */
  #lostUpkeep(worker: Worker, reason: string): void {
    if (this.#upkeep !== worker) return
    this.#upkeep = null
    process.emitWarning(`svc-router: the SQLite upkeep thread stopped (${reason}); checkpoints and folds run on the loop again`)
    this.#upkept()
    if (!this.#closed) this.db.pragma('wal_autocheckpoint = 1000')
  }

  /** Calls `listener` each time an upkeep of the thread has ended (the ledger reports what its fold quarantined). */
  onUpkept(listener: () => void): void {
    this.#upkeptListeners.push(listener)
  }

  #upkept(): void {
    for (const listener of this.#upkeptListeners) listener()
    this.#upkeep?.unref()
    const end = this.#endUpkeep
    const endRunning = this.#endUpkeepRunning
    this.#endUpkeep = this.#endUpkeepRunning = null
    this.#upkeeping = this.#upkeepRunning = null
    end?.()
    endRunning?.()
  }

  /** `value` once the write that produced it is durable (see durable()): what a write method returns. */
  async flushed<T>(value: T): Promise<T> {
    const pending = this.durable()
    if (pending !== null) await pending
    return value
  }

  #sync(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.#walFd === -1) {
        try {
          this.#walFd = openSync(this.#path + '-wal', 'r')
        } catch {
          // No WAL file (nothing written since it was checkpointed away): a full checkpoint syncs what exists.
          try {
            this.db.pragma('wal_checkpoint(FULL)')
            this.#syncing = null
            return resolve()
          } catch (err) {
            this.#syncing = null
            return reject(err as Error)
          }
        }
      }
      this.flushes++
      fdatasync(this.#walFd, (err) => {
        this.#syncing = null
        if (err === null) resolve()
        else reject(err)
      })
    })
  }

  /**
   * Ends the upkeep thread and resolves once it has closed its connection (or after UPKEEP_STOP_MS), so that
   * ours, closed next, is the last one: it checkpoints what is left and removes the WAL, and no file of the
   * database changes after that. Writes held for an upkeep under way go on. The store's close() calls it.
   */
  async stopUpkeep(): Promise<void> {
    const worker = this.#dismissUpkeep()
    if (worker === null) return
    let timer: NodeJS.Timeout | undefined
    const exited = new Promise<void>((resolve) => {
      worker.once('exit', () => resolve())
      // A thread that does not end in time is left behind, and never what keeps the process up.
      timer = setTimeout(() => {
        worker.unref()
        resolve()
      }, UPKEEP_STOP_MS)
    })
    // Waited for: the process stays up until the thread has closed its connection.
    worker.ref()
    await exited
    clearTimeout(timer)
  }

  /**
   * Tells the upkeep thread to close its connection and end, and stops listening to it: the connection has no
   * upkeep thread from here on, and writes held for an upkeep under way go on. The thread, or null when none ran.
   */
  #dismissUpkeep(): Worker | null {
    const worker = this.#upkeep
    this.#upkeep = null
    if (worker !== null) {
      worker.removeAllListeners()
      worker.on('error', () => {})
      worker.postMessage('close')
    }
    this.#upkept()
    return worker
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    // Without stopUpkeep() first, the thread closes its own connection whenever it reads 'close': maybe after ours.
    this.#dismissUpkeep()?.unref()
    this.db.close()
    const fd = this.#walFd
    if (fd === -1) return
    this.#walFd = -1
    // After the database (SQLite has checkpointed by now), and never under a flush still running on the pool.
    const pending = this.#again ?? this.#syncing
    if (pending === null) closeSync(fd)
    else pending.then(() => closeSync(fd), () => closeSync(fd))
  }
}

/**
 * The database's files readable by this user alone, whatever the umask (issue 43: they hold key hashes, stored
 * Responses content, the ledger): directories the store creates 0700, and the database file created 0600
 * before SQLite opens it. SQLite creates its -wal, -shm and -journal files with the database file's own mode
 * (fchmod, past the umask), so they follow; a database of before this (0644) is brought to 0600 at open, its
 * companions too. A directory that already existed is left as it is: it may be the operator's.
 */
function ownFiles(path: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
  const fd = openSync(path, 'a', 0o600)
  try {
    fchmodSync(fd, 0o600)
  } catch (err) {
    // Another user's file this one may open (the operator CLI run as another user): theirs to keep.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') throw err
  } finally {
    closeSync(fd)
  }
  for (const suffix of ['-wal', '-shm', '-journal']) {
    try {
      chmodSync(path + suffix, 0o600)
    } catch {
      // Not there (the usual case): SQLite creates it with the database's mode.
    }
  }
}

export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: string }).code
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
}
