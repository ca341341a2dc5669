import t from 'tap'
import { createHash } from 'node:crypto'
import {
  BAD_TOKEN,
  digestMatches,
  digestOf,
  digestToken,
  hashSecret,
  newSecret,
  NO_TOKEN,
  parseAuthorization,
  previewOf,
  storedHash,
  TOKEN_LENGTH,
} from '../../src/auth/keys.js'

t.test('secrets: prefix + 43 base64url characters of fresh randomness', async (t) => {
  const seen = new Set<string>()
  for (const prefix of ['sk-', 'mk-'] as const) {
    for (let i = 0; i < 100; i++) {
      const s = newSecret(prefix)
      t.equal(s.length, TOKEN_LENGTH)
      t.ok(s.startsWith(prefix))
      t.match(s.slice(3), /^[A-Za-z0-9_-]{43}$/)
      // 43 base64url characters carry 258 bits: the 32 random bytes.
      t.equal(Buffer.from(s.slice(3), 'base64url').length, 32)
      seen.add(s)
    }
  }
  t.equal(seen.size, 200, 'no two alike')
})

t.test('the hash is SHA-256 of the whole token, base64url', async (t) => {
  const s = newSecret('sk-')
  t.equal(hashSecret(s), createHash('sha256').update(s).digest('base64url'))
  t.not(hashSecret(s), hashSecret('mk-' + s.slice(3)), 'the prefix is part of what is hashed')
  t.equal(digestToken(s), createHash('sha256').update(s).digest('binary'), 'the cache key: the binary digest')
  t.equal(storedHash(digestToken(s)), hashSecret(s))
  t.equal(digestOf(hashSecret(s)), digestToken(s))
  const stored = Buffer.from(hashSecret(s), 'base64url')
  t.ok(digestMatches(stored, digestToken(s)))
  t.notOk(digestMatches(stored, digestToken(newSecret('sk-'))))
  t.notOk(digestMatches(stored, 'short'), 'a different length is unequal, not an exception')
  t.notOk(digestMatches(stored.subarray(1), digestToken(s)))
})

t.test('the preview shows the prefix and a few characters, never enough to use', async (t) => {
  const s = newSecret('sk-')
  const p = previewOf(s)
  t.equal(p, `${s.slice(0, 7)}...${s.slice(-4)}`)
  t.ok(p.length < 16)
})

t.test('parseAuthorization', async (t) => {
  const key = newSecret('sk-')
  const mk = newSecret('mk-')
  const cases: [string, string, string | number][] = [
    ['absent header', '', NO_TOKEN],
    ['blank header', '   ', NO_TOKEN],
    ['Bearer sk-', `Bearer ${key}`, key],
    ['Bearer mk-', `Bearer ${mk}`, mk],
    ['scheme is case-insensitive', `bEaReR ${key}`, key],
    ['extra spaces around the token', `Bearer   ${key}  `, key],
    ['Basic scheme', `Basic ${Buffer.from('user:' + key).toString('base64')}`, BAD_TOKEN],
    ['no scheme', key, BAD_TOKEN],
    ['scheme only', 'Bearer', BAD_TOKEN],
    ['scheme and nothing: present, so invalid rather than missing', 'Bearer ', BAD_TOKEN],
    ['neither prefix', `Bearer xk-${key.slice(3)}`, BAD_TOKEN],
    ['upper-case prefix', `Bearer SK-${key.slice(3)}`, BAD_TOKEN],
    ['truncated', `Bearer ${key.slice(0, -1)}`, BAD_TOKEN],
    ['too long', `Bearer ${key}A`, BAD_TOKEN],
    ['a character outside base64url', `Bearer ${key.slice(0, -1)}=`, BAD_TOKEN],
    ['a space inside', `Bearer ${key.slice(0, 20)} ${key.slice(21)}`, BAD_TOKEN],
    ['a tab instead of the space', `Bearer\t${key}`, BAD_TOKEN],
  ]
  for (const [name, header, expected] of cases) t.equal(parseAuthorization(header), expected, name)
})
