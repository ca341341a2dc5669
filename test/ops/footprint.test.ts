/**
 * What a router loads depends on what its config asks for (src/compose/table.ts, src/store/open.ts): PostgreSQL's
 * client, ioredis, viem (the chain source and the simulator's TEE keys) cost a router that uses none of them
 * about 45 MB of memory, so they are imported only when configured. A module-resolution hook in the spawned router reports
 * every package it imports (ESM imports: a CommonJS require(), as of better-sqlite3, does not pass through it).
 */
import t from 'tap'
import { spawnRouter, type SpawnedRouter } from '../helpers/spawn-router.js'

const PROVIDER = {
  address: '0x1111111111111111111111111111111111111111',
  // Never asked: nothing is sent to it.
  url: 'http://127.0.0.1:9',
  trust_mode: 'standard',
  models: [{ id: 'm', type: 'chatbot', price: { prompt: '0.000001', completion: '0.000002' } }],
}

/** A resolve hook, registered before the router's code runs, that names each package once on stderr. */
const HOOK = `export async function resolve(specifier, context, next) {
  const r = await next(specifier, context)
  const at = r.url.lastIndexOf('/node_modules/')
  if (at >= 0) {
    const parts = r.url.slice(at + 14).split('/')
    const name = parts[0].startsWith('@') ? parts[0] + '/' + parts[1] : parts[0]
    globalThis.seen ??= new Set()
    if (!globalThis.seen.has(name)) { globalThis.seen.add(name); process.stderr.write('package loaded: ' + name + '\\n') }
  }
  return r
}`
const REGISTER = `import { register } from 'node:module'; register(${JSON.stringify('data:text/javascript,' + encodeURIComponent(HOOK))})`
const NODE_ARGS = ['--import', 'data:text/javascript,' + encodeURIComponent(REGISTER)]

function packages(router: SpawnedRouter): Set<string> {
  const out = new Set<string>()
  for (const line of router.stderr().split('\n')) if (line.startsWith('package loaded: ')) out.add(line.slice(16))
  return out
}

t.test('a router on SQLite with a file registry loads neither pg, ioredis nor viem', async (t) => {
  const router = await spawnRouter(t, [PROVIDER], {}, { captureStderr: true, nodeArgs: NODE_ARGS })
  const loaded = packages(router)
  // The hook sees what the router uses: without this the test could not fail.
  t.ok(loaded.has('undici') && loaded.has('pino'), `the hook saw the router's own packages (${[...loaded].join(', ')})`)
  for (const name of ['pg', 'ioredis', 'viem']) t.notOk(loaded.has(name), `${name} is not loaded`)
})

t.test('with redis.url set, ioredis is loaded (and a Redis that is not there leaves the router serving)', async (t) => {
  const router = await spawnRouter(t, [PROVIDER], { redis: { url: 'redis://127.0.0.1:9/0' } }, { captureStderr: true, nodeArgs: NODE_ARGS })
  const loaded = packages(router)
  t.ok(loaded.has('ioredis'), 'ioredis is loaded')
  t.notOk(loaded.has('pg'), 'pg is not')
  const res = await fetch(router.url + '/healthz')
  t.equal(res.status, 200, 'the router answers')
})
