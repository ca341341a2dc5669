/**
 * Console sign-in with a wallet (EIP-4361) through the real router: real SIWE messages signed with local viem
 * keys, the checks each refusal guards (domain, URI, chain, nonce reuse, expiry, signer), the session cookie,
 * the CSRF rule, logout, and the idle and absolute expiry of a session (on a router of its own with a clock the
 * test moves).
 */
import t from 'tap'
import { join } from 'node:path'
import { createKeyAuthenticators } from '../../src/auth/authenticate.js'
import { Credentials } from '../../src/auth/credentials.js'
import { KeyCache } from '../../src/auth/key-cache.js'
import { ConsoleOrigins } from '../../src/auth/console-origins.js'
import { SessionBook } from '../../src/auth/session.js'
import { createSessionAuthenticators } from '../../src/auth/session-auth.js'
import { listen, type AppHandle } from '../../src/server/app.js'
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { createAuthSession } from '../../src/surfaces/auth-session.js'
import { SignerRecovery } from '../../src/tee/signer-recovery.js'
import { createManagementKeys } from '../../src/surfaces/management-keys.js'
import { call, isError, oneProviderStack } from '../auth/http.js'
import { cookieOf, message, newWallet, nonce, sameOrigin, signIn, verify } from './wallet.js'

const stack = await oneProviderStack(t)

