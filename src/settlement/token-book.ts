/**
 * The session token of each paid provider (issue 44): signed by the payer for the sub-account's current
 * generation and an id it has not revoked, kept in memory and reused until an hour before it expires. A
 * provider's 401 re-reads the sub-account (generation, revoked ids) and signs a new one, shared by the requests
 * that met the refusal; a new generation (every id revoked) needs a transaction, left to the funding round.
 */
import type { LocalAccount } from 'viem'
import { log } from '../log.js'
import type { SubAccount } from './abi.js'
import type { Entry } from './entry.js'
import { errorText } from './sender.js'
import { freeTokenId, RENEW_BEFORE_MS, signSessionToken } from './session-token.js'

export class TokenBook {
  readonly #payer: LocalAccount
  /** Reads the sub-account without reconciling it (a round may be reading the same window). */
  readonly #read: (e: Entry) => Promise<SubAccount | null>
  /** Asks for a round now (a new generation is needed). */
  readonly #round: () => void

  constructor(payer: LocalAccount, read: (e: Entry) => Promise<SubAccount | null>, round: () => void) {
    this.#payer = payer
    this.#read = read
    this.#round = round
  }

  /** The Authorization value for `e`, when it is routable and has a token (read on the request path, from memory). */
  authorization(e: Entry | undefined): string | null {
    return e === undefined || e.reason !== null || e.token === null ? null : e.token.authorization
  }

  /**
   * The session token for `e`: kept while it has an hour left, its generation is the account's and its id is not
   * revoked. False when no token can be made (every id revoked: a new generation is needed).
   */
  async ensure(e: Entry, force: boolean): Promise<boolean> {
    const a = e.account
    if (a === null) return false
    const t = e.token
    const fresh = t !== null && BigInt(t.claims.generation) === a.generation && (a.revokedBitmap & (1n << BigInt(t.claims.tokenId))) === 0n
    if (!force && fresh && t.claims.expiresAt - Date.now() > RENEW_BEFORE_MS) return true
    const id = freeTokenId(a.revokedBitmap)
    if (id < 0) {
      e.token = null
      return false
    }
    e.token = await signSessionToken(this.#payer, e.address, a.generation, id)
    return true
  }

  /** The provider refused `e`'s token (401): resolves true when a renewed one is worth one retry. */
  refused(e: Entry): Promise<boolean> {
    e.renewing ??= (async () => {
      try {
        e.account = await this.#read(e)
        if (e.account === null) return false
        if (!(await this.ensure(e, true))) {
          // A new generation needs a transaction: the next round sends it; this request moves on.
          this.#round()
          return false
        }
        log.info('settlement: session token renewed after the provider refused it', { provider: e.address, generation: e.account.generation.toString() })
        return true
      } catch (err) {
        log.warn('settlement: renewing a refused token failed', { provider: e.address, err: errorText(err) })
        return false
      } finally {
        setTimeout(() => (e.renewing = null), 0).unref()
      }
    })()
    return e.renewing
  }
}
