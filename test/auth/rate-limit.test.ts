/**
 * Per-account request limits through the real router (spec §8, DESIGN.md §4): headers on every inference
 * response, exact at the boundary under concurrency, shared by all keys of an account, 429 with Retry-After.
 */
import t from 'tap'
import { chat, isError, oneProviderStack } from './http.js'

const stack = await oneProviderStack(t)

t.test('every inference response carries the X-RateLimit-* headers', async (t) => {
  const account = await stack.newAccount()
  const key = await stack.newApiKey({ account })
  const first = await chat(stack, key.auth)
  t.equal(first.status, 200)
  t.equal(first.headers['x-ratelimit-limit-requests'], '600', 'the configured default')
  t.equal(first.headers['x-ratelimit-remaining-requests'], '599')
  const reset = Date.parse(first.headers['x-ratelimit-reset-requests'] as string)
  t.match(first.headers['x-ratelimit-reset-requests'], /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
  t.ok(reset > Date.now() && reset <= Date.now() + 60_000, 'within the next minute')
  const error = await chat(stack, key.auth, 'no-such-model')
  t.equal(error.status, 404)
  t.equal(error.headers['x-ratelimit-remaining-requests'], '598', 'errors after admission carry them too')
})

t.test('at the boundary with concurrent requests: exactly the limit is admitted', async (t) => {
  const account = await stack.newAccount()
  await stack.router.credentials.setRateLimit(account, 7)
  const keys = await Promise.all([stack.newApiKey({ account }), stack.newApiKey({ account }), stack.newApiKey({ account })])
  // Warm one key and leave the others cold: admission must be exact on both paths.
  t.equal((await chat(stack, keys[0]!.auth)).status, 200)
  const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => chat(stack, keys[i % 3]!.auth)))
  const ok = answers.filter((a) => a.status === 200)
  const limited = answers.filter((a) => isError(a, 429, 'rate_limit_exceeded'))
  t.equal(ok.length, 6, 'seven per minute, one already used')
  t.equal(limited.length, 24)
  t.strictSame(
    ok.map((a) => Number(a.headers['x-ratelimit-remaining-requests'])).sort(),
    [0, 1, 2, 3, 4, 5],
    'each admitted request saw its own remaining count',
  )
  for (const a of limited) {
    t.equal(a.headers['x-ratelimit-limit-requests'], '7')
    t.equal(a.headers['x-ratelimit-remaining-requests'], '0')
    t.match(a.headers['retry-after'], /^[1-9]\d*$/, 'whole seconds')
    t.ok(Number(a.headers['retry-after']) <= 60)
  }
})

t.test('the limit is per account: more keys give no more throughput, other accounts are not affected', async (t) => {
  const account = await stack.newAccount()
  await stack.router.credentials.setRateLimit(account, 3)
  for (let i = 0; i < 3; i++) t.equal((await chat(stack, (await stack.newApiKey({ account })).auth)).status, 200)
  const fresh = await stack.newApiKey({ account })
  t.ok(isError(await chat(stack, fresh.auth), 429, 'rate_limit_exceeded'), 'a brand-new key of the same account is limited too')
  const other = await stack.newApiKey({ account: await stack.newAccount() })
  t.equal((await chat(stack, other.auth)).status, 200, 'another account is not')
})

t.test('an override back to the default applies on the next request', async (t) => {
  const account = await stack.newAccount()
  const key = await stack.newApiKey({ account })
  await stack.router.credentials.setRateLimit(account, 1)
  t.equal((await chat(stack, key.auth)).status, 200)
  t.equal((await chat(stack, key.auth)).status, 429)
  await stack.router.credentials.setRateLimit(account, null)
  const after = await chat(stack, key.auth)
  t.equal(after.status, 200)
  t.equal(after.headers['x-ratelimit-limit-requests'], '600')
})