t.test('a signed message opens a session: cookie attributes; the account comes with its first key, with no deposit', async (t) => {
  const wallet = newWallet()
  const text = await message(stack, wallet)
  const answer = await verify(stack, text, await wallet.signMessage({ message: text }))
  t.equal(answer.status, 200, answer.text)
  t.equal(answer.json.account, wallet.address.toLowerCase())
  t.ok(Date.parse(answer.json.expires_at) > Date.now())
  const set = String(answer.headers['set-cookie'])
  t.match(set, /^svc_session=[A-Za-z0-9_-]{43};/)
  t.match(set, /; HttpOnly/)
  t.match(set, /; SameSite=Strict/)
  t.match(set, /; Path=\//)
  t.notMatch(set, /Secure/, 'not Secure over plain HTTP')
  t.equal(answer.headers['cache-control'], 'no-store')
  t.equal(await stack.router.store.accounts.getAccount(wallet.address.toLowerCase()), null, 'a sign-in alone creates no account')
  const balance = await call(stack, 'GET', '/v1/account/balance', { headers: { ...sameOrigin(stack), cookie: cookieOf(answer) } })
  t.equal(balance.status, 200, balance.text)
  t.equal(balance.json.total_balance ?? balance.json.balance ?? '0', '0', 'no deposit')
  const created = await call(stack, 'POST', '/v1/management-keys', { headers: { ...sameOrigin(stack), cookie: cookieOf(answer) }, body: { name: 'first', scopes: ['account:read'] } })
  t.equal(created.status, 201, created.text)
  t.ok(await stack.router.store.accounts.getAccount(wallet.address.toLowerCase()), 'its first management key created the account')
  const session = await call(stack, 'GET', '/v1/auth/session', { headers: { ...sameOrigin(stack), cookie: cookieOf(answer) } })
  t.equal(session.json.account, wallet.address.toLowerCase())
})

t.test('the cookie is Secure when the browser reached the console over TLS', async (t) => {
  const wallet = newWallet()
  const https = `https://${new URL(stack.url).host}`
  const headers = { origin: https, 'sec-fetch-site': 'same-origin' }
  const n = (await call(stack, 'GET', '/v1/auth/nonce', { headers })).json
  t.equal(n.uri, `${https}/console`)
  const text = await message(stack, wallet, { uri: n.uri, nonce: n.nonce })
  const answer = await verify(stack, text, await wallet.signMessage({ message: text }), headers)
  t.equal(answer.status, 200, answer.text)
  t.match(String(answer.headers['set-cookie']), /; Secure/)
})

t.test('GET /v1/auth/nonce says what the message must carry', async (t) => {
  const answer = await call(stack, 'GET', '/v1/auth/nonce', { headers: sameOrigin(stack) })
  t.equal(answer.status, 200)
  t.match(answer.json.nonce, /^[A-Za-z0-9]{8,}$/)
  t.equal(answer.json.domain, new URL(stack.url).host)
  t.equal(answer.json.uri, `${new URL(stack.url).origin}/console`)
  t.equal(answer.json.chain_id, 1)
  t.equal(answer.json.version, '1')
  t.not(answer.json.nonce, (await call(stack, 'GET', '/v1/auth/nonce')).json.nonce, 'a new nonce each time')
})

t.test('refused: a message for another domain', async (t) => {
  const wallet = newWallet()
  const text = await message(stack, wallet, { domain: 'evil.example' })
  const answer = await verify(stack, text, await wallet.signMessage({ message: text }))
  t.ok(isError(answer, 401, 'invalid_siwe_message'), answer.text)
  t.match(answer.json.error.message, /evil\.example/)
  t.equal(answer.headers['set-cookie'], undefined)
})

t.test("refused: a phishing site's relay, a message for its own domain sent with its own Host", async (t) => {
  // What a page at evil.example gets a wallet to sign (the wallet sees its own page's domain: no warning),
  // replayed here from the attacker's server with the Host and Origin it likes.
  const evil = { host: 'evil.example', origin: 'http://evil.example', 'sec-fetch-site': 'same-origin' }
  const asked = await call(stack, 'GET', '/v1/auth/nonce', { headers: evil })
  t.ok(isError(asked, 400, 'invalid_request'), asked.text)
  t.match(asked.json.error.message, /server\.public_origins/)
  const wallet = newWallet()
  const text = await message(stack, wallet, { domain: 'evil.example', uri: 'http://evil.example/console' })
  const answer = await verify(stack, text, await wallet.signMessage({ message: text }), evil)
  t.ok(isError(answer, 401, 'invalid_siwe_message'), answer.text)
  t.equal(answer.headers['set-cookie'], undefined, 'no session')
  t.equal(await stack.router.store.accounts.getAccount(wallet.address.toLowerCase()), null, 'no account made for the wallet')
})

t.test('a message on this origin under another of its names (localhost) is accepted; on another port it is not', async (t) => {
  const port = new URL(stack.url).port
  const wallet = newWallet()
  const v6 = await call(stack, 'GET', '/v1/auth/nonce', { headers: { host: `[::1]:${port}` } })
  t.ok(isError(v6, 400, 'invalid_request'), 'no sign-in can name an IPv6 literal: refused at the nonce, not at verify')
  const local = `http://localhost:${port}`
  const headers = { host: `localhost:${port}`, origin: local, 'sec-fetch-site': 'same-origin' }
  const n = (await call(stack, 'GET', '/v1/auth/nonce', { headers })).json
  t.equal(n.uri, `${local}/console`)
  const text = await message(stack, wallet, { domain: `localhost:${port}`, uri: n.uri, nonce: n.nonce })
  t.equal((await verify(stack, text, await wallet.signMessage({ message: text }), headers)).status, 200)
  const other = await message(stack, wallet, { domain: 'localhost:1', uri: 'http://localhost:1/console' })
  t.ok(isError(await verify(stack, other, await wallet.signMessage({ message: other })), 401, 'invalid_siwe_message'))
  const mixed = await message(stack, wallet, { uri: `${local}/console` })
  t.ok(isError(await verify(stack, mixed, await wallet.signMessage({ message: mixed })), 401, 'invalid_siwe_message'), 'the URI must be on the domain it names')
})

t.test('server.public_origins: the console behind a proxy signs in at its public name only', async (t) => {
  const proxied = await oneProviderStack(t, { server: { public_origins: ['https://console.example'] } })
  const wallet = newWallet()
  const headers = { host: 'console.example', origin: 'https://console.example', 'sec-fetch-site': 'same-origin' }
  // The console page's own GET: a browser sends no Origin with a same-origin GET.
  const n = (await call(proxied, 'GET', '/v1/auth/nonce', { headers: { host: 'console.example', 'sec-fetch-site': 'same-origin' } })).json
  t.equal(n.domain, 'console.example')
  t.equal(n.uri, 'https://console.example/console', 'https: the only way this console is reached')
  const text = await message(proxied, wallet, { domain: 'console.example', uri: n.uri, nonce: n.nonce })
  const answer = await verify(proxied, text, await wallet.signMessage({ message: text }), headers)
  t.equal(answer.status, 200, answer.text)
  t.match(String(answer.headers['set-cookie']), /; Secure/)
  const again = (await call(proxied, 'GET', '/v1/auth/nonce', { headers })).json.nonce
  const direct = await message(proxied, wallet, { nonce: again })
  const refused = await verify(proxied, direct, await wallet.signMessage({ message: direct }))
  t.ok(isError(refused, 401, 'invalid_siwe_message'), 'its listening address is not where it is reached')
  t.match(refused.json.error.message, /https:\/\/console\.example/)
})

t.test('refused: a URI on another origin, another chain', async (t) => {
  const wallet = newWallet()
  const other = await message(stack, wallet, { uri: 'https://evil.example/console' })
  t.ok(isError(await verify(stack, other, await wallet.signMessage({ message: other })), 401, 'invalid_siwe_message'))
  const chain = await message(stack, wallet, { chainId: 10 })
  const answer = await verify(stack, chain, await wallet.signMessage({ message: chain }))
  t.ok(isError(answer, 401, 'invalid_siwe_message'))
  t.match(answer.json.error.message, /chain ID 10/)
})

t.test('refused: a nonce used twice, a nonce never issued', async (t) => {
  const wallet = newWallet()
  const once = await nonce(stack)
  const first = await message(stack, wallet, { nonce: once })
  t.equal((await verify(stack, first, await wallet.signMessage({ message: first }))).status, 200)
  const again = await message(stack, wallet, { nonce: once, issuedAt: new Date(Date.now() + 1000) })
  const answer = await verify(stack, again, await wallet.signMessage({ message: again }))
  t.ok(isError(answer, 401, 'invalid_siwe_message'), answer.text)
  t.match(answer.json.error.message, /nonce/)
  const replay = await verify(stack, first, await wallet.signMessage({ message: first }))
  t.ok(isError(replay, 401, 'invalid_siwe_message'), 'the very same signed message replayed')
  const made = await message(stack, wallet, { nonce: 'abcdefgh12345678' })
  t.ok(isError(await verify(stack, made, await wallet.signMessage({ message: made })), 401, 'invalid_siwe_message'))
})

t.test('refused: a nonce is spent by a failed attempt too', async (t) => {
  const wallet = newWallet()
  const n = await nonce(stack)
  const wrong = await message(stack, wallet, { nonce: n, domain: 'evil.example' })
  t.equal((await verify(stack, wrong, await wallet.signMessage({ message: wrong }))).status, 401)
  const right = await message(stack, wallet, { nonce: n })
  t.ok(isError(await verify(stack, right, await wallet.signMessage({ message: right })), 401, 'invalid_siwe_message'))
})

t.test('refused: an expired message; a message not yet issued', async (t) => {
  const wallet = newWallet()
  const expired = await message(stack, wallet, { issuedAt: new Date(Date.now() - 120_000), expirationTime: new Date(Date.now() - 1000) })
  const answer = await verify(stack, expired, await wallet.signMessage({ message: expired }))
  t.ok(isError(answer, 401, 'invalid_siwe_message'), answer.text)
  t.match(answer.json.error.message, /expired/)
  const future = await message(stack, wallet, { issuedAt: new Date(Date.now() + 3_600_000) })
  t.ok(isError(await verify(stack, future, await wallet.signMessage({ message: future })), 401, 'invalid_siwe_message'))
})

t.test("a message's expiration time caps the session", async (t) => {
  const wallet = newWallet()
  const until = new Date(Date.now() + 90_000)
  const text = await message(stack, wallet, { expirationTime: until })
  const answer = await verify(stack, text, await wallet.signMessage({ message: text }))
  t.equal(answer.status, 200)
  t.equal(Date.parse(answer.json.expires_at), until.getTime())
  t.match(String(answer.headers['set-cookie']), /Max-Age=(8\d|90)(;|$)/)
})

t.test("refused: another wallet's signature; a malformed signature or message", async (t) => {
  const claimed = newWallet()
  const signer = newWallet()
  const text = await message(stack, claimed)
  const answer = await verify(stack, text, await signer.signMessage({ message: text }))
  t.ok(isError(answer, 401, 'invalid_siwe_message'), answer.text)
  t.match(answer.json.error.message, /signature/)
  t.equal(await stack.router.store.accounts.getAccount(claimed.address.toLowerCase()), null, 'no account made')
  t.ok(isError(await verify(stack, await message(stack, claimed), '0x1234'), 400, 'invalid_request'))
  t.ok(isError(await verify(stack, 'hello', await signer.signMessage({ message: 'hello' })), 401, 'invalid_siwe_message'))
  const noBody = await call(stack, 'POST', '/v1/auth/verify', { headers: sameOrigin(stack), body: {} })
  t.ok(isError(noBody, 400, 'invalid_request'))
})

t.test('missing cookie: the console endpoints answer 401', async (t) => {
  for (const path of ['/v1/management-keys', '/v1/api-keys', '/v1/account/balance']) {
    t.ok(isError(await call(stack, 'GET', path, { headers: sameOrigin(stack) }), 401, 'missing_authorization'), path)
  }
  t.ok(isError(await call(stack, 'GET', '/v1/auth/session', { headers: sameOrigin(stack) }), 401, 'invalid_session'))
  const unknown = { ...sameOrigin(stack), cookie: 'svc_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }
  t.ok(isError(await call(stack, 'GET', '/v1/management-keys', { headers: unknown }), 401, 'invalid_session'))
})

t.test('cross-site requests are refused, with the cookie or at sign-in', async (t) => {
  const { cookie } = await signIn(stack)
  const evil = { origin: 'https://evil.example', cookie }
  const crossSite = { 'sec-fetch-site': 'cross-site', cookie }
  const noMetadata = { cookie }
  for (const headers of [evil, crossSite, noMetadata]) {
    const answer = await call(stack, 'POST', '/v1/management-keys', { headers, body: { name: 'x', scopes: ['keys:read'] } })
    t.ok(isError(answer, 403, 'access_denied'), JSON.stringify(Object.keys(headers)))
    t.ok(isError(await call(stack, 'POST', '/v1/api-keys', { headers, body: { name: 'x' } }), 403, 'access_denied'))
  }
  t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: crossSite }), 403, 'access_denied'), 'a cross-site read')
  t.ok(isError(await call(stack, 'GET', '/v1/api-keys', { headers: evil }), 403, 'access_denied'), 'a read from another origin')
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: noMetadata })).status, 200, 'a read without browser metadata is no CSRF')
  t.equal((await call(stack, 'POST', '/v1/api-keys', { headers: { cookie, origin: new URL(stack.url).origin }, body: { name: 'ok' } })).status, 201,
    'an Origin of this host, from a browser without Fetch Metadata')
  const wallet = newWallet()
  const text = await message(stack, wallet)
  const loginCsrf = await verify(stack, text, await wallet.signMessage({ message: text }), { origin: 'https://evil.example' })
  t.ok(isError(loginCsrf, 403, 'access_denied'), 'a sign-in posted from another site')
  t.ok(isError(await call(stack, 'POST', '/v1/auth/logout', { headers: crossSite }), 403, 'access_denied'))
})

