/**
 * Console sign-in with a wallet (EIP-4361), DESIGN.md §4:
 * - GET /v1/auth/nonce: a single-use nonce, with what the message must say (domain, URI, chain ID);
 * - POST /v1/auth/verify `{message, signature}`: checks the signed message (auth/siwe.ts) and sets the session
 *   cookie. No account is created: a wallet's account is made with its first key (credentials.ts), so a flood
 *   of sign-ins from fresh wallets leaves no row behind;
 * - GET /v1/auth/session: who is signed in (the console asks on load);
 * - POST /v1/auth/logout: ends the session and clears the cookie.
 * Verify and logout are state-changing and must be same-origin (auth/session-auth.ts).
 *
 * Every /v1/auth/* request counts against its source's minute and against everyone's (limits.sign_in_*): past
 * either, 429 rate_limit_exceeded with Retry-After, before any work (a nonce, a signature check) is done.
 */
import { parseJsonObject } from '../codecs/json-body.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError, sendJson } from '../server/respond.js'
import type { SessionBook } from '../auth/session.js'
import {
  clearedCookie,
  CROSS_SITE,
  INVALID_SESSION,
  isSameOrigin,
  originOf,
  resolveSession,
  schemeOf,
  sessionCookie,
  sessionToken,
} from '../auth/session-auth.js'
import type { ConsoleOrigins } from '../auth/console-origins.js'
import { DEFAULT_CHAIN_ID, verifySignIn, type SiweExpectations } from '../auth/siwe.js'
import { createSourceResolver, type SourceHead } from '../auth/source-ip.js'
import { GlobalLimit, limitErrors, MAX_TRACKED_SOURCES, SourceLimit } from '../auth/source-limit.js'
import { THROTTLED, throttled } from '../telemetry/events.js'

type Handler = (head: RequestHead, reply: Reply) => void

export interface AuthSessionDeps {
  readonly sessions: SessionBook
  /** The signature worker's recovery (tee/signer-recovery.ts). */
  readonly recover: SiweExpectations['recover']
  /** The request's source address (auth/source-ip.ts); the socket's peer when absent. */
  readonly sourceOf?: (head: SourceHead) => string
  /** /v1/auth/* requests a source may make in a minute (default 30). */
  readonly perSourcePerMinute?: number
  /** /v1/auth/* requests all sources together may make in a minute (default 600). */
  readonly perMinute?: number
  /** EIP-155 chain id the sign-in message must name. */
  readonly chainId?: number
  /** Where the console is reached (known once the router listens): what a sign-in message may name. */
  readonly origins: () => ConsoleOrigins
}

export interface AuthSessionSurface {
  readonly nonce: Handler
  readonly verify: Handler
  readonly session: Handler
  readonly logout: Handler
}

const VERIFY_BODY_LIMIT = 16 * 1024
const STATEMENT = 'Sign in to the svc-router console.'
const MINUTE_MS = 60_000
const FULL = new RouterError('rate_limit_exceeded', 'too many console sessions are open: try again in a minute', { 'Retry-After': '60' })
const NO_HOST = new RouterError('invalid_request', 'the request has no Host header: the sign-in message must name the host it is for')

function iso(ms: number): string | null {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : null
}

