/**
 * Applies the numbered migrations a database has not seen yet, each in its own transaction, and records them in
 * `schema_migrations`. Safe when N processes start at once on one database (replicas started together): the
 * whole check-and-apply runs under a session advisory lock, so one process migrates and the others, once they
 * get the lock, find the schema current and apply nothing (pg-boss and graphile-worker do the same).
 */
import type pg from 'pg'
import { SchemaTooNewError } from '../store.js'
import { LOCK_CLASS, MIGRATION_LOCK, MIGRATIONS, type Migration } from './migrations.js'

export { SchemaTooNewError }

export const MIGRATE_SQL = {
  lock: `SELECT pg_advisory_lock(${LOCK_CLASS}, ${MIGRATION_LOCK})`,
  unlock: `SELECT pg_advisory_unlock(${LOCK_CLASS}, ${MIGRATION_LOCK})`,
  table: `CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  bigint NOT NULL
  )`,
  version: 'SELECT coalesce(max(version), 0) AS v FROM schema_migrations',
  record: 'INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)',
} as const

export async function schemaVersion(client: pg.ClientBase): Promise<number> {
  const { rows } = await client.query<{ v: number }>(MIGRATE_SQL.version)
  return rows[0]!.v
}

/**
 * Brings the database `client` is connected to to the latest version of `migrations`; returns the versions
 * applied now. Throws SchemaTooNewError, applying nothing, when the database is newer than this code.
 */
export async function migrate(client: pg.ClientBase, now: number, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1]!.version
  await client.query(MIGRATE_SQL.lock)
  try {
    await client.query(MIGRATE_SQL.table)
    const current = await schemaVersion(client)
    if (current > latest) {
      throw new SchemaTooNewError(`database schema is at version ${current}, newer than this svc-router knows (${latest}); upgrade svc-router`)
    }
    const applied: number[] = []
    for (const m of migrations) {
      if (m.version <= current) continue
      await client.query('BEGIN')
      try {
        await client.query(m.sql)
        await client.query(MIGRATE_SQL.record, [m.version, m.name, now])
        await client.query('COMMIT')
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {})
        throw err
      }
      applied.push(m.version)
    }
    return applied
  } finally {
    // On a broken connection this fails too; the lock then ends with the session.
    await client.query(MIGRATE_SQL.unlock).catch(() => {})
  }
}