t.test('signing in again starts a new session and ends the one the browser held', async (t) => {
  const first = await signIn(stack)
  const text = await message(stack, first.wallet)
  const again = await verify(stack, text, await first.wallet.signMessage({ message: text }), first.headers)
  t.equal(again.status, 200)
  t.not(cookieOf(again), first.cookie, 'a new token')
  t.ok(isError(await call(stack, 'GET', '/v1/management-keys', { headers: first.headers }), 401, 'invalid_session'), 'the old one is gone')
  t.equal((await call(stack, 'GET', '/v1/management-keys', { headers: { ...sameOrigin(stack), cookie: cookieOf(again) } })).status, 200)
})

t.test('logout ends the session and clears the cookie', async (t) => {
  const { headers } = await signIn(stack)
  t.equal((await call(stack, 'GET', '/v1/management-keys', { headers })).status, 200)
  const out = await call(stack, 'POST', '/v1/auth/logout', { headers })
  t.equal(out.status, 200)
  t.match(String(out.headers['set-cookie']), /^svc_session=; .*Max-Age=0/)
  t.ok(isError(await call(stack, 'GET', '/v1/management-keys', { headers }), 401, 'invalid_session'), 'the old cookie is dead')
  t.ok(isError(await call(stack, 'GET', '/v1/account/balance', { headers }), 401, 'invalid_session'))
})

