/**
 * On-chain addresses (provider addresses, wallets): 0x followed by 40 hex digits, kept lower-case. The one
 * copy of the format; EIP-55 checksums are judged in auth/wallet.ts.
 */

/** 0x + 40 hex digits in any case. */
export const ADDRESS_PATTERN = /^0x[0-9a-fA-F]{40}$/

/** 0x + 40 lower-case hex digits: the stored form. */
export const LOWER_ADDRESS_PATTERN = /^0x[0-9a-f]{40}$/

export function isAddress(text: string): boolean {
  return ADDRESS_PATTERN.test(text)
}
