/**
 * The running router picks up registry edits without a restart, and a broken edit keeps the old registry.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import t from 'tap'
import { request } from 'undici'
import { parse, stringify } from 'yaml'
import { addr, startStack } from '../helpers/stack.js'

async function modelIds(url: string): Promise<string[]> {
  const res = await request(url + '/v1/models')
  const body = (await res.body.json()) as { data: { id: string }[] }
  return body.data.map((m) => m.id).sort()
}

async function eventually(check: () => Promise<boolean>, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 25))
  }
  return false
}

t.test('an edited registry is served without a restart; a broken one keeps the previous registry', async (t) => {
  const stack = await startStack(t, [{ address: addr('f'), models: [{ id: 'first' }] }], { registry: { watch: true } })
  t.same(await modelIds(stack.url), ['first'])

  const registry = parse(readFileSync(stack.registryPath, 'utf8'))
  registry.providers[0].models.push({ id: 'second', type: 'chatbot', price: { prompt: 1, completion: 2 } })
  writeFileSync(stack.registryPath, stringify(registry))
  t.ok(await eventually(async () => (await modelIds(stack.url)).includes('second')), 'the new model appears')

  const version = stack.router.table.version
  writeFileSync(stack.registryPath, 'providers: [ { address: "not-an-address" } ]\n')
  await new Promise((r) => setTimeout(r, 400))
  t.same(await modelIds(stack.url), ['first', 'second'], 'a bad file changes nothing')
  t.equal(stack.router.table.version, version)

  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: 'second', messages: [{ role: 'user', content: 'hi' }] }),
  })
  t.equal(res.statusCode, 200, 'the reloaded model routes')
  await res.body.dump()
})
