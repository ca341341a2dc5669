/**
 * The ChangeFeed on SQLite. This handle polls PRAGMA data_version, which moves only when another connection
 * commits. What changed is not recorded anywhere yet, so every such commit is reported as `unknown`.
 */
import { ChangeListeners, UNKNOWN_CHANGE, type ChangeFeed, type ChangeListener } from '../changes.js'
import type { SqliteConnection } from './connection.js'

export class SqliteChanges implements ChangeFeed {
  readonly #conn: SqliteConnection
  readonly #pollMs: number
  readonly #listeners = new ChangeListeners()
  #timer: NodeJS.Timeout | null = null
  #dataVersion = 0

  constructor(conn: SqliteConnection, pollMs = 1000) {
    this.#conn = conn
    this.#pollMs = pollMs
  }

  subscribe(listener: ChangeListener): () => void {
    const remove = this.#listeners.add(listener)
    // Only another connection can change the file under us; an in-memory database has none.
    if (this.#timer === null && !this.#conn.memory && !this.#conn.closed) this.#start()
    return () => {
      remove()
      if (this.#listeners.size === 0) this.#stop()
    }
  }

  close(): void {
    this.#stop()
    this.#listeners.clear()
  }

  #start(): void {
    this.#dataVersion = this.#conn.db.pragma('data_version', { simple: true }) as number
    this.#timer = setInterval(() => this.#poll(), this.#pollMs)
    this.#timer.unref()
  }

  #stop(): void {
    if (this.#timer === null) return
    clearInterval(this.#timer)
    this.#timer = null
  }

  #poll(): void {
    if (this.#conn.closed || this.#timer === null) return
    const version = this.#conn.db.pragma('data_version', { simple: true }) as number
    if (version === this.#dataVersion) return
    this.#dataVersion = version
    this.#listeners.emit(UNKNOWN_CHANGE)
  }
}
