/**
 * /readyz beside the API says why in generic words (issue 43, point 7): with PostgreSQL down it answers
 * "store unreachable", never the database's address or the driver's message; that detail is in the log, and
 * in /readyz on the ops port (`ops.separate_port`), which is not the API's interface.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { stringify } from 'yaml'
import { loadConfig } from '../../src/config/index.js'
import { serve, type RunningRouter } from '../../src/serve.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { killChild } from '../helpers/child.js'
import { startPostgres } from '../helpers/postgres.js'
import { addr, DEFAULT_PRICE } from '../helpers/stack.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const pg = await startPostgres(t, { fsync: false })

t.test('PostgreSQL down: "store unreachable" beside the API, the detail in the log and on the ops port', { skip: pg.controllable ? false : 'TEST_PG_URL: an outside server cannot be stopped' }, async (t) => {
  const sim = await startSimulator({ name: 'r' })
  t.teardown(() => sim.close())
  const dir = t.testdir()
  writeFileSync(join(dir, 'providers.yaml'), stringify({ providers: [{ address: addr('a'), url: sim.url, models: [{ id: 'm', type: 'chatbot', price: DEFAULT_PRICE }] }] }))
  const base = {
    server: { host: '127.0.0.1', port: 0 },
    registry: { path: 'providers.yaml', watch: false },
    store: { kind: 'postgres', url: await pg.newDatabase(), connect_timeout_ms: 1000, query_timeout_ms: 1000 },
    health: { probes: false },
    log: { level: 'warn', access_log: false },
  }
  writeFileSync(join(dir, 'api.yaml'), stringify(base))
  writeFileSync(join(dir, 'ops.yaml'), stringify({ ...base, ops: { separate_port: true, port: 0 } }))

  // Beside the API: its own process, its log read.
  const child = spawn(process.execPath, [CLI, 'serve', '--config', join(dir, 'api.yaml')], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => killChild(child))
  let log = ''
  child.stderr.on('data', (b: Buffer) => (log += b.toString()))
  const url = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString()
      const m = /listening on (http:\/\/\S+)/.exec(out)
      if (m !== null) resolve(m[1]!)
    })
    child.once('exit', (code) => reject(new Error(`exited ${code}: ${log}`)))
  })
  let ops: RunningRouter | null = null
  t.teardown(() => ops?.close())
  ops = await serve(loadConfig({ file: join(dir, 'ops.yaml'), env: {} }))
  t.equal((await request(`${url}/readyz`)).statusCode, 200)

  await pg.stop()
  t.teardown(() => pg.start())
  const beside = await request(`${url}/readyz`)
  t.equal(beside.statusCode, 503)
  const body = await beside.body.text()
  t.strictSame(JSON.parse(body), { status: 'not_ready', reason: 'store unreachable' }, 'generic words on the API port')
  t.notMatch(body, /127\.0\.0\.1|ECONNREFUSED|:\d{4,5}/, 'no address, no driver message')
  const own = await request(`${ops.opsUrl}/readyz`)
  t.equal(own.statusCode, 503)
  const detail = (await own.body.json()) as { reason: string }
  t.match(detail.reason, /^store unreachable: ./, 'the detail on the ops port')
  const logged = log.split('\n').filter((l) => l.includes('"not ready"'))
  t.equal(logged.length, 1, 'the detail logged once')
  t.match(logged[0], /store unreachable: ./)
  await request(`${url}/readyz`).then((r) => r.body.dump())
  t.equal(log.split('\n').filter((l) => l.includes('"not ready"')).length, 1, 'not again for the same reason')
})
