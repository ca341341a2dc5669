/**
 * GET /v1/models/{id} (OpenAI's retrieve-model, issue 42) through the real router with the real `openai` client:
 * the catalog entry exactly as GET /v1/models lists it (an id with a slash included), or 404 model_not_found in
 * the envelope, which the client raises as its NotFoundError.
 */
import OpenAI from 'openai'
import t from 'tap'
import { request } from 'undici'
import { addr, startStack } from '../helpers/stack.js'

t.test('models.retrieve: the entry the list shows, or model_not_found', async (t) => {
  const stack = await startStack(t, [
    { address: addr('a'), models: [{ id: 'm-chat', context_length: 8192 }, { id: 'org/m-slash:free' }] },
    { address: addr('b'), verifiability: 'TeeML', models: [{ id: 'm-chat', formats: ['anthropic'] }] },
  ])
  const client = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
  const list = await client.models.list()
  const listed = new Map(list.data.map((m) => [m.id, m]))
  for (const id of ['m-chat', 'org/m-slash:free']) {
    const model = await client.models.retrieve(id)
    t.same(model, listed.get(id), `${id}: as the list shows it`)
  }
  t.match(await client.models.retrieve('m-chat'), { id: 'm-chat', object: 'model', provider_count: 2, verifiability: 'TeeML', context_length: 8192 })

  // The slash as it is, as a hand-written call may send it.
  const raw = await request(`${stack.url}/v1/models/org/m-slash:free`)
  t.equal(raw.statusCode, 200)
  t.same(await raw.body.json(), listed.get('org/m-slash:free'))

  const missing = await client.models.retrieve('no-such-model').catch((e: unknown) => e)
  t.ok(missing instanceof OpenAI.NotFoundError, 'a NotFoundError')
  t.match(missing, { status: 404, code: 'model_not_found', type: 'not_found_error' })
  t.match((missing as { error: { message: string } }).error.message, /no-such-model/)
  for (const path of ['/v1/models/', '/v1/models/%zz']) {
    const res = await request(stack.url + path)
    t.equal(res.statusCode, 404, path)
    t.match(await res.body.json(), { error: { code: 'model_not_found' } })
  }
})
