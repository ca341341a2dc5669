/**
 * The ChangeFeed on SQLite. Triggers (migration 2) record every change to accounts, keys and funds in
 * `store_changes`, whichever process wrote it; charges record nothing. This handle polls PRAGMA
 * data_version, which moves only when another connection commits, and then reports the rows past its
 * watermark. Rows its own connection wrote are left out: a TEMP trigger, which only this connection runs,
 * notes their seqs in a temp table.
 *
 * The table keeps its newest CHANGES_KEPT rows. A watermark older than that may have missed some, so the
 * listeners get one `unknown` change (drop everything) instead of a partial list.
 *
 * One server serves from a file; the operator CLI writes beside it. The server hears a CLI's revocation at its
 * next poll (every CHANGE_POLL_MS), and the CLI's write waits that long and more before it is answered
 * (settled), so "revoked" is reported once it is in force: no grace period to speak of (spec §3).
 */
import type { Statement } from 'better-sqlite3'
import { log } from '../../log.js'
import { ChangeListeners, toChange, UNKNOWN_CHANGE, type ChangeFeed, type ChangeListener, type ChangeRow } from '../changes.js'
import type { SqliteConnection } from './connection.js'
import { CHANGES_KEPT } from './migrations.js'

interface Statements {
  readonly since: Statement<[number], ChangeRow>
  readonly lastSeq: Statement<[], number | null>
  readonly ownSeqs: Statement<[], number>
  readonly lastOwn: Statement<[], number | null>
  readonly forgetOwn: Statement<[number]>
}

/** How often a server looks for other processes' commits: a PRAGMA read, a few µs. */
export const CHANGE_POLL_MS = 100
/** What a process writing beside the server waits: the server's next poll, wherever in its period, and its listeners. */
const BESIDE_SERVER_SETTLE_MS = 3 * CHANGE_POLL_MS

export class SqliteChanges implements ChangeFeed {
  readonly #conn: SqliteConnection
  readonly #pollMs: number
  readonly #listeners = new ChangeListeners()
  #q: Statements | null = null
  #timer: NodeJS.Timeout | null = null
  /** The last `store_changes` seq reported, or known to be this connection's own. */
  #mark = 0
  #dataVersion = 0

  readonly #besideServer: boolean

  constructor(conn: SqliteConnection, pollMs = CHANGE_POLL_MS, besideServer = false) {
    this.#conn = conn
    this.#pollMs = pollMs
    this.#besideServer = besideServer
  }

  /**
   * Beside a server (the operator CLI): resolves once the server has polled since this handle's writes, at its
   * default interval. Otherwise (the server itself, whose caches hear its own writes at once) resolves now.
   */
  settled(): Promise<void> {
    if (!this.#besideServer || this.#conn.memory) return Promise.resolve()
    return new Promise((resolve) => setTimeout(resolve, BESIDE_SERVER_SETTLE_MS))
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
    const db = this.#conn.db
    db.exec(`
      CREATE TEMP TABLE IF NOT EXISTS own_changes (seq INTEGER PRIMARY KEY);
      CREATE TEMP TRIGGER IF NOT EXISTS own_changes_noted AFTER INSERT ON main.store_changes BEGIN
        INSERT INTO own_changes (seq) VALUES (NEW.seq);
      END;
    `)
    const q = (this.#q ??= {
      since: db.prepare<[number], ChangeRow>('SELECT seq, kind, account_id, key_id FROM store_changes WHERE seq > ? ORDER BY seq'),
      lastSeq: db.prepare<[], number | null>('SELECT max(seq) FROM store_changes').pluck(),
      ownSeqs: db.prepare<[], number>('SELECT seq FROM own_changes').pluck(),
      lastOwn: db.prepare<[], number | null>('SELECT max(seq) FROM own_changes').pluck(),
      forgetOwn: db.prepare<[number]>('DELETE FROM own_changes WHERE seq <= ?'),
    })
    // What is committed now is what the subscriber starts from: report only what comes after.
    this.#dataVersion = db.pragma('data_version', { simple: true }) as number
    this.#mark = q.lastSeq.get() ?? 0
    q.forgetOwn.run(Number.MAX_SAFE_INTEGER)
    this.#timer = setInterval(() => this.#poll(), this.#pollMs)
    this.#timer.unref()
  }

  #stop(): void {
    if (this.#timer === null) return
    clearInterval(this.#timer)
    this.#timer = null
    // Nobody listens: stop noting this connection's own changes until someone does.
    if (!this.#conn.closed) this.#conn.db.exec('DROP TRIGGER IF EXISTS temp.own_changes_noted')
  }

  #poll(): void {
    const q = this.#q
    if (this.#conn.closed || q === null || this.#timer === null) return
    try {
      const version = this.#conn.db.pragma('data_version', { simple: true }) as number
      if (version === this.#dataVersion) {
        // No other connection committed since the last look, so every row past the mark is this connection's
        // own. (One that commits from here on gets a seq above all of those, and moves data_version.)
        const own = q.lastOwn.get() ?? null
        if (own !== null) {
          if (own > this.#mark) this.#mark = own
          q.forgetOwn.run(own)
        }
        return
      }
      this.#dataVersion = version
      const own = new Set(q.ownSeqs.all())
      const rows = q.since.all(this.#mark)
      if (rows.length === 0) return
      const last = rows[rows.length - 1]!.seq
      const missed = this.#mark < last - CHANGES_KEPT
      this.#mark = last
      q.forgetOwn.run(last)
      if (missed) {
        this.#listeners.emit(UNKNOWN_CHANGE)
        return
      }
      // One report per distinct change: fifty updates of one key between two polls are one `key` change.
      const seen = new Set<string>()
      for (const row of rows) {
        if (own.has(row.seq)) continue
        const id = `${row.kind}\u0000${row.account_id}\u0000${row.key_id ?? ''}`
        if (seen.has(id)) continue
        seen.add(id)
        this.#listeners.emit(toChange(row))
      }
    } catch (err) {
      log.warn('store: reading what other processes changed failed; trying again at the next poll', { err: String(err) })
    }
  }
}
