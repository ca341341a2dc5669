/**
 * The billing ledger on a real SQLite file (WAL, synchronous=FULL, as served): admission (reserve + release, in
 * memory: what a request pays before its first byte upstream), and settlement through the group-commit writer
 * to a durable charge (what the last byte of a response waits for). Then two load runs outside tinybench:
 * the charges per second the writer sustains when saturated, and the settle → durable latency at a steady
 * offered load (the time added to the last byte), p50 / p99.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Bench } from 'tinybench'
import type { Principal } from '../../src/auth/principal.js'
import { ChargeWriter } from '../../src/billing/charge-writer.js'
import type { Bill } from '../../src/billing/budget.js'
import { Ledger } from '../../src/billing/ledger.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { batched, check, formatNs, nsPerOp, recordSummary, type Finding } from './measure.js'

const ACCOUNT = '0x' + 'b'.repeat(40)
const KEY = '5b0e7c1e-0000-4000-8000-000000000001'
const dir = mkdtempSync(join(tmpdir(), 'ledger-bench-'))
const store = await openSqliteStore({ path: join(dir, 'svc.db') })
const writer = new ChargeWriter(store.ledger)
const ledger = new Ledger(store.ledger, writer)
await store.ledger.addFunds(ACCOUNT, 'deposit', 10n ** 30n, 'bench', Date.now())
await store.keys.createApiKey({
  id: KEY,
  accountId: ACCOUNT,
  hash: 'bench-hash',
  preview: 'sk-bench',
  name: 'bench',
  trustMode: null,
  creditLimit: 10n ** 29n,
  resetPeriod: 'monthly',
  expiresAt: null,
  allowedModels: null,
  allowedProviders: null,
  createdAt: Date.now(),
})
const principal: Principal = {
  accountId: ACCOUNT,
  keyId: KEY,
  tier: -1,
  allowedModels: null,
  allowedProviders: null,
  rateLimit: 600,
  creditLimit: 10n ** 29n,
  resetPeriod: 'monthly',
}
await ledger.prepare(principal)

const BILL: Bill = { model: 'm', provider: '0x' + '1'.repeat(40), promptTokens: 512, completionTokens: 128, images: 0, audioMs: 0, cost: { input: 51_200_000_000_000n, output: 38_400_000_000_000n } }
const HOLD = 1_000_000_000_000_000n
let seq = 0

/** Reserves, settles and resolves once the charge is durable; rejects if it was not recorded. */
function charge(): Promise<number> {
  const r = ledger.open(principal, `req_bench_${seq++}`)
  const refused = r.reserve(HOLD)
  if (refused !== null) return Promise.reject(refused)
  const t0 = performance.now()
  return new Promise((resolve, reject) => {
    r.settle(BILL, (_billed, err) => (err === null ? resolve(performance.now() - t0) : reject(err)))
  })
}

// Correctness first: 1000 charges in one turn, every one durable, the totals exact.
const before = await store.ledger.totals(ACCOUNT)
await Promise.all(Array.from({ length: 1000 }, charge))
const after = await store.ledger.totals(ACCOUNT)
check(after.spent - before.spent === 1000n * (BILL.cost.input + BILL.cost.output), 'spent grew by exactly 1000 charges')
check(ledger.reserved(ACCOUNT) === 0n, 'nothing held after settling')
check(ledger.available(ACCOUNT) === after.deposited - after.spent, 'the books equal the durable totals')

const bench = new Bench({ name: 'ledger', time: 1000, warmupTime: 200 })
bench.add(
  'reserve + release (admission, in memory)',
  batched(2000, () => {
    const r = ledger.open(principal, 'req_admit')
    r.reserve(HOLD)
    r.release()
  }),
)
bench.add('one charge alone: settle → durable (one transaction)', async () => {
  await charge()
})
bench.add('256 charges settled in one turn → durable (one transaction)', async () => {
  await Promise.all(Array.from({ length: 256 }, charge))
})
await bench.run()
console.table(bench.table())

/** Saturated: keeps `inflight` charges settling at all times for `ms`; charges per second. */
async function saturate(ms: number, inflight: number): Promise<number> {
  const end = performance.now() + ms
  let done = 0
  const worker = async (): Promise<void> => {
    while (performance.now() < end) {
      await charge()
      done++
    }
  }
  const start = performance.now()
  await Promise.all(Array.from({ length: inflight }, worker))
  return (done * 1000) / (performance.now() - start)
}

/**
 * Steady load: `perMs` charges settle every millisecond (spread as responses end, one timer tick at a time) for
 * `ms`; returns each charge's settle → durable latency, i.e. what the durable commit adds to the last byte.
 */
async function steady(ms: number, perMs: number): Promise<number[]> {
  const latencies: number[] = []
  const pending: Promise<void>[] = []
  const start = performance.now()
  let issued = 0
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const elapsed = performance.now() - start
      const due = Math.floor(elapsed * perMs)
      for (; issued < due; issued++) pending.push(charge().then((l) => void latencies.push(l)))
      if (elapsed < ms) setTimeout(tick, 1)
      else resolve()
    }
    tick()
  })
  await Promise.all(pending)
  return latencies.sort((a, b) => a - b)
}

const pct = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
const saturated = await saturate(2000, 512)
const findings: Finding[] = [{ label: 'charges/s sustained (group commit, 512 in flight, SQLite FULL)', value: Math.round(saturated).toLocaleString('en-US') }]
for (const rate of [1, 5, 20]) {
  const lat = await steady(2000, rate)
  const p99 = pct(lat, 99)
  findings.push({
    label: `commit latency added to the last byte at ${rate * 1000} charges/s: p50 / p99 / max`,
    value: `${pct(lat, 50).toFixed(3)} / ${p99.toFixed(3)} / ${lat.at(-1)!.toFixed(3)} ms (target p99 < 2 ms)`,
    pass: p99 < 2,
  })
}
const admission = nsPerOp(bench.getTask('reserve + release (admission, in memory)'))
findings.push({ label: 'admission before the first upstream byte (reserve + release, no I/O)', value: formatNs(admission) })
findings.push({ label: 'transactions / charges written', value: `${writer.batches} / ${writer.written}` })
recordSummary(bench, findings)

await writer.close()
await store.close()
rmSync(dir, { recursive: true, force: true })