export function createAuthSession(deps: AuthSessionDeps): AuthSessionSurface {
  const book = deps.sessions
  const chainId = deps.chainId ?? DEFAULT_CHAIN_ID
  const sourceOf = deps.sourceOf ?? createSourceResolver([])
  const perSource = new SourceLimit({ limit: deps.perSourcePerMinute ?? 30, windowMs: MINUTE_MS, maxSources: MAX_TRACKED_SOURCES })
  const everyone = new GlobalLimit(deps.perMinute ?? 600, MINUTE_MS)
  const fromSource = limitErrors((s) => `too many sign-in requests from this address: try again in ${s} s`, MINUTE_MS)
  const fromEveryone = limitErrors((s) => `too many sign-in requests: try again in ${s} s`, MINUTE_MS)

  /**
   * Counts the request; the 429 when its source is past the minute's limit, or (`everyoneToo`) everyone is.
   * Everyone's minute bounds the CPU of sign-ins (a nonce, a signature check): a session check or a logout is a
   * lookup in memory, and counting it there let a flood from many addresses sign out the console's users.
   */
  function limited(head: RequestHead, everyoneToo: boolean): RouterError | null {
    const now = Date.now()
    const wait = perSource.add(sourceOf(head), now)
    if (wait > 0) {
      if (throttled.hasSubscribers) throttled.publish(THROTTLED.signInSource)
      return fromSource(wait)
    }
    if (!everyoneToo) return null
    const all = everyone.add(now)
    if (all === 0) return null
    if (throttled.hasSubscribers) throttled.publish(THROTTLED.signInGlobal)
    return fromEveryone(all)
  }

  /** `handler`, behind the limits (`everyoneToo`: everyone's minute as well as its source's). */
  function counted(handler: Handler, everyoneToo = true): Handler {
    return (head, reply) => {
      const refused = limited(head, everyoneToo)
      if (refused !== null) {
        fail(head, reply, refused)
        return
      }
      handler(head, reply)
    }
  }

  function headersOf(head: RequestHead, ...more: string[]): string[] {
    return ['x-request-id', head.requestId, 'Cache-Control', 'no-store', ...more]
  }

  function fail(head: RequestHead, reply: Reply, err: unknown, extra: string[] = []): void {
    if (!(err instanceof RouterError)) log.error('console sign-in failed', { err: String((err as Error)?.stack ?? err) })
    sendError(reply, toRouterError(err), head.requestId, headersOf(head, ...extra))
  }

  async function signIn(head: RequestHead, reply: Reply, raw: Buffer): Promise<void> {
    const body = parseJsonObject(raw)
    if (body instanceof RouterError) throw body
    const now = book.now()
    // Refused before the signature is checked (and the nonce spent): no session could be opened for it. The
    // wallet is the one the message claims (EIP-4361: its second line); the signature check proves it below.
    const claimed = typeof body.message === 'string' ? (body.message.split('\n', 2)[1] ?? '').trim().toLowerCase() : ''
    if (!book.hasRoom(claimed)) throw FULL
    const signed = await verifySignIn(book, body.message, body.signature, { origins: deps.origins(), chainId, now, recover: deps.recover })
    // A sign-in always starts a new session (no fixation); the one this browser held, if any, ends.
    book.close(sessionToken(head))
    const opened = book.open(signed.wallet, signed.expiresAt)
    if (opened === null) throw FULL
    const { token, session } = opened
    const cookie = sessionCookie(head, token, session.endsAt - now)
    const json = { account: session.accountId, expires_at: iso(session.endsAt), idle_timeout_seconds: Math.floor(book.idleMs / 1000) }
    sendJson(reply, 200, JSON.stringify(json), headersOf(head, 'Set-Cookie', cookie))
  }

  return {
    nonce: counted(function issueNonce(head, reply) {
      if ((head.host ?? '') === '') return fail(head, reply, NO_HOST)
      // The message names where the console is reached, never merely the Host this request wrote.
      const origins = deps.origins()
      // A browser sends no Origin with a same-origin GET: the scheme is then whichever the console is reached by
      // at this host (http first), not http by default (a console behind a TLS proxy is https only).
      const origin = (head.origin ?? '') !== '' ? origins.origin(schemeOf(head), head.host!) : (origins.origin('http', head.host!) ?? origins.origin('https', head.host!))
      if (origin === null) {
        const why = `this console is not reached at ${originOf(head)}: sign in at ${origins} (server.public_origins lists where it is served)`
        return fail(head, reply, new RouterError('invalid_request', why))
      }
      const issued = book.issueNonce()
      if (issued === null) {
        return fail(head, reply, new RouterError('rate_limit_exceeded', 'too many sign-ins pending: try again in a minute', { 'Retry-After': '60' }))
      }
      const json = {
        nonce: issued.nonce,
        expires_at: iso(issued.expiresAt),
        domain: head.host,
        uri: `${origin}/console`,
        chain_id: chainId,
        version: '1',
        statement: STATEMENT,
      }
      sendJson(reply, 200, JSON.stringify(json), headersOf(head))
    }),
    verify: counted(function verifySignedMessage(head, reply) {
      reply.readBody(
        VERIFY_BODY_LIMIT,
        (raw) => {
          // A login from another site would sign the operator into an attacker's choosing (login CSRF).
          if (!isSameOrigin(head)) return fail(head, reply, CROSS_SITE)
          signIn(head, reply, raw).catch((err: unknown) => fail(head, reply, err))
        },
        (err) => fail(head, reply, err),
      )
    }),
    session: counted(function currentSession(head, reply) {
      const session = resolveSession(book, head)
      if (session === null) return fail(head, reply, INVALID_SESSION)
      if (session instanceof RouterError) return fail(head, reply, session)
      const json = { account: session.accountId, expires_at: iso(session.endsAt), idle_timeout_seconds: Math.floor(book.idleMs / 1000) }
      sendJson(reply, 200, JSON.stringify(json), headersOf(head))
    }, false),
    logout: counted(function logout(head, reply) {
      reply.readBody(
        VERIFY_BODY_LIMIT,
        () => {
          if (!isSameOrigin(head)) return fail(head, reply, CROSS_SITE)
          const ended = book.close(sessionToken(head))
          const json = { message: ended ? 'signed out' : 'no session to sign out of' }
          sendJson(reply, 200, JSON.stringify(json), headersOf(head, 'Set-Cookie', clearedCookie(head)))
        },
        (err) => fail(head, reply, err),
      )
    }, false),
  }
}
