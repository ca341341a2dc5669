/**
 * Authentication of every endpoint (spec §5, §7): `Authorization: Bearer sk-…` for inference, `Bearer mk-…`
 * with a scope for the account and key endpoints. Synchronous on a cache hit (a secret already verified: one
 * Map get and the expiry check; else hash, LRU get, constant-time compare, expiry check), a Promise only when
 * the store must be read. Errors are prebuilt: a flood of bad
 * tokens costs no allocation beyond its hash, and every invalid key gets the very same answer, whatever the
 * reason (unknown, malformed, truncated, revoked, expired).
 *
 * Never logs a token or a hash.
 */
import { RouterError } from '../errors.js'
import { log } from '../log.js'
import type { RequestHead } from '../server/request-head.js'
import type { KeyStore, Scope } from '../store/keys.js'
import type { CacheEntry, KeyCache, MgmtEntry } from './key-cache.js'
import { BAD_TOKEN, digestMatches, digestToken, NO_TOKEN, parseAuthorization } from './keys.js'
import type { Authenticator, Principal } from './principal.js'
import { createSourceResolver } from './source-ip.js'
import { limitErrors, type SourceLimit } from './source-limit.js'
import { THROTTLED, throttled as throttledChannel } from '../telemetry/events.js'

/** Who called an account or key endpoint. */
export interface MgmtPrincipal {
  readonly accountId: string
  readonly keyId: string
  readonly scopes: ReadonlySet<Scope>
}

/** A management key holding `scope`: sync on a cache hit, like Authenticator. */
export type MgmtAuthenticator = (head: RequestHead, scope: Scope) => MgmtPrincipal | RouterError | Promise<MgmtPrincipal | RouterError>

export interface KeyAuthenticators {
  /** sk- keys only: the inference surfaces. */
  readonly inference: Authenticator
  /** mk- keys holding `scope`: the account and key endpoints. */
  readonly management: MgmtAuthenticator
  /** Any valid key, of either kind: for endpoints that then refuse every bearer credential. */
  readonly any: (head: RequestHead) => CacheEntry | RouterError | Promise<CacheEntry | RouterError>
}

export interface KeyAuthOptions {
  /** Minimum gap between two audit writes of one management key (spec §8: 60 s). */
  readonly auditIntervalMs?: number
  readonly now?: () => number
  /**
   * Failed authentications counted per source (limits.auth_failures_per_minute): a source past the limit gets
   * 429 with Retry-After for whatever key it sends, valid or not, until its window ends, and its keys are not
   * looked up meanwhile. Absent: no throttle.
   */
  readonly failures?: SourceLimit
  /**
   * The request's source address (auth/source-ip.ts createSourceResolver: the peer, or the client behind a trusted
   * proxy): what the failures count and the management-key audit records. Default: the socket's peer.
   */
  readonly sourceOf?: (head: RequestHead) => string
}

/** The message of the 429 a source with too many failed authentications gets. */
function throttledMessage(seconds: number): string {
  return `too many failed authentications from this address: try again in ${seconds} s`
}

export const MISSING_AUTHORIZATION = new RouterError(
  'missing_authorization',
  'missing Authorization header: send Authorization: Bearer <key>',
)
export const INVALID_API_KEY = new RouterError('invalid_api_key', 'invalid API key: unknown, malformed, expired or revoked')
const MGMT_KEY_ON_INFERENCE = new RouterError(
  'insufficient_scope',
  'management keys (mk-) cannot call inference endpoints: use an API key (sk-)',
)
const API_KEY_ON_MANAGEMENT = new RouterError(
  'insufficient_scope',
  'API keys (sk-) cannot call account or key endpoints: use a management key (mk-) with the required scope',
)
const LACKS_SCOPE: Record<Scope, RouterError> = {
  'account:read': new RouterError('insufficient_scope', 'this management key lacks the account:read scope'),
  'keys:read': new RouterError('insufficient_scope', 'this management key lacks the keys:read scope'),
  'keys:create': new RouterError('insufficient_scope', 'this management key lacks the keys:create scope'),
  'keys:manage': new RouterError('insufficient_scope', 'this management key lacks the keys:manage scope'),
}

