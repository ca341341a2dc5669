/**
 * 0G session tokens (the broker's `Authorization: Bearer app-sk-…`, as @0gfoundation/0g-compute-ts-sdk 0.9 makes
 * them): `app-sk-` + base64(json + "|" + signature), where json is JSON.stringify({address, provider, timestamp,
 * expiresAt, nonce, generation, tokenId}) in that key order (times in ms, nonce random hex, generation the
 * sub-account's current one, tokenId 255 for an ephemeral token of at most 24 h) and signature is the payer's
 * EIP-191 signature over the 32 bytes of keccak256(utf8(json)). The parse half is what a provider's broker
 * checks before looking at the chain (the simulator uses it; the router only makes tokens).
 */
import { randomBytes } from 'node:crypto'
import { keccak256, recoverMessageAddress, stringToBytes, type Hex, type LocalAccount } from 'viem'

export const TOKEN_PREFIX = 'app-sk-'
/** The token id of an ephemeral token (ids 0…254 are persistent API keys). */
export const EPHEMERAL_TOKEN_ID = 255
/** The longest an ephemeral token may live. */
export const EPHEMERAL_MAX_MS = 24 * 60 * 60 * 1000
/** A token is renewed once it has less than this left (the SDK reuses one only with an hour to go). */
export const RENEW_BEFORE_MS = 60 * 60 * 1000

export interface SessionClaims {
  readonly address: string
  readonly provider: string
  readonly timestamp: number
  readonly expiresAt: number
  readonly nonce: string
  readonly generation: number
  readonly tokenId: number
}

export interface SessionToken {
  /** The whole header value: `Bearer app-sk-…`. */
  readonly authorization: string
  readonly claims: SessionClaims
}

/**
 * The id a new token takes: 255 (ephemeral), or while 255 is revoked the lowest id the sub-account has not
 * revoked (still signed to expire within 24 h); -1 when every id is revoked (only revokeAllTokens helps).
 */
export function freeTokenId(revokedBitmap: bigint): number {
  if ((revokedBitmap & (1n << 255n)) === 0n) return EPHEMERAL_TOKEN_ID
  for (let id = 0; id < EPHEMERAL_TOKEN_ID; id++) if ((revokedBitmap & (1n << BigInt(id))) === 0n) return id
  return -1
}

/** Signs a fresh token for `provider` at the sub-account's `generation`, living at most 24 h. */
export async function signSessionToken(
  payer: LocalAccount,
  provider: string,
  generation: bigint,
  tokenId = EPHEMERAL_TOKEN_ID,
  now = Date.now(),
  lifetimeMs = EPHEMERAL_MAX_MS,
): Promise<SessionToken> {
  const claims: SessionClaims = {
    address: payer.address,
    provider,
    timestamp: now,
    expiresAt: now + Math.min(lifetimeMs, EPHEMERAL_MAX_MS),
    nonce: randomBytes(16).toString('hex'),
    generation: Number(generation),
    tokenId,
  }
  const json = JSON.stringify(claims)
  const signature = await payer.signMessage({ message: { raw: keccak256(stringToBytes(json)) } })
  return { authorization: `Bearer ${TOKEN_PREFIX}${Buffer.from(json + '|' + signature).toString('base64')}`, claims }
}

/** A token read back: its claims and who signed them; null when it is not a well-formed, well-signed token. */
export async function readSessionToken(authorization: string): Promise<{ claims: SessionClaims; signer: string } | null> {
  const bearer = authorization.startsWith('Bearer ') ? authorization.slice(7).trim() : authorization.trim()
  if (!bearer.startsWith(TOKEN_PREFIX) || bearer.length > 4096) return null
  const raw = Buffer.from(bearer.slice(TOKEN_PREFIX.length), 'base64').toString('utf8')
  const bar = raw.lastIndexOf('|')
  if (bar < 0) return null
  const json = raw.slice(0, bar)
  const signature = raw.slice(bar + 1) as Hex
  if (!/^0x[0-9a-fA-F]{130}$/.test(signature)) return null
  let claims: SessionClaims
  try {
    const v = JSON.parse(json) as Record<string, unknown>
    if (typeof v.address !== 'string' || typeof v.provider !== 'string' || typeof v.nonce !== 'string') return null
    for (const k of ['timestamp', 'expiresAt', 'generation', 'tokenId'] as const) if (typeof v[k] !== 'number' || !Number.isSafeInteger(v[k])) return null
    claims = v as unknown as SessionClaims
  } catch {
    return null
  }
  try {
    const signer = await recoverMessageAddress({ message: { raw: keccak256(stringToBytes(json)) }, signature })
    return { claims, signer: signer.toLowerCase() }
  } catch {
    return null
  }
}
