/**
 * `svc-router serve --workers N` (src/workers.ts): N processes on one port over one PostgreSQL, a worker that
 * dies started again, SIGTERM ends them all; refused on SQLite (each process would hold budgets of its own).
 */
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { stringify } from 'yaml'
import { startSimulator } from '../../src/simulator/simulator.js'
import { freePort, startPostgres } from '../helpers/postgres.js'
import { addr, DEFAULT_PRICE } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const WALLET = '0x' + '7'.repeat(40)

/** The live child processes of `pid`, from /proc (field 4 of /proc/N/stat is the parent's pid). */
function childrenOf(pid: number): number[] {
  const out: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(name)) continue
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (Number(fields[1]) === pid && fields[0] !== 'Z') out.push(Number(name))
    } catch {
      // gone meanwhile
    }
  }
  return out
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

t.test('--workers above 1 is refused on SQLite and without a fixed port', async (t) => {
  const dir = t.testdir()
  writeFileSync(join(dir, 'c.yaml'), stringify({ server: { port: 0 }, store: { path: join(dir, 'svc.db') } }))
  const sqlite = spawnSync(process.execPath, [CLI, 'serve', '--config', join(dir, 'c.yaml'), '--workers', '2'], { encoding: 'utf8' })
  t.equal(sqlite.status, 2)
  t.match(sqlite.stderr, /--workers above 1 needs store\.kind: postgres/)
  const junk = spawnSync(process.execPath, [CLI, 'serve', '--config', join(dir, 'c.yaml'), '--workers', 'x'], { encoding: 'utf8' })
  t.equal(junk.status, 2)
  t.match(junk.stderr, /--workers takes a whole number from 1 to 64/)
})

t.test('two workers share one port on PostgreSQL; a dead worker is started again; SIGTERM stops all', async (t) => {
  const postgres = await startPostgres(t)
  const url = await postgres.newDatabase()
  const sim = await startSimulator({ name: 'workers', ttftMs: 1, tokensPerS: 5_000, completionTokens: 4 })
  t.teardown(() => sim.close())
  const dir = t.testdir()
  const port = await freePort()
  writeFileSync(join(dir, 'providers.yaml'), stringify({ providers: [{ address: addr('7'), url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: 'm-chat', type: 'chatbot', price: DEFAULT_PRICE }] }] }))
  const config = join(dir, 'config.yaml')
  writeFileSync(
    config,
    stringify({
      server: { host: '127.0.0.1', port },
      registry: { path: 'providers.yaml', watch: false },
      store: { kind: 'postgres', url },
      replicas: { heartbeat_ms: 200, fence_ms: 1_000, dead_after_ms: 3_000 },
      log: { level: 'error' },
      health: { probes: false },
    }),
  )
  const cli = (...args: string[]): string => spawnSync(process.execPath, [CLI, ...args, '--config', config], { encoding: 'utf8' }).stdout
  const supervisor = spawn(process.execPath, [CLI, 'serve', '--config', config, '--workers', '2'], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    for (const pid of childrenOf(supervisor.pid!)) process.kill(pid, 'SIGKILL')
    supervisor.kill('SIGKILL')
  })
  let out = ''
  supervisor.stdout!.on('data', (b: Buffer) => (out += b.toString()))
  t.ok(await eventually(() => (out.match(/listening on/g) ?? []).length >= 2, 30_000), 'both workers listen')
  cli('accounts', 'deposit', WALLET, '10')
  const key = /(sk-[A-Za-z0-9_-]{43})/.exec(cli('api-keys', 'create', WALLET, '--name', 'w'))![1]!
  const chat = async (): Promise<number> => {
    const res = await request(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', connection: 'close' },
      body: JSON.stringify({ model: 'm-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    })
    await res.body.text()
    return res.statusCode
  }
  const statuses = await Promise.all(Array.from({ length: 20 }, chat))
  t.same(new Set(statuses), new Set([200]), 'served on the shared port')
  const [first] = childrenOf(supervisor.pid!)
  t.ok(first !== undefined, 'a worker process')
  process.kill(first!, 'SIGKILL')
  t.ok(await eventually(() => childrenOf(supervisor.pid!).length === 2 && !childrenOf(supervisor.pid!).includes(first!), 20_000), 'started again')
  // A connection the kernel had queued on the killed worker's socket is reset: asked again until served.
  t.ok(await eventually(async () => (await chat().catch(() => 0)) === 200, 10_000), 'serving')
  const workers = childrenOf(supervisor.pid!)
  supervisor.kill('SIGTERM')
  const code = await new Promise<number | null>((resolve) => supervisor.once('exit', (c) => resolve(c)))
  t.equal(code, 0, 'the supervisor exits 0 once its workers drained')
  t.ok(workers.every((pid) => !alive(pid)), 'no worker left')
  t.notOk(readFileSync(config, 'utf8').includes('bootstrap'), 'the config asked for no dev bootstrap')
})
