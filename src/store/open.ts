/** Opens the store the configuration names (DESIGN.md §3 `store:`). */
import type { Config } from '../config/index.js'
import { openSqliteStore } from './sqlite/sqlite-store.js'
import type { Store } from './store.js'

export interface OpenStoreOptions {
  /** PostgreSQL: the replica this process is, recorded as the owner of the jobs it creates. */
  readonly replicaId?: string
  /** PostgreSQL: open as a replica that serves (the registry, budget leases); `serve` passes config.replicas. */
  readonly replica?: Config['replicas']
  /** SQLite: this process writes beside the server (the operator CLI): its key writes wait for the server to hear them. */
  readonly besideServer?: boolean
}

/** The `store:` section; the PostgreSQL keys may be left out for a SQLite store (tests build it by hand). */
export type StoreConfig = Pick<Config['store'], 'kind' | 'path' | 'synchronous'> &
  Partial<Pick<Config['store'], 'url' | 'pool_size' | 'connect_timeout_ms' | 'query_timeout_ms'>>

/** Store kinds by `store.kind`: the one place a kind is picked (the composition root and the operator CLI open here). */
const STORE_KINDS: Readonly<Record<StoreConfig['kind'], (config: StoreConfig, options: OpenStoreOptions) => Promise<Store>>> = {
  sqlite: async (config, options) => openSqliteStore({ path: config.path, synchronous: config.synchronous, besideServer: options.besideServer === true }),
  postgres: async (config, options) => {
    // Loaded only when configured: pg costs a router on SQLite about 15 MB of memory.
    const { openPostgresStore } = await import('./postgres/postgres-store.js')
    return openPostgresStore({
      url: config.url ?? '',
      poolSize: config.pool_size,
      connectTimeoutMs: config.connect_timeout_ms,
      queryTimeoutMs: config.query_timeout_ms,
      replicaId: options.replicaId ?? null,
      ...(options.replica !== undefined && {
        replica: {
          heartbeatMs: options.replica.heartbeat_ms,
          fenceMs: options.replica.fence_ms,
          deadAfterMs: options.replica.dead_after_ms,
        },
      }),
    })
  },
}

export function openStore(config: StoreConfig, options: OpenStoreOptions = {}): Promise<Store> {
  return STORE_KINDS[config.kind](config, options)
}

/** Where the store is, for messages: the SQLite file, or the PostgreSQL URL without its password. */
export function describeStore(config: StoreConfig): string {
  if (config.kind === 'sqlite') return config.path
  if (!URL.canParse(config.url ?? '')) return 'postgres (no url)'
  const url = new URL(config.url!)
  if (url.password !== '') url.password = '***'
  return url.toString()
}
