/**
 * Account identity is a wallet address (spec §1). Accepted: 0x + 40 hex digits, either in one case (no
 * checksum to check) or in mixed case, which must then be a valid EIP-55 checksum (a typo in a checksummed
 * address is caught instead of silently naming another account). Stored lower-case.
 */
import { keccak_256 } from '@noble/hashes/sha3.js'
import { isAddress } from '../vocabulary/address.js'

/** The EIP-55 checksummed form of a valid address (any case). */
export function toChecksumAddress(address: string): string {
  const lower = address.slice(2).toLowerCase()
  const hash = keccak_256(new TextEncoder().encode(lower))
  let out = '0x'
  for (let i = 0; i < 40; i++) {
    const c = lower[i]!
    // The i-th nibble of the hash decides the case of the i-th character.
    const nibble = (hash[i >> 1]! >> (i % 2 === 0 ? 4 : 0)) & 0x0f
    out += nibble >= 8 ? c.toUpperCase() : c
  }
  return out
}

/** The lower-case wallet, or an error message saying what is wrong with `text`. */
export function parseWallet(text: string): { wallet: string } | { problem: string } {
  if (!isAddress(text)) return { problem: 'must be 0x followed by 40 hex digits' }
  const body = text.slice(2)
  const lower = body.toLowerCase()
  if (body === lower || body === body.toUpperCase()) return { wallet: '0x' + lower }
  if (toChecksumAddress(text) !== text) return { problem: 'mixed-case address with an invalid EIP-55 checksum' }
  return { wallet: '0x' + lower }
}

export function isWallet(text: string): boolean {
  return 'wallet' in parseWallet(text)
}
