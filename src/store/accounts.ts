/**
 * Accounts, one per wallet address: the part of the Store (store.ts) that knows who exists and each account's
 * own settings. Funds are the ledger's (ledger.ts), keys the key store's (keys.ts).
 */

export interface AccountRecord {
  /** The wallet address, lower-case 0x + 40 hex (vocabulary/address.ts LOWER_ADDRESS_PATTERN). */
  readonly id: string
  /** Requests per minute for this account; null = the configured default. */
  readonly rateLimit: number | null
  /** Epoch ms. */
  readonly createdAt: number
}

export interface AccountStore {
  /** The account, created (no funds, default rate limit) if it does not exist yet. */
  ensureAccount(wallet: string, now: number): Promise<AccountRecord>
  getAccount(wallet: string): Promise<AccountRecord | null>
  countAccounts(): Promise<number>
  /** Sets (or with null, clears) the account's rate-limit override; null when there is no such account. */
  setAccountRateLimit(wallet: string, limit: number | null): Promise<AccountRecord | null>
}
