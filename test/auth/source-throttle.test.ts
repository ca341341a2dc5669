/**
 * Floods by source address (issue 43): failed key authentications and console sign-ins are counted per source
 * (the client behind a trusted proxy, by X-Forwarded-For; otherwise the peer) and past their limit get 429
 * rate_limit_exceeded with Retry-After, while other sources go on as before. A throttled source's keys are not
 * even looked up. Sign-ins alone create no account, and live sessions are capped.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { createSourceResolver } from '../../src/auth/source-ip.js'
import { SourceLimit } from '../../src/auth/source-limit.js'
import { call, isError, MODEL, oneProviderStack, type Answer } from './http.js'
import { cookieOf, message, newWallet, sameOrigin, signIn, verify } from '../console/wallet.js'

/** Sources as a trusted proxy on loopback reports them (documentation addresses: never contacted). */
const A = '203.0.113.10'
const B = '203.0.113.20'
const BEHIND_PROXY = { server: { trusted_proxies: ['127.0.0.1', '::1'] } }

function from(source: string, headers: Record<string, string> = {}): Record<string, string> {
  return { 'x-forwarded-for': `198.51.100.99, ${source}`, ...headers }
}

function chatAs(stack: { url: string }, headers: Record<string, string>): Promise<Answer> {
  return call(stack, 'POST', '/v1/chat/completions', { headers, body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } })
}

/** svc_throttled_total of one throttle on the router's /metrics, 0 when it has no line yet. */
async function throttledCount(stack: { url: string }, throttle: string): Promise<number> {
  const text = (await call(stack, 'GET', '/metrics', {})).text
  const line = text.split('\n').find((l) => l.startsWith(`svc_throttled_total{throttle="${throttle}"} `))
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1))
}

function randomKey(): string {
  return `sk-${randomBytes(24).toString('base64url')}`
}

function isThrottled(answer: Answer): boolean {
  const retry = Number(answer.headers['retry-after'])
  return isError(answer, 429, 'rate_limit_exceeded') && Number.isInteger(retry) && retry >= 1 && retry <= 60
}

t.test('a bad-key flood from one source: 429 with Retry-After for that source only, and no store read for it', async (t) => {
  const stack = await oneProviderStack(t, { ...BEHIND_PROXY, limits: { auth_failures_per_minute: 20 } })
  const codes: number[] = []
  for (let i = 0; i < 20; i++) codes.push((await chatAs(stack, from(A, { authorization: `Bearer ${randomKey()}` }))).status)
  t.same(new Set(codes), new Set([401]), 'the first 20 failures are answered 401')
  const keys = stack.router.store.keys
  const findCredential = keys.findCredential.bind(keys)
  let reads = 0
  keys.findCredential = (hash) => {
    reads++
    return findCredential(hash)
  }
  const refused: Answer[] = []
  for (let i = 0; i < 200; i++) refused.push(await chatAs(stack, from(A, { authorization: `Bearer ${randomKey()}` })))
  t.ok(refused.every(isThrottled), `every later guess is 429 with Retry-After (${refused[0]!.status} ${refused[0]!.text})`)
  t.equal(reads, 0, 'no key of the throttled source was looked up in the store')
  t.ok(isThrottled(await chatAs(stack, from(A, stack.auth))), 'a valid key from the throttled source waits out the window too')
  t.ok(isThrottled(await call(stack, 'GET', '/v1/api-keys', { headers: from(A, stack.mgmtAuth) })), 'on the management endpoints as well')
  const other = await chatAs(stack, from(B, stack.auth))
  t.equal(other.status, 200, `a valid key from another source is served (${other.text})`)
  t.ok(isError(await chatAs(stack, from(B, { authorization: `Bearer ${randomKey()}` })), 401, 'invalid_api_key'), 'and its bad key is a plain 401')
  t.equal(await throttledCount(stack, 'auth_failures'), 202, '/metrics counts every refusal of the throttle')
})

t.test('without trusted_proxies the peer is the source: X-Forwarded-For cannot spread a flood over made-up sources', async (t) => {
  const stack = await oneProviderStack(t, { limits: { auth_failures_per_minute: 10 } })
  const answers: Answer[] = []
  for (let i = 0; i < 15; i++) answers.push(await chatAs(stack, from(`203.0.113.${100 + i}`, { authorization: `Bearer ${randomKey()}` })))
  t.same(answers.slice(0, 10).map((a) => a.status), new Array(10).fill(401))
  t.ok(answers.slice(10).every(isThrottled), 'the 11th failure on, the peer is refused whatever header it sends')
})