export function createKeyAuthenticators(cache: KeyCache, store: Pick<KeyStore, 'touchMgmtKey'>, options: KeyAuthOptions = {}): KeyAuthenticators {
  const auditIntervalMs = options.auditIntervalMs ?? 60_000
  const now = options.now ?? Date.now
  const failures = options.failures ?? null
  const sourceOf = options.sourceOf ?? createSourceResolver([])
  const throttled = failures === null ? null : limitErrors(throttledMessage, 60_000)

  /** The 429 for a source past its failures; null (and no source worked out) while no source is refused. */
  function refusedSource(head: RequestHead): RouterError | null {
    // The common case (no source over its limit) reads no clock and works out no source.
    if (failures === null || !failures.armed) return null
    const at = now()
    if (!failures.refusing(at)) return null
    const wait = failures.retryAfter(sourceOf(head), at)
    if (wait === 0) return null
    if (throttledChannel.hasSubscribers) throttledChannel.publish(THROTTLED.authFailures)
    return throttled!(wait)
  }

  /** Counts a failed authentication against the request's source; the answer stays what it is. */
  function failed(result: CacheEntry | RouterError, head: RequestHead): CacheEntry | RouterError {
    if (result === INVALID_API_KEY && failures !== null) failures.add(sourceOf(head), now())
    return result
  }

  /** Writes last_used_at / last_source_ip, at most once per key per interval; never delays the request. */
  function audit(entry: MgmtEntry, head: RequestHead, at: number): void {
    if (at - entry.lastAuditAt < auditIntervalMs) return
    entry.lastAuditAt = at
    store.touchMgmtKey(entry.keyId, at, sourceOf(head), auditIntervalMs).catch((err: unknown) => {
      log.warn('management key audit write failed', { key_id: entry.keyId, err: String(err) })
    })
  }

  /**
   * A live entry the presented key matches: refused once expired; a management key's use is audited. `hash`
   * is null on the fast path (knownSecret): the digest is then needed only if the key just expired, and taken
   * from the entry.
   */
  function admit(entry: CacheEntry, hash: string | null, head: RequestHead): CacheEntry | RouterError {
    if (entry.kind === 'api') {
      if (entry.expiresAt !== Infinity && entry.expiresAt <= now()) {
        cache.markDead(hash ?? entry.hashBytes.toString('latin1'))
        return INVALID_API_KEY
      }
      return entry
    }
    audit(entry, head, now())
    return entry
  }

  function check(entry: CacheEntry | null, token: string, hash: string, head: RequestHead): CacheEntry | RouterError {
    if (entry === null || !digestMatches(entry.hashBytes, hash)) return INVALID_API_KEY
    const admitted = admit(entry, hash, head)
    if (admitted === entry) cache.rememberSecret(token, hash, entry)
    return admitted
  }

  function resolve(head: RequestHead): CacheEntry | RouterError | Promise<CacheEntry | RouterError> {
    // The Anthropic SDK sends its key as `x-api-key`; Authorization wins when both are sent.
    const xApiKey = head.xApiKey
    const token = parseAuthorization(head.authorization === '' && xApiKey !== undefined && xApiKey !== '' ? 'Bearer ' + xApiKey : head.authorization)
    if (token === NO_TOKEN) return MISSING_AUTHORIZATION
    const refused = refusedSource(head)
    if (refused !== null) return refused
    if (token === BAD_TOKEN) return failed(INVALID_API_KEY, head)
    const known = cache.knownSecret(token)
    if (known !== undefined) return failures === null ? admit(known, null, head) : failed(admit(known, null, head), head)
    const hash = digestToken(token)
    const found = cache.lookup(hash)
    if (found instanceof Promise) return found.then((entry) => failed(check(entry, token, hash, head), head))
    return failed(check(found, token, hash, head), head)
  }

  function asInference(result: CacheEntry | RouterError): Principal | RouterError {
    if (result instanceof RouterError) return result
    return result.kind === 'api' ? result.principal : MGMT_KEY_ON_INFERENCE
  }

  function asManagement(result: CacheEntry | RouterError, scope: Scope): MgmtPrincipal | RouterError {
    if (result instanceof RouterError) return result
    if (result.kind === 'api') return API_KEY_ON_MANAGEMENT
    return result.scopes.has(scope) ? result : LACKS_SCOPE[scope]
  }

  return {
    inference: function authenticateApiKey(head) {
      const result = resolve(head)
      return result instanceof Promise ? result.then(asInference) : asInference(result)
    },
    management: function authenticateMgmtKey(head, scope) {
      const result = resolve(head)
      return result instanceof Promise ? result.then((r) => asManagement(r, scope)) : asManagement(result, scope)
    },
    any: resolve,
  }
}
