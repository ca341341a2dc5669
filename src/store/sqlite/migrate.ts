/**
 * Applies the numbered migrations a database has not seen yet, each in its own transaction, and records them
 * in `schema_migrations`. Safe when two processes start at once: the check and the apply hold the write lock.
 */
import type { Database } from 'better-sqlite3'
import { SchemaTooNewError } from '../store.js'
import { MIGRATIONS, type Migration } from './migrations.js'

export { SchemaTooNewError }

export function schemaVersion(db: Database): number {
  const row = db.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number | null }
  return row.v ?? 0
}

/** Brings `db` to the latest version of `migrations`; returns the versions applied now. */
export function migrate(db: Database, now: number, migrations: readonly Migration[] = MIGRATIONS): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    applied_at  INTEGER NOT NULL
  ) STRICT`)
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1]!.version
  const applied: number[] = []
  const record = db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)')
  const step = db.transaction((m: Migration): boolean => {
    // Re-read under the write lock: another process may have applied it meanwhile.
    if (schemaVersion(db) >= m.version) return false
    db.exec(m.sql)
    record.run(m.version, m.name, now)
    return true
  })
  const current = schemaVersion(db)
  if (current > latest) {
    throw new SchemaTooNewError(`database schema is at version ${current}, newer than this svc-router knows (${latest}); upgrade svc-router`)
  }
  for (const m of migrations) {
    if (m.version <= current) continue
    if (step.immediate(m)) applied.push(m.version)
  }
  return applied
}
