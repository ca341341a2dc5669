/**
 * Key-level trust mode (spec §5, §4.7 rule 7): the table of spec §5 row by row for a `private` key, then the
 * rule around it: a stronger header is honoured, a key without a tier leaves the header in charge, and the
 * deprecated body `provider` object cannot weaken the key either.
 */
import t from 'tap'
import { addr, startStack } from '../helpers/stack.js'
import { call, isError, type Answer } from './http.js'

const STD = addr('1')
const VER = addr('2')
const PRIV = addr('3')
const MIXED = 'm-mixed'
const STD_ONLY = 'm-std-only'

const stack = await startStack(t, [
  { address: STD, trust_mode: 'standard', models: [{ id: MIXED }, { id: STD_ONLY }] },
  { address: VER, trust_mode: 'verified', verifiability: 'TeeTLS', models: [{ id: MIXED }] },
  { address: PRIV, trust_mode: 'private', verifiability: 'TeeML', models: [{ id: MIXED }] },
])
const privateKey = await stack.newApiKey({ trustMode: 'private' })
const verifiedKey = await stack.newApiKey({ trustMode: 'verified' })

function chat(auth: Record<string, string>, model: string, trustHeader?: string, body: object = {}): Promise<Answer> {
  return call(stack, 'POST', '/v1/chat/completions', {
    headers: { ...auth, ...(trustHeader !== undefined && { 'x-svc-provider-trust-mode': trustHeader }) },
    body: { model, messages: [{ role: 'user', content: 'hi' }], ...body },
  })
}

/** The providers that served `n` requests. */
async function servedBy(n: number, auth: Record<string, string>, model: string, trustHeader?: string): Promise<Set<string>> {
  const out = new Set<string>()
  for (let i = 0; i < n; i++) {
    const answer = await chat(auth, model, trustHeader)
    if (answer.status !== 200) throw new Error(`expected 200, got ${answer.status}: ${answer.text}`)
    out.add(answer.json.x_svc_trace.provider)
  }
  return out
}

t.test('private key, no trust-mode header: the key tier applies', async (t) => {
  t.strictSame(await servedBy(8, privateKey.auth, MIXED), new Set([PRIV]))
})

t.test('private key, no trust-mode header, model without a private provider: 503 no_provider_for_trust_mode', async (t) => {
  const answer = await chat(privateKey.auth, STD_ONLY)
  t.ok(isError(answer, 503, 'no_provider_for_trust_mode'))
  t.equal((await chat(stack.auth, STD_ONLY)).status, 200, 'a key without a tier is served by the standard provider')
})

t.test('private key, header equal to the key tier: served normally', async (t) => {
  t.strictSame(await servedBy(4, privateKey.auth, MIXED, 'private'), new Set([PRIV]))
})

t.test('private key, weaker header (standard): 403 trust_mode_mismatch with the exact message', async (t) => {
  const answer = await chat(privateKey.auth, MIXED, 'standard')
  t.ok(isError(answer, 403, 'trust_mode_mismatch'))
  t.equal(answer.json.error.message, 'trust mode mismatch: key=private, request=standard')
})

t.test('private key, weaker header (verified): 403 trust_mode_mismatch', async (t) => {
  const answer = await chat(privateKey.auth, MIXED, 'verified')
  t.ok(isError(answer, 403, 'trust_mode_mismatch'))
  t.equal(answer.json.error.message, 'trust mode mismatch: key=private, request=verified')
})

t.test('verified key, stronger header (private): honoured', async (t) => {
  t.strictSame(await servedBy(6, verifiedKey.auth, MIXED, 'private'), new Set([PRIV]))
})

t.test('verified key, no header: never served below verified', async (t) => {
  const served = await servedBy(12, verifiedKey.auth, MIXED)
  t.notOk(served.has(STD))
  t.ok([...served].every((p) => p === VER || p === PRIV))
})

t.test('key without a tier: the header decides', async (t) => {
  t.strictSame(await servedBy(4, stack.auth, MIXED, 'private'), new Set([PRIV]))
  t.equal((await chat(stack.auth, MIXED, 'standard')).status, 200)
})

t.test('the deprecated body provider object cannot weaken the key tier either', async (t) => {
  const answer = await chat(privateKey.auth, MIXED, undefined, { provider: { trust_mode: 'standard' } })
  t.ok(isError(answer, 403, 'trust_mode_mismatch'))
  t.equal(answer.json.error.message, 'trust mode mismatch: key=private, request=standard')
})

t.test('an invalid header is still a 400, whatever the key', async (t) => {
  t.ok(isError(await chat(privateKey.auth, MIXED, 'Private'), 400, 'invalid_trust_mode'))
})

t.test('changing the key tier takes effect on the next request', async (t) => {
  const key = await stack.newApiKey({ trustMode: 'private' })
  t.ok(isError(await chat(key.auth, MIXED, 'standard'), 403, 'trust_mode_mismatch'))
  const patched = await call(stack, 'PATCH', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth, body: { trust_mode: 'standard' } })
  t.equal(patched.status, 200)
  t.equal((await chat(key.auth, MIXED, 'standard')).status, 200)
  await call(stack, 'PATCH', `/v1/api-keys/${key.id}`, { headers: stack.mgmtAuth, body: { trust_mode: 'private' } })
  t.ok(isError(await chat(key.auth, MIXED, 'standard'), 403, 'trust_mode_mismatch'))
})
