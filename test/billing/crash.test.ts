/**
 * Crash safety of the ledger: the router runs as its own process under concurrent load (JSON and streams) and
 * is killed with SIGKILL several times mid-load, then restarted on the same store. Every response a client
 * received complete must be billed exactly once, for the cost its trace shows; nothing may stay reserved after
 * a restart; and the journal must balance (deposits − charges = the running totals).
 */
import t from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { stringify } from 'yaml'
import { hashSecret } from '../../src/auth/keys.js'
import { parseUsd } from '../../src/billing/money.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { killChild } from '../helpers/child.js'
import { addr, DEFAULT_PRICE } from '../helpers/stack.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const P = addr('c')
const MODEL = 'm-chat'
const ROUNDS = 3
const CLIENTS = 24
/** How long each round loads the router before the kill, ms. */
const LOAD_MS = 400

interface Router {
  url: string
  child: ChildProcess
  /** Printed only by the first start (the dev account bootstrap on an empty store). */
  keys: { sk: string; mk: string } | null
}

function start(t: { teardown(fn: () => void): void }, config: string, expectKeys: boolean): Promise<Router> {
  const child = spawn(process.execPath, [CLI, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => killChild(child))
  return new Promise((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => reject(new Error(`router did not start: ${out}`)), 15_000)
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString()
      const listening = /listening on (http:\/\/\S+)/.exec(out)
      if (listening === null) return
      const sk = /(sk-[A-Za-z0-9_-]{43})/.exec(out)
      const mk = /(mk-[A-Za-z0-9_-]{43})/.exec(out)
      // The dev-account banner (first start only) follows the listening line.
      if (expectKeys && (sk === null || mk === null)) return
      clearTimeout(timer)
      resolve({ url: listening[1]!, child, keys: sk !== null && mk !== null ? { sk: sk[1]!, mk: mk[1]! } : null })
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`router exited with ${code} before listening: ${out}`))
    })
  })
}

/** A response the client received whole: its request id and the cost its trace shows. */
interface Delivered {
  requestId: string
  cost: bigint
}

async function once(url: string, key: string, stream: boolean, delivered: Delivered[]): Promise<void> {
  const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'crash me' }], max_tokens: 8, stream })
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body,
  })
  const text = await res.body.text()
  if (res.statusCode !== 200) return
  let trace: { request_id: string; billing: { total_cost: string } } | undefined
  if (stream) {
    // Complete only with [DONE] as the last event; the trace chunk is right before it.
    if (!text.endsWith('data: [DONE]\n\n')) return
    const events = text.split('\n\n')
    const chunk = events.find((e) => e.includes('"x_svc_trace"'))
    if (chunk === undefined) return
    trace = (JSON.parse(chunk.slice('data: '.length)) as { x_svc_trace: typeof trace }).x_svc_trace
  } else {
    try {
      trace = (JSON.parse(text) as { x_svc_trace: typeof trace }).x_svc_trace
    } catch {
      return // cut off by the kill: not delivered complete
    }
  }
  if (trace === undefined) return
  delivered.push({ requestId: trace.request_id, cost: parseUsd(trace.billing.total_cost)! })
}

async function load(url: string, key: string, until: number, delivered: Delivered[]): Promise<void> {
  const client = async (i: number): Promise<void> => {
    let n = 0
    // Until the kill ends the round (the wait for a first delivery included), with a bound of its own.
    while (Date.now() < until + 15_000) {
      try {
        await once(url, key, (i + n++) % 2 === 0, delivered)
      } catch {
        return // the router died: this client stops for the round
      }
    }
  }
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)))
}

