/** The store and the API keys served from it (DESIGN.md §3, §6). */
import { createKeyAuthenticators, type KeyAuthenticators } from '../auth/authenticate.js'
import { Credentials } from '../auth/credentials.js'
import { KeyCache } from '../auth/key-cache.js'
import { createSourceResolver, type SourceHead } from '../auth/source-ip.js'
import { MAX_TRACKED_SOURCES, SourceLimit } from '../auth/source-limit.js'
import type { Config } from '../config/index.js'
import { bootstrapDevAccount, type DevKeys } from '../operator/bootstrap.js'
import { openStore } from '../store/open.js'
import type { Store } from '../store/store.js'
import { part, type Part } from './part.js'

/** Opened first: a store that cannot be opened (or is newer than this code) stops the start before anything runs. */
export async function storePart(config: Pick<Config, 'store' | 'replicas'>): Promise<Part<Store>> {
  const store = await openStore(config.store, { replica: config.replicas })
  return part(store, () => store.close())
}

export interface Keys {
  readonly auth: KeyAuthenticators
  /** Issues and revokes keys with the cache kept in step. */
  readonly credentials: Credentials
  /** Who a request is from, for the per-source throttles and the management-key audit (auth/source-ip.ts). */
  readonly sourceOf: (head: SourceHead) => string
  /** The dev account's keys when this start bootstrapped one (`dev.bootstrap` on an empty store), else null. */
  readonly devKeys: DevKeys | null
}

export async function keysPart(config: Pick<Config, 'limits' | 'dev' | 'server'>, store: Store): Promise<Part<Keys>> {
  // A replica serves keys from memory only while it cannot have missed another replica's change (replicas.ts).
  const cache = new KeyCache(store.keys, { defaultRateLimit: config.limits.requests_per_minute, trusted: store.replica?.trusted })
  // The operator CLI writes to the same store from another process: drop the cached keys it changed.
  const stopWatchingStore = store.changes.subscribe((change) => cache.applyChange(change))
  const sourceOf = createSourceResolver(config.server.trusted_proxies)
  const perMinute = config.limits.auth_failures_per_minute
  const failures = perMinute === 0 ? undefined : new SourceLimit({ limit: perMinute, windowMs: 60_000, maxSources: MAX_TRACKED_SOURCES })
  const auth = createKeyAuthenticators(cache, store.keys, { sourceOf, ...(failures !== undefined && { failures }) })
  const credentials = new Credentials(store, cache)
  try {
    const devKeys = config.dev.bootstrap ? await bootstrapDevAccount(store, credentials, { wallet: config.dev.wallet, depositUsd: config.dev.deposit_usd }) : null
    return part({ auth, credentials, sourceOf, devKeys }, stopWatchingStore)
  } catch (err) {
    stopWatchingStore()
    throw err
  }
}
