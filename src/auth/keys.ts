/**
 * Key material: `sk-` and `mk-` secrets (32 random bytes, base64url), their SHA-256 hashes (the only thing
 * stored), previews, and the shape check of an `Authorization: Bearer …` header. Nothing here touches the store,
 * so a malformed token is refused without any I/O.
 */
import * as crypto from 'node:crypto'

export const API_KEY_PREFIX = 'sk-'
export const MGMT_KEY_PREFIX = 'mk-'
export type KeyPrefix = typeof API_KEY_PREFIX | typeof MGMT_KEY_PREFIX

const SECRET_BYTES = 32
/** base64url of 32 bytes, unpadded. */
const SECRET_CHARS = 43
/** Prefix + secret: every well-formed token has exactly this length. */
export const TOKEN_LENGTH = 3 + SECRET_CHARS

/** A new secret: the prefix and 43 base64url characters of fresh randomness. Shown once, never stored. */
export function newSecret(prefix: KeyPrefix): string {
  return prefix + crypto.randomBytes(SECRET_BYTES).toString('base64url')
}

// One-shot crypto.hash (Node 20.12+) skips the Hash object: about a third cheaper than createHash per call.
const oneShotHash = (crypto as { hash?: typeof crypto.hash }).hash

/**
 * SHA-256 of the whole token (prefix included) as a 32-character binary (latin1, 'binary' to Node) string: the key of the
 * in-process cache. The cheapest form to compute and to copy into a buffer for the constant-time compare.
 */
export const digestToken: (token: string) => string =
  typeof oneShotHash === 'function'
    ? (token) => oneShotHash('sha256', token, 'binary')
    : (token) => crypto.createHash('sha256').update(token).digest('binary')

/** The stored form of a digest: base64url (43 chars), what the store is keyed by. */
export function storedHash(digest: string): string {
  return Buffer.from(digest, 'latin1').toString('base64url')
}

/** The digest of a stored hash (the inverse of storedHash). */
export function digestOf(stored: string): string {
  return Buffer.from(stored, 'base64url').toString('latin1')
}

/** SHA-256 of the whole token, base64url: the only form of a secret the store ever holds. */
export function hashSecret(secret: string): string {
  return storedHash(digestToken(secret))
}

const DIGEST_BYTES = 32
/** Reused by every compare: the request path allocates nothing for it (single-threaded, never re-entered). */
const scratch = Buffer.alloc(DIGEST_BYTES)

/** Compares a stored hash (its bytes) with a computed digest in constant time (crypto.timingSafeEqual). */
export function digestMatches(stored: Buffer, digest: string): boolean {
  if (stored.length !== DIGEST_BYTES || digest.length !== DIGEST_BYTES) return false
  scratch.write(digest, 0, DIGEST_BYTES, 'latin1')
  return crypto.timingSafeEqual(stored, scratch)
}

/** The abbreviated key shown in lists: prefix, the first and the last four characters. */
export function previewOf(secret: string): string {
  return `${secret.slice(0, 7)}...${secret.slice(-4)}`
}

/** parseAuthorization(): no Authorization header at all. */
export const NO_TOKEN = 0
/** parseAuthorization(): a header that is not `Bearer <well-formed sk-/mk- token>`. */
export const BAD_TOKEN = 1

/** 1 for the characters of base64url, by char code (a table lookup: the check runs on every request). */
const BASE64URL = new Uint8Array(128)
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_') BASE64URL[c.charCodeAt(0)] = 1

/**
 * The token of `Authorization: Bearer <token>` when it has the shape of an `sk-` or `mk-` key, else NO_TOKEN
 * (header absent or blank) or BAD_TOKEN (another scheme, another prefix, wrong length, a bad character). The
 * scheme is case-insensitive (RFC 9110); the token is not.
 */
export function parseAuthorization(header: string): string | typeof NO_TOKEN | typeof BAD_TOKEN {
  let end = header.length
  while (end > 0 && (header.charCodeAt(end - 1) === 32 || header.charCodeAt(end - 1) === 9)) end--
  if (end === 0) return NO_TOKEN
  if (
    end < 7 ||
    (header.charCodeAt(0) | 32) !== 98 /* b */ ||
    (header.charCodeAt(1) | 32) !== 101 /* e */ ||
    (header.charCodeAt(2) | 32) !== 97 /* a */ ||
    (header.charCodeAt(3) | 32) !== 114 /* r */ ||
    (header.charCodeAt(4) | 32) !== 101 /* e */ ||
    (header.charCodeAt(5) | 32) !== 114 /* r */ ||
    header.charCodeAt(6) !== 32
  ) {
    return BAD_TOKEN
  }
  let start = 7
  while (start < end && header.charCodeAt(start) === 32) start++
  if (end - start !== TOKEN_LENGTH) return BAD_TOKEN
  const p = header.charCodeAt(start)
  if ((p !== 115 /* s */ && p !== 109) /* m */ || header.charCodeAt(start + 1) !== 107 /* k */ || header.charCodeAt(start + 2) !== 45) {
    return BAD_TOKEN
  }
  for (let i = start + 3; i < end; i++) {
    const c = header.charCodeAt(i)
    if (c > 127 || BASE64URL[c] === 0) return BAD_TOKEN
  }
  return start === 7 && end === header.length ? header.slice(7) : header.slice(start, end)
}