t.test('SIGKILL under load, restart, every delivered response billed exactly once', async (t) => {
  let store: SqliteStore | null = null
  // Registered before t.testdir(): tap then runs every teardown of this test (the routers' in start() too) before it
  // removes the directory (test/helpers/stack.ts).
  t.teardown(async () => {
    await store?.close()
  })
  const dir = t.testdir()
  const sim = await startSimulator({ name: 'crash', ttftMs: 5, tokensPerS: 400, completionTokens: 8 })
  t.teardown(() => sim.close())
  writeFileSync(
    join(dir, 'providers.yaml'),
    stringify({ providers: [{ address: P, url: sim.url, trust_mode: 'standard', verifiability: '', models: [{ id: MODEL, type: 'chatbot', price: DEFAULT_PRICE }] }] }),
  )
  const db = join(dir, 'svc.db')
  const config = join(dir, 'config.yaml')
  writeFileSync(
    config,
    stringify({
      server: { host: '127.0.0.1', port: 0 },
      registry: { path: 'providers.yaml', watch: false },
      store: { path: db },
      log: { level: 'error' },
      limits: { requests_per_minute: 1_000_000 },
      dev: { bootstrap: true },
    }),
  )

  const delivered: Delivered[] = []
  let keys: { sk: string; mk: string } | null = null
  for (let round = 0; round < ROUNDS; round++) {
    const router = await start(t, config, round === 0)
    keys ??= router.keys
    const before = delivered.length
    const running = load(router.url, keys!.sk, Date.now() + LOAD_MS, delivered)
    await new Promise((r) => setTimeout(r, LOAD_MS))
    // On a busy machine a fresh process may deliver nothing in LOAD_MS: the kill waits for a first delivery (up
    // to 10 s more) so that every round crashes with answers both delivered and in flight.
    for (const end = Date.now() + 10_000; delivered.length === before && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10))
    await killChild(router.child)
    await running
  }
  t.ok(delivered.length > 0, `responses were delivered across the crashes (${delivered.length})`)

  // A last start: the books are rebuilt from the store; nothing may be held.
  const router = await start(t, config, false)
  const funds = await request(`${router.url}/v1/account/funds`, { headers: { authorization: `Bearer ${keys!.mk}` } })
  const f = (await funds.body.json()) as { deposit: string; credit: string; reserved: string; spent: string; available: string }
  t.equal(f.reserved, '0', 'no reservation survives a crash')
  t.equal(parseUsd(f.available), parseUsd(f.deposit)! + parseUsd(f.credit)! - parseUsd(f.spent)!, 'available = deposits − charges')
  await killChild(router.child)

  store = await openSqliteStore({ path: db })
  t.equal(await store.accounts.countAccounts(), 1, 'the dev account only')
  const account = (await store.keys.findCredential(hashSecret(keys!.sk)))!.account.id
  const journal = await store.ledger.journal(account)
  const charges = new Map<string, bigint[]>()
  for (const e of journal) if (e.kind === 'charge') charges.set(e.requestId!, [...(charges.get(e.requestId!) ?? []), e.amount])
  let missing = 0
  let mismatched = 0
  for (const d of delivered) {
    const billed = charges.get(d.requestId)
    if (billed === undefined) missing++
    else if (billed.length !== 1 || billed[0] !== d.cost) mismatched++
  }
  t.equal(missing, 0, 'every delivered response is billed')
  t.equal(mismatched, 0, 'exactly once, for the cost its trace shows')
  t.ok([...charges.values()].every((c) => c.length === 1), 'no request billed twice')
  const totals = await store.ledger.totals(account)
  const deposits = journal.filter((e) => e.kind !== 'charge').reduce((s, e) => s + e.amount, 0n)
  const spent = journal.filter((e) => e.kind === 'charge').reduce((s, e) => s + e.amount, 0n)
  t.equal(totals.deposited + totals.credited, deposits, 'the journal balances: deposits')
  t.equal(totals.spent, spent, 'the journal balances: charges')
  t.equal(parseUsd(f.spent), spent, 'the restarted router reports the durable spend')
  const usage = await store.ledger.usage(account, { fromDay: '2000-01-01', toDay: '2999-12-31' })
  t.equal(usage.reduce((s, r) => s + r.requests, 0), charges.size, 'one usage record per charge')
})
