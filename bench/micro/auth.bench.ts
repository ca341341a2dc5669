/**
 * The authentication stage on a warm key cache, against the open (unauthenticated) stage it replaced: what an
 * `sk-` key costs every inference request (token shape check, SHA-256, LRU get, constant-time compare,
 * expiry). Target: under 2 µs added on a cache hit, with no store I/O.
 */
import { Bench } from 'tinybench'
import { createKeyAuthenticators } from '../../src/auth/authenticate.js'
import { Credentials } from '../../src/auth/credentials.js'
import { KeyCache } from '../../src/auth/key-cache.js'
import { digestToken, newSecret } from '../../src/auth/keys.js'
import { createOpenAuthenticator, type Principal } from '../../src/auth/principal.js'
import { RouterError } from '../../src/errors.js'
import type { RequestHead } from '../../src/server/request-head.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { batched, check, formatNs, nsPerOp, recordSummary } from './measure.js'
import { requestHead } from '../../test/helpers/request-head.js'

function head(authorization: string): RequestHead {
  return requestHead({ authorization, contentLength: '64' })
}

const ACCOUNT = '0x' + 'a'.repeat(40)
const store = await openSqliteStore({ path: ':memory:' })
// A negative TTL longer than the whole run, so the unknown-key task measures the negative cache only.
const cache = new KeyCache(store.keys, { defaultRateLimit: 600, negativeTtlMs: 600_000 })
const auth = createKeyAuthenticators(cache, store.keys)
const credentials = new Credentials(store, cache)
const { secret, record } = await credentials.issueApiKey(ACCOUNT, {
  name: 'bench',
  trustMode: 'verified',
  allowedModels: ['m1', 'm2'],
  expiresAt: Date.now() + 86_400_000,
})
const mgmt = await credentials.issueMgmtKey(ACCOUNT, 'bench', ['keys:read'])
const open = createOpenAuthenticator(600)

const OPEN = head('')
const WARM = head(`Bearer ${secret}`)
const MK = head(`Bearer ${mgmt.secret}`)
const UNKNOWN = head(`Bearer ${newSecret('sk-')}`)
const MALFORMED = head('Bearer sk-nope')

// Correct first: the warm key yields its Principal, synchronously; bad tokens are refused.
const cold = await auth.inference(WARM)
check(!(cold instanceof RouterError) && (cold as Principal).keyId === record.id, 'the key authenticates')
const warm = auth.inference(WARM)
check(warm === cold, 'a warm key is answered synchronously with the cached Principal')
check((warm as Principal).tier === 1 && (warm as Principal).allowedModels!.has('m2'), 'tier and allow-list')
check(!((await auth.management(MK, 'keys:read')) instanceof RouterError), 'the mk- key authenticates')
check((await auth.inference(UNKNOWN)) instanceof RouterError, 'an unknown key is refused')
check(auth.inference(UNKNOWN) instanceof RouterError, 'and then refused from the negative cache, synchronously')
check(auth.inference(MALFORMED) instanceof RouterError, 'a malformed token is refused')
const readsBefore = cache.storeReads

const BATCH = 1000
const bench = new Bench({ name: 'auth', time: 1000, warmupTime: 200 })
bench.add('unauthenticated (open stage)', batched(BATCH, () => open(OPEN)))
bench.add('SHA-256 of the token alone (the floor)', batched(BATCH, () => digestToken(secret)))
bench.add('sk- key, warm LRU', batched(BATCH, () => auth.inference(WARM)))
bench.add('mk- key with scope, warm LRU', batched(BATCH, () => auth.management(MK, 'keys:read')))
bench.add('unknown key, negative cache', batched(BATCH, () => auth.inference(UNKNOWN)))
bench.add('malformed token', batched(BATCH, () => auth.inference(MALFORMED)))
await bench.run()
console.table(bench.table())

check(cache.storeReads === readsBefore, 'no store read during the measured runs')
const added = nsPerOp(bench.getTask('sk- key, warm LRU')) - nsPerOp(bench.getTask('unauthenticated (open stage)'))
const beyondHash = nsPerOp(bench.getTask('sk- key, warm LRU')) - nsPerOp(bench.getTask('SHA-256 of the token alone (the floor)'))
recordSummary(bench, [
  { label: 'added by an sk- key on a cache hit (target < 2 µs)', value: formatNs(added), pass: added < 2000 },
  { label: 'of which beyond the SHA-256 itself', value: formatNs(beyondHash) },
  { label: 'store reads while measuring', value: String(cache.storeReads - readsBefore), pass: cache.storeReads === readsBefore },
])
await store.close()
