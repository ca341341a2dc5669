/**
 * The common inference stages: the body must be read even when authentication completes after the route
 * callback (a key-cache miss on a store whose reads are truly asynchronous).
 */
import t from 'tap'
import { request } from 'undici'
import { addr, startStack } from '../helpers/stack.js'

t.test('a slow store read on a key-cache miss does not lose the request body', async (t) => {
  const stack = await startStack(t, [{ address: addr('9'), models: [{ id: 'm' }] }])
  const store = stack.router.store.keys
  const find = store.findCredential.bind(store)
  // A networked store answers on a later turn of the event loop, long after uWS's route callback returned.
  store.findCredential = (hash: string) => new Promise((resolve) => setTimeout(() => resolve(find(hash)), 30))
  t.teardown(() => {
    store.findCredential = find
  })
  const fresh = await stack.newApiKey()
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${fresh.key}` },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    headersTimeout: 5000,
  })
  t.equal(res.statusCode, 200)
  const body = (await res.body.json()) as { x_svc_trace: { request_id: string } }
  t.ok(body.x_svc_trace.request_id)
})

t.test('a refused request (bad key) is answered at once even with a large body still arriving', async (t) => {
  const stack = await startStack(t, [{ address: addr('8'), models: [{ id: 'm' }] }])
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-nope' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(200_000) }] }),
  })
  t.equal(res.statusCode, 401)
  t.equal(((await res.body.json()) as { error: { code: string } }).error.code, 'invalid_api_key')
})
