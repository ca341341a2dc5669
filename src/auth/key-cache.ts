/**
 * The in-process cache in front of the store (DESIGN.md §1): key hash → what authentication needs, so a warm
 * request does no store I/O. Keyed by the binary digest (keys.ts digestToken), not the stored base64url text,
 * so a hit costs no encoding. Revocation and updates are never served stale: the writer invalidates the hash
 * in the same step as the store write, and a store read that was in flight across an invalidation is not
 * cached (the generation counter), so the next request re-reads.
 *
 * Unknown and revoked hashes are remembered briefly in a separate, smaller LRU: a client retrying a dead key
 * does not reach the store each time, and a flood of junk keys cannot evict the live ones. A key created
 * later works at once, because creating a key invalidates its hash.
 */
import { LRUCache } from 'lru-cache'
import type { Principal } from './principal.js'
import { digestMatches, digestOf, storedHash } from './keys.js'
import type { Credential, KeyStore, Scope } from '../store/keys.js'
import { TIER_RANK } from '../vocabulary/trust.js'

export interface ApiEntry {
  readonly kind: 'api'
  readonly hashBytes: Buffer
  readonly principal: Principal
  /** Epoch ms; Infinity when the key never expires. */
  readonly expiresAt: number
}

export interface MgmtEntry {
  readonly kind: 'mgmt'
  readonly hashBytes: Buffer
  readonly accountId: string
  readonly keyId: string
  readonly scopes: ReadonlySet<Scope>
  /** Epoch ms of the last audit write this process knows of (coalesces `last_used_at` writes). */
  lastAuditAt: number
}

export type CacheEntry = ApiEntry | MgmtEntry

export interface KeyCacheOptions {
  /** Requests per minute for accounts without an override. */
  readonly defaultRateLimit: number
  /** Live keys held. */
  readonly max?: number
  /** Unknown/revoked hashes held, and for how long. */
  readonly negativeMax?: number
  readonly negativeTtlMs?: number
  readonly now?: () => number
}

/** The cache entry of a live credential: sets built once, the Principal shared by every request of the key. */
export function entryOf(cred: Credential, defaultRateLimit: number): CacheEntry {
  const hashBytes = Buffer.from(cred.key.hash, 'base64url')
  if (cred.kind === 'mgmt') {
    return {
      kind: 'mgmt',
      hashBytes,
      accountId: cred.account.id,
      keyId: cred.key.id,
      scopes: new Set(cred.key.scopes),
      lastAuditAt: cred.key.lastUsedAt ?? -Infinity,
    }
  }
  const key = cred.key
  const principal: Principal = Object.freeze({
    accountId: cred.account.id,
    keyId: key.id,
    tier: key.trustMode === null ? -1 : TIER_RANK[key.trustMode],
    allowedModels: key.allowedModels === null ? null : new Set(key.allowedModels),
    allowedProviders: key.allowedProviders === null ? null : new Set(key.allowedProviders),
    rateLimit: cred.account.rateLimit ?? defaultRateLimit,
    creditLimit: key.creditLimit,
    resetPeriod: key.resetPeriod,
  })
  return { kind: 'api', hashBytes, principal, expiresAt: key.expiresAt ?? Infinity }
}

export class KeyCache {
  readonly #store: Pick<KeyStore, 'findCredential'>
  readonly #defaultRateLimit: number
  readonly #negativeTtlMs: number
  readonly #now: () => number
  readonly #live: LRUCache<string, CacheEntry>
  /** hash → epoch ms until which it is known to be invalid. */
  readonly #dead: LRUCache<string, number>
  readonly #loading = new Map<string, Promise<CacheEntry | null>>()
  /** Bumped by every invalidation: a load that started before one must not fill the cache. */
  #generation = 0
  /** Store reads made, for tests and the benchmark's no-I/O check. */
  storeReads = 0

  constructor(store: Pick<KeyStore, 'findCredential'>, options: KeyCacheOptions) {
    this.#store = store
    this.#defaultRateLimit = options.defaultRateLimit
    this.#negativeTtlMs = options.negativeTtlMs ?? 5_000
    this.#now = options.now ?? Date.now
    this.#live = new LRUCache({ max: options.max ?? 100_000 })
    this.#dead = new LRUCache({ max: options.negativeMax ?? 10_000 })
  }

  /** The live entry for a token digest, null when the key is unknown or revoked; a Promise only on a miss. */
  lookup(hash: string): CacheEntry | null | Promise<CacheEntry | null> {
    const hit = this.#live.get(hash)
    if (hit !== undefined) return hit
    const deadUntil = this.#dead.get(hash)
    if (deadUntil !== undefined) {
      if (deadUntil > this.#now()) return null
      this.#dead.delete(hash)
    }
    const pending = this.#loading.get(hash)
    if (pending !== undefined) return pending
    return this.#load(hash)
  }

  #load(hash: string): Promise<CacheEntry | null> {
    const generation = this.#generation
    this.storeReads++
    const load = this.#store.findCredential(storedHash(hash)).then(
      (cred) => {
        if (this.#loading.get(hash) === load) this.#loading.delete(hash)
        // The store found the row by hash; the constant-time compare guards against a lookup that is not exact.
        const entry = cred === null || cred.key.revoked || !digestMatches(Buffer.from(cred.key.hash, 'base64url'), hash)
          ? null
          : entryOf(cred, this.#defaultRateLimit)
        if (generation === this.#generation) {
          if (entry === null) this.#dead.set(hash, this.#now() + this.#negativeTtlMs)
          else this.#live.set(hash, entry)
        }
        return entry
      },
      (err: unknown) => {
        if (this.#loading.get(hash) === load) this.#loading.delete(hash)
        throw err
      },
    )
    this.#loading.set(hash, load)
    return load
  }

  /** Remembers a token digest as invalid (e.g. its key expired) without waiting for a store read. */
  markDead(hash: string): void {
    this.#live.delete(hash)
    this.#dead.set(hash, this.#now() + this.#negativeTtlMs)
  }

  /**
   * Forgets a key at once, by its stored (base64url) hash: call in the same step as any store write to the key
   * (create, update, revoke).
   */
  invalidate(stored: string): void {
    const hash = digestOf(stored)
    this.#generation++
    this.#live.delete(hash)
    this.#dead.delete(hash)
    this.#loading.delete(hash)
  }

  /** Forgets everything, e.g. when another process changed the store. */
  clear(): void {
    this.#generation++
    this.#live.clear()
    this.#dead.clear()
    this.#loading.clear()
  }

  get size(): number {
    return this.#live.size
  }
}