t.test('a session acts with every scope on the api-keys and account endpoints', async (t) => {
  const { headers, wallet } = await signIn(stack)
  const created = await call(stack, 'POST', '/v1/api-keys', { headers, body: { name: 'from the console' } })
  t.equal(created.status, 201, created.text)
  const listed = await call(stack, 'GET', '/v1/api-keys', { headers })
  t.strictSame(listed.json.data.map((k: { key_id: string }) => k.key_id), [created.json.key_id])
  const keys = await stack.router.store.keys.listApiKeys(wallet.address.toLowerCase())
  t.equal(keys.length, 1, "the key is the wallet's account's")
  t.equal((await call(stack, 'PATCH', `/v1/api-keys/${created.json.key_id}`, { headers, body: { name: 'renamed' } })).json.name, 'renamed')
  t.equal((await call(stack, 'DELETE', `/v1/api-keys/${created.json.key_id}`, { headers })).status, 200)
  for (const path of ['/v1/account/balance', '/v1/account/funds', '/v1/account/usage/stats']) {
    t.equal((await call(stack, 'GET', path, { headers })).status, 200, path)
  }
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: { ...headers, ...stack.mgmtAuth } })).json.data.length >= 1, true,
    'a bearer key, when sent, decides over the cookie')
})

t.test('sessions expire when idle and at their absolute end', async (t) => {
  let now = Date.now()
  let store: SqliteStore | null = null
  let app: AppHandle | null = null
  // Registered before t.testdir(): the server and the store are closed before the directory is removed
  // (test/helpers/stack.ts).
  t.teardown(async () => {
    app?.close()
    await store?.close()
  })
  store = await openSqliteStore({ path: join(t.testdir(), 'svc.db') })
  const cache = new KeyCache(store.keys, { defaultRateLimit: 60 })
  const keys = createKeyAuthenticators(cache, store.keys)
  const sessions = new SessionBook({ idleMs: 60_000, absoluteMs: 300_000, now: () => now })
  const auth = createSessionAuthenticators(sessions, keys)
  const mgmt = createManagementKeys({ authenticate: auth.sessionOnly, credentials: new Credentials(store, cache), store })
  let origins: ConsoleOrigins | null = null
  const recovery = new SignerRecovery()
  t.teardown(() => recovery.close())
  const signInRoutes = createAuthSession({ sessions, recover: (input) => recovery.recover(input), origins: () => origins! })
  app = await listen('127.0.0.1', 0, [
    { method: 'get', pattern: '/v1/auth/nonce', handler: signInRoutes.nonce },
    { method: 'post', pattern: '/v1/auth/verify', handler: signInRoutes.verify },
    { method: 'get', pattern: '/v1/management-keys', handler: mgmt.list },
  ])
  origins = ConsoleOrigins.listening('127.0.0.1', app.port)
  const site = { url: app.url }
  const idle = await signIn(site)
  const list = () => call(site, 'GET', '/v1/management-keys', { headers: idle.headers })
  now += 59_000
  t.equal((await list()).status, 200, 'used within the idle time')
  now += 59_000
  t.equal((await list()).status, 200, 'each use restarts the idle clock')
  now += 60_000
  t.ok(isError(await list(), 401, 'invalid_session'), 'idle for the whole idle time')

  const busy = await signIn(site)
  for (let i = 0; i < 5; i++) {
    now += 50_000
    t.equal((await call(site, 'GET', '/v1/management-keys', { headers: busy.headers })).status, 200)
  }
  now += 50_000
  t.ok(isError(await call(site, 'GET', '/v1/management-keys', { headers: busy.headers }), 401, 'invalid_session'), 'past the absolute expiry')

  const issued = await nonce(site)
  now += 5 * 60_000
  const wallet = newWallet()
  const late = await message(site, wallet, { nonce: issued, issuedAt: new Date(now) })
  t.ok(isError(await verify(site, late, await wallet.signMessage({ message: late })), 401, 'invalid_siwe_message'), 'an expired nonce')
})

