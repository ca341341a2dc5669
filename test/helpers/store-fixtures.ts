/**
 * Fixtures of the store's tests and of bench/e2e/pg-batch.ts: a new key as the store takes it, and a
 * PostgreSQL store opened as one replica of a fleet, registered so that it may hold leases, without its
 * registry's heartbeats and change polls (only the caller's statements go through its pool).
 */
import { randomUUID } from 'node:crypto'
import { hashSecret, newSecret, previewOf } from '../../src/auth/keys.js'
import type { NewApiKey } from '../../src/store/store.js'
import { PgLeaseStore } from '../../src/store/postgres/leases.js'
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/postgres-store.js'

/** A new sk- key of `accountId`: no limit, no period, no restriction, made now, unless `overrides` says. */
export function newApiKey(accountId: string, overrides: Partial<NewApiKey> = {}): NewApiKey {
  const secret = newSecret('sk-')
  return {
    id: randomUUID(),
    accountId,
    hash: hashSecret(secret),
    preview: previewOf(secret),
    name: 'test',
    trustMode: null,
    creditLimit: null,
    resetPeriod: 'never',
    expiresAt: null,
    allowedModels: null,
    allowedProviders: null,
    createdAt: Date.now(),
    ...overrides,
  }
}

/** Replica `id`'s store on `url`, registered by hand, and its lease store; the caller closes the store. */
export async function registeredReplica(url: string, id = 'r1'): Promise<{ store: PostgresStore; leases: PgLeaseStore }> {
  const store = await openPostgresStore({ url, changeHeartbeatMs: 600_000, replicaId: id })
  try {
    await store.connection.query('INSERT INTO replicas (id, heartbeat_at) VALUES ($1, now())', [id])
  } catch (err) {
    await store.close()
    throw err
  }
  return { store, leases: new PgLeaseStore(store.connection, id) }
}
