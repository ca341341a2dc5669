/**
 * The payer's key (refused unless only its owner can read it, never in a message) and the session token's exact
 * format (the SDK's: app-sk- + base64(json | EIP-191 signature over keccak256(json)), key order as the SDK's).
 */
import t from 'tap'
import { chmodSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { keccak256, recoverMessageAddress, stringToBytes } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { format0g, parse0g } from '../../src/settlement/abi.js'
import { loadPayer } from '../../src/settlement/payer.js'
import { freeTokenId, readSessionToken, signSessionToken } from '../../src/settlement/session-token.js'

t.test('a key file readable by others is refused, and no message shows the key', async (t) => {
  const key = generatePrivateKey()
  const dir = t.testdir()
  const file = join(dir, 'payer.key')
  writeFileSync(file, key + '\n', { mode: 0o644 })
  chmodSync(file, 0o644)
  const err = (() => {
    try {
      loadPayer({ key_file: file, key_env: '' })
    } catch (e) {
      return e as Error
    }
    return null
  })()
  t.match(err?.message, /mode 0644.*chmod 600/)
  t.notMatch(err?.message ?? '', key.slice(2, 20))
  chmodSync(file, 0o600)
  t.equal(loadPayer({ key_file: file, key_env: '' }).address, privateKeyToAccount(key).address, 'accepted at 0600')
  t.equal(loadPayer({ key_file: '', key_env: 'K' }, { K: key.slice(2) }).address, privateKeyToAccount(key).address, 'or from the environment, 0x or not')
  t.throws(() => loadPayer({ key_file: '', key_env: 'K' }, {}), /K is not set/)
  const bad = (() => {
    try {
      loadPayer({ key_file: '', key_env: 'K' }, { K: key + 'zz' })
    } catch (e) {
      return (e as Error).message
    }
    return ''
  })()
  t.match(bad, /not 32 bytes of hex/)
  t.notMatch(bad, key.slice(2, 20))
})

t.test('a session token is the SDK\'s, signed over keccak256 of its json', async (t) => {
  const payer = privateKeyToAccount(generatePrivateKey())
  const provider = '0x70997970c51812dc3a010c7d01b50e0d17dc79c8'
  const token = await signSessionToken(payer, provider, 3n, undefined, 1_000)
  t.match(token.authorization, /^Bearer app-sk-[A-Za-z0-9+/=]+$/)
  const raw = Buffer.from(token.authorization.slice('Bearer app-sk-'.length), 'base64').toString('utf8')
  const [json, signature] = [raw.slice(0, raw.lastIndexOf('|')), raw.slice(raw.lastIndexOf('|') + 1)]
  t.same(Object.keys(JSON.parse(json)), ['address', 'provider', 'timestamp', 'expiresAt', 'nonce', 'generation', 'tokenId'], 'the SDK\'s key order')
  t.match(JSON.parse(json), { address: payer.address, provider, timestamp: 1_000, expiresAt: 1_000 + 86_400_000, generation: 3, tokenId: 255 })
  t.match(JSON.parse(json).nonce, /^[0-9a-f]{32}$/)
  t.equal(await recoverMessageAddress({ message: { raw: keccak256(stringToBytes(json)) }, signature: signature as `0x${string}` }), payer.address)
  const read = await readSessionToken(token.authorization)
  t.equal(read?.signer, payer.address.toLowerCase())
  t.equal(await readSessionToken('Bearer app-sk-' + Buffer.from(json.replace('"generation":3', '"generation":4') + '|' + signature).toString('base64')).then((r) => r?.signer === payer.address.toLowerCase()), false, 'a changed claim no longer recovers the payer')
  t.equal(freeTokenId(0n), 255)
  t.equal(freeTokenId(1n << 255n), 0, 'with 255 revoked, the lowest free id')
  t.equal(freeTokenId((1n << 256n) - 1n), -1)
})

t.test('0G amounts are exact', async (t) => {
  t.equal(parse0g('1.5'), 1_500_000_000_000_000_000n)
  t.equal(parse0g('0.000000000000000001'), 1n)
  t.equal(parse0g('1e3'), null)
  t.equal(format0g(1_500_000_000_000_000_000n), '1.5')
  t.equal(format0g(-250_000_000_000_000_000n), '-0.25')
})
