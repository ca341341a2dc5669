/**
 * Console wallet sessions (DESIGN.md §4, EIP-4361 sign-in): who is signed in, and the single-use nonces that a
 * sign-in message must carry.
 *
 * Kept in this process's memory, not in the Store, on purpose: a session is worth nothing beyond the process
 * that serves the console (one router process serves it; the operator CLI never reads sessions), and a restart
 * logging operators out is acceptable (the issue says so) and is even the safe outcome. Nothing secret is kept:
 * a session is found by the SHA-256 of its token, so a heap dump yields no usable cookie. Moving sessions into
 * the Store (several replicas behind one console address) would be one more Store part with this interface.
 */
import { createHash, randomBytes } from 'node:crypto'

/** Default idle expiry: a session unused for this long is gone. */
export const SESSION_IDLE_MS = 30 * 60_000
/** Default absolute expiry: a session ends this long after sign-in however busy it is. */
export const SESSION_ABSOLUTE_MS = 12 * 60 * 60_000
/** How long an issued nonce may wait for its signed message. */
export const NONCE_TTL_MS = 5 * 60_000
/** Live nonces held at most: unauthenticated GET /v1/auth/nonce must not grow memory without bound. */
export const MAX_PENDING = 10_000
/** Live sessions held at most by default (limits.max_console_sessions). */
export const MAX_SESSIONS = 10_000
/** Sessions one wallet keeps: its oldest ends when it signs in once more (a browser per device, say). */
export const SESSIONS_PER_ACCOUNT = 8

export interface Session {
  /** The wallet (lower-case), the account id. */
  readonly accountId: string
  readonly createdAt: number
  lastSeenAt: number
  /** Epoch ms of the absolute expiry. */
  readonly endsAt: number
}

export interface SessionOptions {
  readonly idleMs?: number
  readonly absoluteMs?: number
  readonly nonceTtlMs?: number
  readonly maxPending?: number
  readonly maxSessions?: number
  readonly now?: () => number
}

function digest(token: string): string {
  return createHash('sha256').update(token).digest('base64url')
}

/** Sessions and sign-in nonces of the console, in memory. */
export class SessionBook {
  readonly idleMs: number
  readonly absoluteMs: number
  readonly nonceTtlMs: number
  readonly now: () => number
  readonly #maxPending: number
  readonly #maxSessions: number
  /** By SHA-256 of the token. */
  readonly #sessions = new Map<string, Session>()
  /** Nonce → expiry (epoch ms). */
  readonly #nonces = new Map<string, number>()

  constructor(options: SessionOptions = {}) {
    this.idleMs = options.idleMs ?? SESSION_IDLE_MS
    this.absoluteMs = options.absoluteMs ?? SESSION_ABSOLUTE_MS
    this.nonceTtlMs = options.nonceTtlMs ?? NONCE_TTL_MS
    this.#maxPending = options.maxPending ?? MAX_PENDING
    this.#maxSessions = options.maxSessions ?? MAX_SESSIONS
    this.now = options.now ?? Date.now
  }

  /** A fresh nonce, or null when too many are pending (the caller answers 429). */
  issueNonce(): { nonce: string; expiresAt: number } | null {
    const now = this.now()
    if (this.#nonces.size >= this.#maxPending) {
      for (const [nonce, expiresAt] of this.#nonces) if (expiresAt <= now) this.#nonces.delete(nonce)
      if (this.#nonces.size >= this.#maxPending) return null
    }
    // EIP-4361: at least 8 alphanumeric characters; 128 random bits as hex.
    const nonce = randomBytes(16).toString('hex')
    const expiresAt = now + this.nonceTtlMs
    this.#nonces.set(nonce, expiresAt)
    return { nonce, expiresAt }
  }

  /**
   * Spends the nonce: true when it was issued here and had not expired. Spent either way, so a nonce is
   * tried once, whether that sign-in then succeeds or not.
   */
  consumeNonce(nonce: string): boolean {
    const expiresAt = this.#nonces.get(nonce)
    if (expiresAt === undefined) return false
    this.#nonces.delete(nonce)
    return expiresAt > this.now()
  }

  /** Live sessions now (expired ones not yet swept included). */
  get sessionCount(): number {
    return this.#sessions.size
  }

  /**
   * True when a sign-in of `accountId` now could open a session: the cap is not reached once expired sessions
   * are gone, or the account is at its own cap (its oldest session would make way).
   */
  hasRoom(accountId = ''): boolean {
    if (this.#sessions.size >= this.#maxSessions) this.#sweep(this.now())
    return this.#sessions.size < this.#maxSessions || this.#oldestOf(accountId).count >= SESSIONS_PER_ACCOUNT
  }

  /**
   * Starts a session for the account, ending at the absolute expiry or at `notAfter` (the signed message's
   * expiration time) if sooner; returns its token (the cookie value), which is never kept. Null when the book
   * is full of live sessions (the caller answers 429). An account past SESSIONS_PER_ACCOUNT loses its oldest.
   */
  open(accountId: string, notAfter = Infinity): { token: string; session: Session } | null {
    const now = this.now()
    if (!this.hasRoom(accountId)) return null
    const mine = this.#oldestOf(accountId)
    if (mine.count >= SESSIONS_PER_ACCOUNT && mine.key !== null) this.#sessions.delete(mine.key)
    const token = randomBytes(32).toString('base64url')
    const session: Session = { accountId, createdAt: now, lastSeenAt: now, endsAt: Math.min(now + this.absoluteMs, notAfter) }
    this.#sessions.set(digest(token), session)
    return { token, session }
  }

  /** The live session of a token, its idle clock restarted; null when unknown, expired or logged out. */
  find(token: string): Session | null {
    if (token === '') return null
    const key = digest(token)
    const session = this.#sessions.get(key)
    if (session === undefined) return null
    const now = this.now()
    if (now >= session.endsAt || now - session.lastSeenAt >= this.idleMs) {
      this.#sessions.delete(key)
      return null
    }
    session.lastSeenAt = now
    return session
  }

  /** Ends the token's session (logout); true when there was one. */
  close(token: string): boolean {
    return token !== '' && this.#sessions.delete(digest(token))
  }

  /** Ends every session of an account. */
  closeAccount(accountId: string): void {
    for (const [key, s] of this.#sessions) if (s.accountId === accountId) this.#sessions.delete(key)
  }

  /** How many sessions the account has, and the key of its oldest. */
  #oldestOf(accountId: string): { count: number; key: string | null } {
    let count = 0
    let key: string | null = null
    let oldestAt = Infinity
    if (accountId === '') return { count, key }
    for (const [k, s] of this.#sessions) {
      if (s.accountId !== accountId) continue
      count++
      if (s.createdAt < oldestAt) {
        oldestAt = s.createdAt
        key = k
      }
    }
    return { count, key }
  }

  #sweep(now: number): void {
    for (const [key, s] of this.#sessions) {
      if (now >= s.endsAt || now - s.lastSeenAt >= this.idleMs) this.#sessions.delete(key)
    }
  }
}
