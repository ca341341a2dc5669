/**
 * Console sign-in with a wallet (EIP-4361), DESIGN.md §4:
 * - GET /v1/auth/nonce: a single-use nonce, with what the message must say (domain, URI, chain ID);
 * - POST /v1/auth/verify `{message, signature}`: checks the signed message (auth/siwe.ts), creates the
 *   wallet's account on its first sign-in (no deposit), sets the session cookie;
 * - GET /v1/auth/session: who is signed in (the console asks on load);
 * - POST /v1/auth/logout: ends the session and clears the cookie.
 * Verify and logout are state-changing and must be same-origin (auth/session-auth.ts).
 */
import { parseJsonObject } from '../codecs/json-body.js'
import { RouterError, toRouterError } from '../errors.js'
import { log } from '../log.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError, sendJson } from '../server/respond.js'
import type { Store } from '../store/store.js'
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
import { DEFAULT_CHAIN_ID, verifySignIn } from '../auth/siwe.js'

type Handler = (head: RequestHead, reply: Reply) => void

export interface AuthSessionDeps {
  readonly sessions: SessionBook
  readonly store: Pick<Store, 'accounts'>
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
const NO_HOST = new RouterError('invalid_request', 'the request has no Host header: the sign-in message must name the host it is for')

function iso(ms: number): string | null {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : null
}

export function createAuthSession(deps: AuthSessionDeps): AuthSessionSurface {
  const book = deps.sessions
  const chainId = deps.chainId ?? DEFAULT_CHAIN_ID

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
    const signed = await verifySignIn(book, body.message, body.signature, { origins: deps.origins(), chainId, now })
    await deps.store.accounts.ensureAccount(signed.wallet, now)
    // A sign-in always starts a new session (no fixation); the one this browser held, if any, ends.
    book.close(sessionToken(head))
    const { token, session } = book.open(signed.wallet, signed.expiresAt)
    const cookie = sessionCookie(head, token, session.endsAt - now)
    const json = { account: session.accountId, expires_at: iso(session.endsAt), idle_timeout_seconds: Math.floor(book.idleMs / 1000) }
    sendJson(reply, 200, JSON.stringify(json), headersOf(head, 'Set-Cookie', cookie))
  }

  return {
    nonce: function issueNonce(head, reply) {
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
    },
    verify: function verifySignedMessage(head, reply) {
      reply.readBody(
        VERIFY_BODY_LIMIT,
        (raw) => {
          // A login from another site would sign the operator into an attacker's choosing (login CSRF).
          if (!isSameOrigin(head)) return fail(head, reply, CROSS_SITE)
          signIn(head, reply, raw).catch((err: unknown) => fail(head, reply, err))
        },
        (err) => fail(head, reply, err),
      )
    },
    session: function currentSession(head, reply) {
      const session = resolveSession(book, head)
      if (session === null) return fail(head, reply, INVALID_SESSION)
      if (session instanceof RouterError) return fail(head, reply, session)
      const json = { account: session.accountId, expires_at: iso(session.endsAt), idle_timeout_seconds: Math.floor(book.idleMs / 1000) }
      sendJson(reply, 200, JSON.stringify(json), headersOf(head))
    },
    logout: function logout(head, reply) {
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
    },
  }
}
