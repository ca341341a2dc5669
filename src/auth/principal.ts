/**
 * Who is calling, as the rest of the pipeline sees it. The auth stage sits right after the front end and
 * yields a Principal (or the error to answer with); everything after it reads only this.
 */
import type { RouterError } from '../errors.js'
import type { RequestHead } from '../server/request-head.js'
import type { ResetPeriod } from '../store/store.js'

export interface Principal {
  readonly accountId: string
  /** The sk- key's id, null for an unauthenticated deployment. */
  readonly keyId: string | null
  /** The key's trust tier rank (0..2), -1 when the key has none. */
  readonly tier: number
  readonly allowedModels: ReadonlySet<string> | null
  readonly allowedProviders: ReadonlySet<string> | null
  /** The account's request limit per minute. */
  readonly rateLimit: number
  /** The key's spending cap in atto-USD, null when it has none (for the billing stage). */
  readonly creditLimit: bigint | null
  /** When the key's spend counted against `creditLimit` starts again. */
  readonly resetPeriod: ResetPeriod
}

/** Synchronous on a cache hit; a Promise only when the store must be read. */
export type Authenticator = (head: RequestHead) => Principal | RouterError | Promise<Principal | RouterError>

/**
 * Every request as one local account with the configured limit: no credential checked. The baseline of the
 * auth benchmark (bench/micro/auth.bench.ts); `serve` uses the key authenticator (./authenticate.ts).
 */
export function createOpenAuthenticator(requestsPerMinute: number): Authenticator {
  const local: Principal = {
    accountId: 'local',
    keyId: null,
    tier: -1,
    allowedModels: null,
    allowedProviders: null,
    rateLimit: requestsPerMinute,
    creditLimit: null,
    resetPeriod: 'never',
  }
  return function authenticateOpen(): Principal {
    return local
  }
}
