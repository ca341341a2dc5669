/**
 * The one better-sqlite3 connection that every part of the SQLite store shares (accounts.ts, keys.ts,
 * ledger.ts, changes.ts): opened in WAL mode and migrated before any part prepares a statement. Calls are
 * synchronous underneath and resolve at once; writes that read before they write take the write lock up front
 * (BEGIN IMMEDIATE), so running totals stay exact even with the operator CLI writing to the same file.
 */
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import { migrate } from './migrate.js'

export interface SqliteStoreOptions {
  /** Database file, or ':memory:'. Its directory is created if missing. */
  readonly path: string
  /** 'full' (default): commits are fsynced and survive a power cut; 'normal': they survive a process crash. */
  readonly synchronous?: 'full' | 'normal'
  /** How often to look for commits by other processes (PRAGMA data_version). */
  readonly changePollMs?: number
  readonly now?: () => number
}

export class SqliteConnection {
  readonly db: Database.Database
  readonly now: () => number
  /** An in-memory database: no other connection can ever see or change it. */
  readonly memory: boolean
  #closed = false

  constructor(options: SqliteStoreOptions) {
    this.now = options.now ?? Date.now
    this.memory = options.path === ':memory:' || options.path === ''
    if (!this.memory) mkdirSync(dirname(options.path), { recursive: true })
    this.db = new Database(options.path)
    try {
      this.db.pragma('journal_mode = WAL')
      // FULL: a revoke or a charge that was acknowledged survives a power cut, not only a process crash.
      // NORMAL (opt-in): in WAL mode a commit still survives the process dying, without waiting for an fsync.
      this.db.pragma(options.synchronous === 'normal' ? 'synchronous = NORMAL' : 'synchronous = FULL')
      this.db.pragma('foreign_keys = ON')
      this.db.pragma('busy_timeout = 5000')
      migrate(this.db, this.now())
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

  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.db.close()
  }
}

export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: string }).code
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
}
