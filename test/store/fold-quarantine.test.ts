/**
 * No journal row can stop the SQLite fold (issue 43, point 1): rows written behind the router's back that the
 * fold cannot add up (counts past 64 bits' worth of sense, no key, an account that does not exist, a time no
 * date holds) are quarantined, kept in the journal and listed, reported once in the log and in /metrics, and
 * the rest goes on: funds, deposits, a new account's first request and a restart. A fold that fails as a whole
 * turns /readyz 503, in generic words beside the API and with the detail on the ops port.
 */
import t from 'tap'
import { join } from 'node:path'
import { request } from 'undici'
import { Database } from '../../src/store/sqlite/driver.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { killChild } from '../helpers/child.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { addr, startStack } from '../helpers/stack.js'
import type { Test } from './contract.js'
import { runCli } from '../helpers/child.js'

const MODEL = 'qwen-2.5-7b-instruct'
const NOBODY = '0x' + 'f'.repeat(40)

async function chat(url: string, key: string): Promise<number> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
  })
  await res.body.dump()
  return res.statusCode
}

/** Charges appended to the journal of the database at `path` by hand, foreign keys off (as a sqlite3 shell would). */
function forceCharges(path: string, rows: readonly (readonly unknown[])[]): void {
  const db = new Database(path)
  try {
    db.pragma('busy_timeout = 5000')
    db.pragma('foreign_keys = OFF')
    const insert = db.prepare(`INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at, model, provider,
      prompt_tokens, completion_tokens, images, audio_ms) VALUES (?, 'charge', ?, ?, ?, '', ?, 'forced', '0x1', ?, ?, 0, 0)`)
    for (const row of rows) insert.run(...row)
  } finally {
    db.close()
  }
}

const metric = async (url: string, name: string): Promise<string | undefined> => {
  const text = await (await request(`${url}/metrics`)).body.text()
  return text.split('\n').find((l) => l.startsWith(name + ' '))
}

t.test('rows the fold cannot add are quarantined, logged once and counted; funds, deposits, new accounts and a restart go on', async (t) => {
  const sim = await startSimulator({ name: 'q' })
  t.teardown(() => sim.close())
  const providers = [{ address: addr('a'), url: sim.url, models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.3 } }] }]
  const router = await spawnRouter(t, providers, { health: { probes: false }, log: { level: 'warn' } }, { captureStderr: true })
  const config = join(router.dir, 'config.yaml')
  const db = join(router.dir, 'svc.db')
  t.equal(await chat(router.url, router.key), 200)
  const now = Date.now()
  forceCharges(db, [
    // Its amount was billed: it stays in the totals; its counts are left out.
    [router.wallet, '7', 'req_forced_counts', 'k1', now, 9223372036854775807n, 1],
    [router.wallet, '11', 'req_forced_nokey', null, now, 1, 1],
    [NOBODY, '13', 'req_forced_nobody', 'k1', now, 1, 1],
    [router.wallet, '17', 'req_forced_never', 'k1', 9_000_000_000_000_000, 1, 1],
  ])

  const funds = await request(`${router.url}/v1/account/funds`, { headers: { authorization: `Bearer ${router.mgmtKey}` } })
  t.equal(funds.statusCode, 200, '/v1/account/funds answers')
  await funds.body.dump()
  const show = await runCli(['accounts', 'show', router.wallet], config)
  t.equal(show.status, 0, `accounts show: ${show.stderr}`)
  const deposit = await runCli(['accounts', 'deposit', '0x' + '1'.repeat(40), '5'], config)
  t.equal(deposit.status, 0, `accounts deposit: ${deposit.stderr}`)
  const created = await runCli(['api-keys', 'create', '0x' + '1'.repeat(40), '--name', 'new'], config)
  t.equal(created.status, 0, created.stderr)
  const newKey = /(sk-[A-Za-z0-9_-]{43})/.exec(created.stdout)?.[1] ?? ''
  t.equal(await chat(router.url, newKey), 200, "a new account's first request (its totals folded first)")
  t.equal(await chat(router.url, router.key), 200)
  t.equal(await metric(router.url, 'svc_ledger_quarantined_rows'), 'svc_ledger_quarantined_rows 4')
  t.equal((await request(`${router.url}/readyz`)).statusCode, 200, 'ready: the fold goes on')

  // In the journal still; in the quarantine list with what was left out.
  const check = new Database(db, { readonly: true })
  const listed = check.prepare('SELECT q.part, j.request_id FROM ledger_quarantine q JOIN journal j ON j.seq = q.seq ORDER BY q.seq').all()
  check.close()
  t.strictSame(listed, [
    { part: 'counts', request_id: 'req_forced_counts' },
    { part: 'row', request_id: 'req_forced_nokey' },
    { part: 'row', request_id: 'req_forced_nobody' },
    { part: 'row', request_id: 'req_forced_never' },
  ])
  const lines = router
    .stderr()
    .split('\n')
    .filter((l) => l.includes('quarantined (kept'))
  t.equal(lines.length, 4, 'each row logged once')

  await killChild(router.child)
  const again = await spawnRouter(t, providers, { health: { probes: false }, log: { level: 'warn' } }, { captureStderr: true, dir: router.dir })
  t.equal(await chat(again.url, router.key), 200, 'served after a restart')
  t.equal(await metric(again.url, 'svc_ledger_quarantined_rows'), 'svc_ledger_quarantined_rows 4', 'still counted')
  const said = again
    .stderr()
    .split('\n')
    .filter((l) => l.includes('journal rows are quarantined'))
  t.equal(said.length, 1, 'said once at start')
  t.match(said[0], /"rows":4/)
  t.notMatch(again.stderr(), /quarantined \(kept/, 'not logged row by row again')
})

/** A router whose fold fails whole: a trigger on usage_daily refuses every row, as a schema changed behind its back would. */
async function jammed(t: Test, config: Record<string, Record<string, unknown>>) {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }] }], { health: { probes: false }, ...config })
  t.equal(await chat(stack.url, stack.key), 200)
  const db = new Database(join(stack.dir, 'svc.db'))
  db.pragma('busy_timeout = 5000')
  db.exec("CREATE TRIGGER jam BEFORE INSERT ON usage_daily BEGIN SELECT RAISE(ABORT, 'jammed by the test'); END")
  db.close()
  // The account's books are loaded (by the first request): its next charge needs no fold to be answered, and
  // lies past the watermark with the first one, whose (account, day, model, key) row the fold must insert.
  t.equal(await chat(stack.url, stack.key), 200)
  return stack
}

t.test('a fold that fails whole turns /readyz 503 in generic words beside the API', async (t) => {
  const stack = await jammed(t, {})
  const ready = await request(`${stack.url}/readyz`)
  t.equal(ready.statusCode, 503)
  t.strictSame(await ready.body.json(), { status: 'not_ready', reason: 'ledger fold stuck' })
})

t.test('a fold that fails whole turns /readyz 503 with the detail on the ops port', async (t) => {
  const stack = await jammed(t, { ops: { separate_port: true, port: 0 } })
  const ready = await request(`${stack.router.opsUrl}/readyz`)
  t.equal(ready.statusCode, 503)
  t.match(await ready.body.json(), { status: 'not_ready', reason: /^ledger fold stuck: .*jammed by the test/ })
})
