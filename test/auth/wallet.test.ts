import t from 'tap'
import { isWallet, parseWallet, toChecksumAddress } from '../../src/auth/wallet.js'

// The test vectors of EIP-55.
const CHECKSUMMED = [
  '0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed',
  '0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359',
  '0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB',
  '0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb',
]

t.test('EIP-55 checksums of the EIP test vectors', async (t) => {
  for (const address of CHECKSUMMED) t.equal(toChecksumAddress(address.toLowerCase()), address)
})

t.test('accepted: lower case, upper case, valid checksum; stored lower-case', async (t) => {
  for (const address of CHECKSUMMED) {
    t.strictSame(parseWallet(address), { wallet: address.toLowerCase() })
    t.strictSame(parseWallet(address.toLowerCase()), { wallet: address.toLowerCase() })
    t.strictSame(parseWallet('0x' + address.slice(2).toUpperCase()), { wallet: address.toLowerCase() })
  }
  t.ok(isWallet('0x' + '0'.repeat(40)))
})

t.test('refused: a broken checksum, a wrong length, non-hex, no 0x', async (t) => {
  // One letter's case flipped: a typo a checksum exists to catch.
  const typo = CHECKSUMMED[0]!.replace('aA', 'Aa')
  t.match(parseWallet(typo), { problem: /checksum/ })
  t.match(parseWallet('0x' + 'a'.repeat(39)), { problem: /40 hex/ })
  t.match(parseWallet('0x' + 'a'.repeat(41)), { problem: /40 hex/ })
  t.match(parseWallet('0x' + 'g'.repeat(40)), { problem: /40 hex/ })
  t.match(parseWallet('a'.repeat(42)), { problem: /40 hex/ })
  t.match(parseWallet('0X' + 'a'.repeat(40)), { problem: /40 hex/ })
  t.match(parseWallet(''), { problem: /40 hex/ })
  t.notOk(isWallet(typo))
})
