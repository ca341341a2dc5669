/**
 * The multipart surfaces admit a request's head before they judge its body, as the JSON surfaces do (DESIGN.md
 * §5: auth → rate limit → routing headers → body). A body that is not multipart at all is a 400 only for an
 * admitted key: without a key it is 401 missing_authorization, with an unknown one 401 invalid_api_key, with an
 * mk- key 403 (spec §4.1, §5, §7), exactly what /v1/images/generations answers; and the 400 of an sk- key carries
 * the X-RateLimit-* headers and counts against the account's limit (spec §4.8).
 */
import t from 'tap'
import { request } from 'undici'
import { startStack, type Stack } from '../helpers/stack.js'
import { mediaProviders } from './fixtures.js'

const MULTIPART = ['/v1/images/edits', '/v1/async/images/edits', '/v1/audio/transcriptions']
const NOT_MULTIPART = 'Content-Type must be multipart/form-data with a boundary'

async function post(stack: Stack, path: string, auth: Record<string, string>) {
  const res = await request(stack.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: '{}' })
  const json = (await res.body.json()) as any
  return { status: res.statusCode, headers: res.headers, code: json.error?.code as string, message: json.error?.message as string, requestId: json.request_id }
}

t.test('a body that is not multipart, without a usable key: the refusal of the key, as on the JSON surface', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const cases: [string, Record<string, string>, number, string][] = [
    ['no key', {}, 401, 'missing_authorization'],
    ['an unknown sk- key', { authorization: 'Bearer sk-' + '0'.repeat(48) }, 401, 'invalid_api_key'],
    ['an mk- key', stack.mgmtAuth, 403, 'insufficient_scope'],
  ]
  for (const [label, auth, status, code] of cases) {
    const json = await post(stack, '/v1/images/generations', auth)
    t.same([json.status, json.code], [status, code], `${label}: the JSON surface`)
    for (const path of MULTIPART) {
      const res = await post(stack, path, auth)
      t.same([res.status, res.code], [status, code], `${label}: ${path}`)
      t.ok(res.requestId, 'enveloped')
      t.equal(res.headers['x-ratelimit-limit-requests'], undefined, 'no rate-limit headers before a key is known')
    }
  }
  t.same(await stack.router.store.jobs.unfinishedJobs(), [], 'no job')
})

t.test('with an sk- key: 400 with the rate-limit headers, counted against the limit like any inference request', async (t) => {
  const stack = await startStack(t, mediaProviders(), { limits: { requests_per_minute: 4 } })
  let remaining = 4
  for (const path of MULTIPART) {
    const res = await post(stack, path, stack.auth)
    t.equal(res.status, 400, path)
    t.equal(res.code, 'invalid_request')
    t.equal(res.message, NOT_MULTIPART)
    t.equal(res.headers['x-ratelimit-limit-requests'], '4')
    t.equal(res.headers['x-ratelimit-remaining-requests'], String(--remaining), 'counted')
    t.ok(res.headers['x-ratelimit-reset-requests'])
    t.equal(res.headers['x-request-id'], res.requestId)
  }
  t.equal((await post(stack, '/v1/images/generations', stack.auth)).headers['x-ratelimit-remaining-requests'], '0', 'one limit for all surfaces')
  for (const path of MULTIPART) {
    const limited = await post(stack, path, stack.auth)
    t.same([limited.status, limited.code], [429, 'rate_limit_exceeded'], `${path}: the limit comes before the body`)
    t.ok(Number(limited.headers['retry-after']) >= 1)
  }
})
