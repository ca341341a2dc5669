/**
 * Who funds (DESIGN.md §8: one replica at a time). On PostgreSQL, the replica holding a session-level advisory
 * lock on its own connection: the lock goes with the connection, so a replica that dies or loses the database
 * hands funding to another at its next try. On SQLite the store has one process, which is the funder.
 */
import pg from 'pg'
import { log } from '../log.js'

/** The advisory lock's key: "svc-router settlement funding", fixed so that every replica asks for the same. */
const LOCK_KEY = 0x5376_6346_756e_64n

export interface FundingLock {
  /** Whether this process may send funding transactions now (tries to take the lock when it has not). */
  held(): Promise<boolean>
  close(): Promise<void>
}

export const PROCESS_LOCK: FundingLock = { held: async () => true, close: async () => {} }

export function postgresLock(url: string, connectTimeoutMs: number): FundingLock {
  let client: pg.Client | null = null
  let holding = false
  let closed = false
  return {
    async held() {
      if (closed) return false
      if (holding && client !== null) return true
      try {
        if (client === null) {
          const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: connectTimeoutMs, statement_timeout: connectTimeoutMs })
          c.on('error', () => {
            // The connection (and so the lock) is gone: the next try connects again.
            holding = false
            if (client === c) client = null
            void c.end().catch(() => {})
          })
          await c.connect()
          client = c
        }
        const r = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1::bigint) AS ok', [LOCK_KEY.toString()])
        holding = r.rows[0]?.ok === true
        if (holding) log.info('settlement: this replica funds the sub-accounts (advisory lock taken)')
        return holding
      } catch (err) {
        holding = false
        const c = client
        client = null
        await c?.end().catch(() => {})
        log.warn('settlement: the funding lock could not be checked', { err: String((err as Error)?.message ?? err) })
        return false
      }
    },
    async close() {
      closed = true
      holding = false
      await client?.end().catch(() => {})
      client = null
    },
  }
}