t.test('the source behind trusted proxies is the right-most untrusted hop; a made-up leftmost entry changes nothing', async (t) => {
  const sourceOf = createSourceResolver(['10.0.0.0/8', '127.0.0.1'])
  const head = (peer: string, forwardedFor?: string) => ({ remoteAddress: () => peer, ...(forwardedFor !== undefined && { forwardedFor }) })
  t.equal(sourceOf(head('127.0.0.1', '1.2.3.4, 203.0.113.7, 10.1.1.1')), '203.0.113.7')
  t.equal(sourceOf(head('::ffff:127.0.0.1', '203.0.113.7')), '203.0.113.7', 'a mapped peer is the IPv4 it is')
  t.equal(sourceOf(head('198.51.100.1', '203.0.113.7')), '198.51.100.1', 'an untrusted peer is its own source')
  t.equal(sourceOf(head('127.0.0.1', 'junk, 203.0.113.7')), '203.0.113.7')
  t.equal(sourceOf(head('127.0.0.1', '203.0.113.7, junk')), '127.0.0.1', 'a hop that is no address leaves the last trusted one')
  t.equal(sourceOf(head('127.0.0.1')), '127.0.0.1')
  t.equal(createSourceResolver([])(head('127.0.0.1', '203.0.113.7')), '127.0.0.1', 'no trusted proxies: the header is never read')
  // Bounded memory: ever new sources push the least recent out, never the heap.
  const limit = new SourceLimit({ limit: 3, windowMs: 60_000, maxSources: 100 })
  for (let i = 0; i < 10_000; i++) limit.add(`10.${i >> 8}.${i & 255}.1`, 1000)
  t.equal(limit.size, 100)
})

t.test('a sign-in flood: 429 with Retry-After per source and for everyone, other sources and inference unaffected', async (t) => {
  const stack = await oneProviderStack(t, { ...BEHIND_PROXY, limits: { sign_in_per_source_per_minute: 10, sign_in_per_minute: 30 } })
  const nonce = (source: string) => call(stack, 'GET', '/v1/auth/nonce', { headers: from(source, sameOrigin(stack)) })
  const first: Answer[] = []
  for (let i = 0; i < 10; i++) first.push(await nonce(A))
  t.same(first.map((a) => a.status), new Array(10).fill(200))
  const flood: Answer[] = []
  for (let i = 0; i < 100; i++) flood.push(await nonce(A))
  t.ok(flood.every(isThrottled), `source A is refused (${flood[0]!.status} ${flood[0]!.text})`)
  const verifyFlood = await call(stack, 'POST', '/v1/auth/verify', { headers: from(A, sameOrigin(stack)), body: { message: 'x', signature: '0x' } })
  t.ok(isThrottled(verifyFlood), 'every /v1/auth/* route counts')
  t.equal((await nonce(B)).status, 200, 'source B still gets a nonce')
  t.equal((await chatAs(stack, from(A, stack.auth))).status, 200, 'inference from A is not a sign-in')
  // Everyone's minute: 30 requests in all (10 of A's, 1 of B's, 19 more from fresh sources), then none.
  const spread: Answer[] = []
  for (let i = 0; i < 25; i++) spread.push(await nonce(`198.51.100.${i + 1}`))
  t.same(spread.slice(0, 19).map((a) => a.status), new Array(19).fill(200))
  t.ok(spread.slice(19).every(isThrottled), 'past the global limit every source waits')
  const session = await call(stack, 'GET', '/v1/auth/session', { headers: from('198.51.100.200', sameOrigin(stack)) })
  t.equal(session.status, 401, `a session check still gets its answer (no session), not 429 (${session.text})`)
  const logout = await call(stack, 'POST', '/v1/auth/logout', { headers: from('198.51.100.201', sameOrigin(stack)), body: {} })
  t.equal(logout.status, 200, 'and a logout: neither counts against everyone\'s minute')
  t.equal(await throttledCount(stack, 'sign_in_source'), 101, "/metrics: source A's refusals")
  t.equal(await throttledCount(stack, 'sign_in_global'), 6, "and everyone's")
  t.equal(await throttledCount(stack, 'auth_failures'), 0, 'no failed authentication was throttled')
})

t.test('sign-ins create no account; sessions are capped in all and per wallet', async (t) => {
  const stack = await oneProviderStack(t, { limits: { max_console_sessions: 12 } })
  const wallets = Array.from({ length: 4 }, () => newWallet())
  for (const w of wallets) await signIn(stack, w)
  for (const w of wallets) t.equal(await stack.router.store.accounts.getAccount(w.address.toLowerCase()), null, 'no account for a sign-in alone')
  // One wallet signing in again and again keeps its 8 newest sessions.
  const again = newWallet()
  const sessions = []
  for (let i = 0; i < 9; i++) sessions.push(await signIn(stack, again))
  const whoAmI = (headers: Record<string, string>) => call(stack, 'GET', '/v1/auth/session', { headers })
  t.ok(isError(await whoAmI(sessions[0]!.headers), 401, 'invalid_session'), 'its oldest session ended')
  t.equal((await whoAmI(sessions[8]!.headers)).status, 200)
  t.equal(stack.router.sessions.sessionCount, 12, '4 + 8 sessions: the cap')
  // Full: a further sign-in is refused before its signature is checked, and the nonce stays good.
  const late = newWallet()
  const text = await message(stack, late)
  const full = await verify(stack, text, await late.signMessage({ message: text }))
  t.ok(isError(full, 429, 'rate_limit_exceeded') && full.headers['retry-after'] === '60', `a sign-in past the cap is 429 (${full.status} ${full.text})`)
  t.equal(stack.router.sessions.sessionCount, 12)
  // A logout makes room.
  const out = await call(stack, 'POST', '/v1/auth/logout', { headers: sessions[8]!.headers, body: {} })
  t.equal(out.status, 200)
  const retried = await verify(stack, text, await late.signMessage({ message: text }))
  t.equal(retried.status, 200, retried.text)
  t.ok(cookieOf(retried))
})
