/**
 * The composition root's lifecycle (src/compose/part.ts, src/serve.ts): parts stop in the reverse of the order
 * they were built, and a start that fails part-way stops every part it built, not only those after the listener.
 */
import { createServer, type Server } from 'node:net'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { stringify } from 'yaml'
import { Lifecycle, part } from '../../src/compose/part.js'
import { loadConfig } from '../../src/config/index.js'
import { serve } from '../../src/serve.js'
import { eventually } from '../helpers/wait.js'

t.test('a lifecycle stops its parts last built first, each once', async (t) => {
  const life = new Lifecycle()
  const stopped: string[] = []
  t.equal(await life.add(part('a', () => void stopped.push('a'))), 'a')
  t.equal(await life.add(part('b')), 'b', 'a part with nothing to stop')
  t.equal(await life.add(Promise.resolve(part('c', async () => void stopped.push('c')))), 'c')
  await life.stop()
  await life.stop()
  t.same(stopped, ['c', 'a'])
})

function listenOn(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)))
}

const watchers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'FSEventWrap').length

t.test('a start that fails after the registry is watched stops watching it', async (t) => {
  const dir = t.testdir()
  // The simulated provider the registry asks for cannot listen: its port is taken. The registry file is
  // watched by then, and the store open.
  const taken = createServer()
  const port = await listenOn(taken)
  t.teardown(() => taken.close())
  const registry = join(dir, 'registry.yaml')
  writeFileSync(
    registry,
    stringify({
      providers: [
        {
          address: '0x' + '1'.repeat(40),
          url: `http://127.0.0.1:${port}`,
          simulate: { ttft_ms: 1, tokens_per_s: 1000 },
          models: [{ id: 'm', price: { prompt: 0.1, completion: 0.1 } }],
        },
      ],
    }),
  )
  writeFileSync(
    join(dir, 'config.yaml'),
    stringify({ server: { port: 0 }, registry: { path: registry, watch: true }, store: { path: join(dir, 'router.db') }, log: { level: 'error' }, health: { probes: false } }),
  )
  const before = watchers()
  await t.rejects(serve(loadConfig({ file: join(dir, 'config.yaml'), env: {} })))
  // A closed watcher's handle goes with libuv's close callback, a turn or so later (Node 24 counts it until then).
  t.ok(await eventually(() => watchers() === before, 2_000), 'the registry file is no longer watched')
})
