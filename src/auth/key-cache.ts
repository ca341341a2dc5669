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
 *
 * Writes by other processes (the operator CLI) arrive as store changes (`applyChange`): a changed key drops
 * that key's entry, a changed account the entries of its keys (they carry its rate limit), found through
 * indexes kept beside the LRU so that a change costs no scan of the cache.
 *
 * A hot key skips even its SHA-256 (issue #10: a third of authentication's CPU): once a presented secret has
 * been verified against a live entry, the secret itself maps to that entry (`knownSecret`). The map holds one
 * secret per live entry and follows the LRU exactly: every way an entry leaves it (revocation, expiry, a store
 * change, eviction, replacement, clear) runs dispose, which drops its secret too, so the fast path can never
 * answer for an entry the slow path would not. The lookup is by the whole presented string: a hit means the
 * two strings are equal, which is what the constant-time compare of the digests establishes on the slow path.
 * It is not constant-time, and need not be: the Map compares only strings whose hashes (seeded per process,
 * unknown to a client) collide, so how long a miss takes tells a client nothing about any stored secret. The
 * secrets are held in memory only while their key is cached, as each request holds its own anyway.
 */
import { LRUCache } from 'lru-cache'
import type { Principal } from './principal.js'
import { digestMatches, digestOf, storedHash } from './keys.js'
import type { StoreChange } from '../store/changes.js'
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
  /**
   * Whether this process may answer from memory now (replicas: store/postgres/replicas.ts, false while it may
   * have missed a change by another replica); while false every lookup reads the store. Absent: always.
   */
  readonly trusted?: () => boolean
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

function keyIdOf(entry: CacheEntry): string {
  return entry.kind === 'api' ? (entry.principal.keyId ?? '') : entry.keyId
}

function accountIdOf(entry: CacheEntry): string {
  return entry.kind === 'api' ? entry.principal.accountId : entry.accountId
}

export class KeyCache {
  readonly #store: Pick<KeyStore, 'findCredential'>
  readonly #defaultRateLimit: number
  readonly #negativeTtlMs: number
  readonly #now: () => number
  readonly #trusted: (() => boolean) | null
  readonly #live: LRUCache<string, CacheEntry>
  /** hash → epoch ms until which it is known to be invalid. */
  readonly #dead: LRUCache<string, number>
  readonly #loading = new Map<string, Promise<CacheEntry | null>>()
  /** Key id → hash of its live entry, and account id → hashes of its live entries: kept by #index / #unindex. */
  readonly #byKey = new Map<string, string>()
  readonly #byAccount = new Map<string, Set<string>>()
  /** Presented secret → its verified live entry, and hash → that secret: kept by rememberSecret / #unindex. */
  readonly #bySecret = new Map<string, CacheEntry>()
  readonly #secretOf = new Map<string, string>()
  /** Bumped by every invalidation: a load that started before one must not fill the cache. */
  #generation = 0
  /** Store reads made, for tests and the benchmark's no-I/O check. */
  storeReads = 0
  /** Requests answered by knownSecret, for tests. */
  secretHits = 0

  constructor(store: Pick<KeyStore, 'findCredential'>, options: KeyCacheOptions) {
    this.#store = store
    this.#defaultRateLimit = options.defaultRateLimit
    this.#negativeTtlMs = options.negativeTtlMs ?? 5_000
    this.#now = options.now ?? Date.now
    this.#trusted = options.trusted ?? null
    // Every way out of the LRU (eviction, delete, replacement, clear) runs dispose, so the indexes follow it.
    this.#live = new LRUCache({ max: options.max ?? 100_000, dispose: (entry, hash) => this.#unindex(hash, entry) })
    this.#dead = new LRUCache({ max: options.negativeMax ?? 10_000 })
  }

  /** The live entry for a token digest, null when the key is unknown or revoked; a Promise only on a miss. */
  lookup(hash: string): CacheEntry | null | Promise<CacheEntry | null> {
    if (this.#trusted !== null && !this.#trusted()) return this.#loading.get(hash) ?? this.#load(hash)
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

  /** The live entry a presented secret was verified against (rememberSecret), undefined when not known. */
  knownSecret(secret: string): CacheEntry | undefined {
    if (this.#trusted !== null && !this.#trusted()) return undefined
    const entry = this.#bySecret.get(secret)
    if (entry !== undefined) this.secretHits++
    return entry
  }

  /**
   * Lets `secret`, whose digest `hash` was just verified against `entry`, find it without hashing next time:
   * only while `entry` is the live entry of `hash` (not one replaced or dropped while the store was read).
   */
  rememberSecret(secret: string, hash: string, entry: CacheEntry): void {
    if (this.#live.peek(hash) !== entry || this.#secretOf.has(hash)) return
    this.#bySecret.set(secret, entry)
    this.#secretOf.set(hash, secret)
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
          else {
            this.#live.set(hash, entry)
            this.#index(hash, entry)
          }
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

  /** Drops what a change by another process made stale; funds are the billing ledger's, not cached here. */
  applyChange(change: StoreChange): void {
    switch (change.kind) {
      case 'key':
        return this.forgetKey(change.keyId)
      case 'account':
        return this.forgetAccount(change.accountId)
      case 'funds':
        return
      case 'unknown':
        return this.clear()
    }
  }

  /** Forgets a key by its id (changed or revoked elsewhere), and every hash remembered as unknown or revoked. */
  forgetKey(keyId: string): void {
    this.#forgetLoads()
    const hash = this.#byKey.get(keyId)
    if (hash !== undefined) this.#live.delete(hash)
    // A key created elsewhere may be remembered as unknown, and the dead LRU does not know key ids.
    this.#dead.clear()
  }

  /** Forgets every key of an account (its rate limit changed: each of its Principals carries it). */
  forgetAccount(accountId: string): void {
    this.#forgetLoads()
    const hashes = this.#byAccount.get(accountId)
    if (hashes !== undefined) for (const hash of [...hashes]) this.#live.delete(hash)
  }

  /** Forgets everything, e.g. when another process changed the store in ways that can no longer be told. */
  clear(): void {
    this.#forgetLoads()
    this.#live.clear()
    this.#dead.clear()
  }

  /** Store reads under way may have read what just changed: they must neither fill the cache nor be joined. */
  #forgetLoads(): void {
    this.#generation++
    this.#loading.clear()
  }

  #index(hash: string, entry: CacheEntry): void {
    this.#byKey.set(keyIdOf(entry), hash)
    const accountId = accountIdOf(entry)
    const hashes = this.#byAccount.get(accountId)
    if (hashes === undefined) this.#byAccount.set(accountId, new Set([hash]))
    else hashes.add(hash)
  }

  #unindex(hash: string, entry: CacheEntry): void {
    const secret = this.#secretOf.get(hash)
    if (secret !== undefined) {
      this.#secretOf.delete(hash)
      this.#bySecret.delete(secret)
    }
    const keyId = keyIdOf(entry)
    if (this.#byKey.get(keyId) === hash) this.#byKey.delete(keyId)
    const accountId = accountIdOf(entry)
    const hashes = this.#byAccount.get(accountId)
    if (hashes === undefined) return
    hashes.delete(hash)
    if (hashes.size === 0) this.#byAccount.delete(accountId)
  }

  get size(): number {
    return this.#live.size
  }
}