t.test('the signature is recovered in the worker, never on the event loop; a full worker queue is a 429', async (t) => {
  const sessions = new SessionBook()
  const recovery = new SignerRecovery()
  const jammed = new SignerRecovery(0)
  t.teardown(() => Promise.all([recovery.close(), jammed.close()]))
  let useJammed = false
  let origins: ConsoleOrigins | null = null
  const routes = createAuthSession({ sessions, recover: (input) => (useJammed ? jammed : recovery).recover(input), origins: () => origins! })
  const app = await listen('127.0.0.1', 0, [
    { method: 'get', pattern: '/v1/auth/nonce', handler: routes.nonce },
    { method: 'post', pattern: '/v1/auth/verify', handler: routes.verify },
  ])
  t.teardown(() => app.close())
  origins = ConsoleOrigins.listening('127.0.0.1', app.port)
  const site = { url: app.url }
  await signIn(site)
  t.equal(recovery.completed, 1, 'the signer came from the worker')
  const wallet = newWallet()
  const text = await message(site, wallet)
  const other = newWallet()
  t.ok(isError(await verify(site, text, await other.signMessage({ message: text })), 401, 'invalid_siwe_message'), "another wallet's signature")
  t.equal(recovery.completed, 2)
  useJammed = true
  const queued = await message(site, wallet)
  const busy = await verify(site, queued, await wallet.signMessage({ message: queued }))
  t.ok(isError(busy, 429, 'rate_limit_exceeded') && busy.headers['retry-after'] === '5', `no room in the queue: ${busy.status} ${busy.text}`)
})
