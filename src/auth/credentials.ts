/**
 * Issuing, changing and revoking keys: the store write and the cache invalidation in one step, so the very
 * next request sees the change (spec §3: no grace period). Used by the key endpoints, the operator CLI (which
 * has no cache: a running server learns of its writes as store changes, Store.changes) and the test harness.
 */
import { randomUUID } from 'node:crypto'
import type { AccountRecord, ApiKeyPatch, ApiKeyRecord, MgmtKeyPatch, MgmtKeyRecord, Scope, Store } from '../store/store.js'
import type { KeyCache } from './key-cache.js'
import { API_KEY_PREFIX, hashSecret, MGMT_KEY_PREFIX, newSecret, previewOf } from './keys.js'

export type ApiKeySettings = { readonly name: string } & Omit<ApiKeyPatch, 'name'>

/** A new key with its secret: the only moment the secret exists outside the caller's hands. */
export interface Issued<R> {
  readonly record: R
  readonly secret: string
}

type CredentialStore = Pick<Store, 'accounts' | 'keys'> & Partial<Pick<Store, 'changes'>>

export class Credentials {
  readonly #store: CredentialStore
  readonly #cache: KeyCache | null
  readonly #now: () => number
  readonly #revoked = new Set<(keyId: string) => void>()
  readonly #updated = new Set<(key: ApiKeyRecord) => void>()

  constructor(store: CredentialStore, cache: KeyCache | null, now: () => number = Date.now) {
    this.#store = store
    this.#cache = cache
    this.#now = now
  }

  async issueApiKey(accountId: string, settings: ApiKeySettings): Promise<Issued<ApiKeyRecord>> {
    const now = this.#now()
    await this.#store.accounts.ensureAccount(accountId, now)
    const secret = newSecret(API_KEY_PREFIX)
    const hash = hashSecret(secret)
    const record = await this.#store.keys.createApiKey({
      id: randomUUID(),
      accountId,
      hash,
      preview: previewOf(secret),
      name: settings.name,
      trustMode: settings.trustMode ?? null,
      creditLimit: settings.creditLimit ?? null,
      resetPeriod: settings.resetPeriod ?? 'never',
      expiresAt: settings.expiresAt ?? null,
      allowedModels: emptyAsNull(settings.allowedModels),
      allowedProviders: emptyAsNull(settings.allowedProviders),
      createdAt: now,
    })
    // A lookup of this hash may have been cached as unknown (however unlikely for fresh randomness).
    this.#cache?.invalidate(hash)
    await this.#settled()
    return { record, secret }
  }

  async updateApiKey(accountId: string, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null> {
    const record = await this.#store.keys.updateApiKey(accountId, keyId, {
      ...patch,
      ...(patch.allowedModels !== undefined && { allowedModels: emptyAsNull(patch.allowedModels) }),
      ...(patch.allowedProviders !== undefined && { allowedProviders: emptyAsNull(patch.allowedProviders) }),
    })
    if (record !== null) {
      this.#cache?.invalidate(record.hash)
      for (const listener of this.#updated) listener(record)
      await this.#settled()
    }
    return record
  }

  /** Calls `listener` with every API key updated through this object, as stored (the ledger's books and leases of it). */
  onApiKeyUpdated(listener: (key: ApiKeyRecord) => void): () => void {
    this.#updated.add(listener)
    return () => this.#updated.delete(listener)
  }

  async revokeApiKey(accountId: string, keyId: string): Promise<ApiKeyRecord | null> {
    const record = await this.#store.keys.revokeApiKey(accountId, keyId, this.#now())
    if (record !== null) {
      this.#cache?.invalidate(record.hash)
      for (const listener of this.#revoked) listener(record.id)
      await this.#settled()
    }
    return record
  }

  /** Other replicas have applied this write (a revocation or change answered binds their next request too). */
  async #settled(): Promise<void> {
    await this.#store.changes?.settled?.()
  }

  /** Calls `listener` with the id of every API key revoked through this object (the ledger's waiting requests). */
  onApiKeyRevoked(listener: (keyId: string) => void): () => void {
    this.#revoked.add(listener)
    return () => this.#revoked.delete(listener)
  }

  async issueMgmtKey(accountId: string, name: string, scopes: readonly Scope[]): Promise<Issued<MgmtKeyRecord>> {
    const now = this.#now()
    await this.#store.accounts.ensureAccount(accountId, now)
    const secret = newSecret(MGMT_KEY_PREFIX)
    const hash = hashSecret(secret)
    const record = await this.#store.keys.createMgmtKey({
      id: randomUUID(),
      accountId,
      hash,
      preview: previewOf(secret),
      name,
      scopes: [...new Set(scopes)],
      createdAt: now,
    })
    this.#cache?.invalidate(hash)
    await this.#settled()
    return { record, secret }
  }

  /** Renames a management key or changes its scopes; the cached key (with its scopes) is dropped at once. */
  async updateMgmtKey(accountId: string, keyId: string, patch: MgmtKeyPatch): Promise<MgmtKeyRecord | null> {
    const record = await this.#store.keys.updateMgmtKey(accountId, keyId, patch)
    if (record !== null) {
      this.#cache?.invalidate(record.hash)
      await this.#settled()
    }
    return record
  }

  async revokeMgmtKey(keyId: string): Promise<MgmtKeyRecord | null> {
    const record = await this.#store.keys.revokeMgmtKey(keyId, this.#now())
    if (record !== null) {
      this.#cache?.invalidate(record.hash)
      await this.#settled()
    }
    return record
  }

  /** Sets the account's requests-per-minute override (null: back to the default). */
  async setRateLimit(accountId: string, limit: number | null): Promise<AccountRecord | null> {
    const account = await this.#store.accounts.setAccountRateLimit(accountId, limit)
    // Every key of the account carries the limit in its cached Principal.
    this.#cache?.forgetAccount(accountId)
    if (account !== null) await this.#settled()
    return account
  }
}

function emptyAsNull(list: readonly string[] | null | undefined): readonly string[] | null {
  return list === undefined || list === null || list.length === 0 ? null : [...new Set(list)]
}
