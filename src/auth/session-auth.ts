/**
 * The console's wallet session as a credential: the session cookie, the same-origin checks that keep another
 * site from riding on it (CSRF), and the authenticators that accept it.
 *
 * - `management`: a bearer key as before (auth/authenticate.ts); with no Authorization header, a live session
 *   acts with every scope of its wallet's account. Used by /v1/api-keys and /v1/account/*.
 * - `sessionOnly`: /v1/management-keys (spec §4.1, §5): only a session; a valid bearer key of either kind gets
 *   403 access_denied, so an mk- key can never make or manage mk- keys.
 *
 * CSRF: the cookie is SameSite=Strict, and on top of that a state-changing request must say it is same-origin
 * (Sec-Fetch-Site: same-origin, or, from browsers that send no Fetch Metadata, an Origin equal to this host);
 * a read is refused only when the browser says it is cross-site.
 */
import { RouterError } from '../errors.js'
import type { RequestHead } from '../server/request-head.js'
import { SCOPES } from '../store/store.js'
import type { KeyAuthenticators, MgmtAuthenticator, MgmtPrincipal } from './authenticate.js'
import { MISSING_AUTHORIZATION } from './authenticate.js'
import type { Session, SessionBook } from './session.js'

export const SESSION_COOKIE = 'svc_session'
/** keyId of a principal acting through a console session (no key). */
export const SESSION_KEY_ID = 'console-session'

const ALL_SCOPES = new Set(SCOPES)

export const INVALID_SESSION = new RouterError('invalid_session', 'the console session has expired or was logged out: sign in again')
export const CROSS_SITE = new RouterError(
  'access_denied',
  'cross-site request refused: console calls must come from the console page itself (same origin)',
)
const NEEDS_SESSION = new RouterError(
  'access_denied',
  'management keys are managed from a signed-in wallet session in the console; API and management keys cannot call /v1/management-keys',
)
const NO_SESSION = new RouterError(
  'missing_authorization',
  'missing Authorization header: send Authorization: Bearer <key>, or sign in to the console with a wallet',
)

/** The value of cookie `name` in a Cookie header, '' when absent. */
export function cookieValue(header: string, name: string): string {
  if (header === '') return ''
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq < 0) continue
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim()
  }
  return ''
}

/** The scheme the browser used, as far as it tells (its Origin header); the router itself speaks plain HTTP. */
export function schemeOf(head: RequestHead): 'https' | 'http' {
  return (head.origin ?? '').startsWith('https://') ? 'https' : 'http'
}

/** This console's origin as the browser sees it: scheme plus the Host it addressed. */
export function originOf(head: RequestHead): string {
  return `${schemeOf(head)}://${head.host ?? ''}`
}

function isSafeMethod(head: RequestHead): boolean {
  const m = head.method.toLowerCase()
  return m === 'get' || m === 'head'
}

/** True when the request may act on a session: see the CSRF rule in the file comment. */
export function isSameOrigin(head: RequestHead): boolean {
  const site = head.secFetchSite ?? ''
  const origin = head.origin ?? ''
  const host = head.host ?? ''
  const originOk = origin === '' ? null : host !== '' && (origin === `http://${host}` || origin === `https://${host}`)
  if (isSafeMethod(head)) return site !== 'cross-site' && site !== 'same-site' && originOk !== false
  if (site !== '') return site === 'same-origin' && originOk !== false
  return originOk === true
}

/** The cookie that carries `token` for `maxAgeMs`; Secure when the browser reached the console over TLS. */
export function sessionCookie(head: RequestHead, token: string, maxAgeMs: number): string {
  const secure = schemeOf(head) === 'https' ? '; Secure' : ''
  return `${SESSION_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${Math.max(0, Math.floor(maxAgeMs / 1000))}${secure}`
}

/** The cookie that makes the browser forget the session. */
export function clearedCookie(head: RequestHead): string {
  return sessionCookie(head, '', 0)
}

export function sessionToken(head: RequestHead): string {
  return cookieValue(head.cookie ?? '', SESSION_COOKIE)
}

/** The session of the request's cookie, or why it cannot act (CSRF, expired), or null when it sent none. */
export function resolveSession(book: SessionBook, head: RequestHead): Session | RouterError | null {
  const token = sessionToken(head)
  if (token === '') return null
  if (!isSameOrigin(head)) return CROSS_SITE
  return book.find(token) ?? INVALID_SESSION
}

function asPrincipal(session: Session): MgmtPrincipal {
  return { accountId: session.accountId, keyId: SESSION_KEY_ID, scopes: ALL_SCOPES }
}

export interface SessionAuthenticators {
  readonly management: MgmtAuthenticator
  readonly sessionOnly: MgmtAuthenticator
}

export function createSessionAuthenticators(book: SessionBook, keys: KeyAuthenticators): SessionAuthenticators {
  return {
    management: function authenticateKeyOrSession(head, scope) {
      // A bearer key decides when one is sent: a script with a key never depends on a browser's cookie.
      if (head.authorization !== '') return keys.management(head, scope)
      const session = resolveSession(book, head)
      if (session === null) return MISSING_AUTHORIZATION
      return session instanceof RouterError ? session : asPrincipal(session)
    },
    sessionOnly: function authenticateSession(head) {
      if (head.authorization !== '') {
        const refuse = (r: object): RouterError => (r instanceof RouterError ? r : NEEDS_SESSION)
        const result = keys.any(head)
        return result instanceof Promise ? result.then(refuse) : refuse(result)
      }
      const session = resolveSession(book, head)
      if (session === null) return NO_SESSION
      return session instanceof RouterError ? session : asPrincipal(session)
    },
  }
}
