import { startPostgres } from './dist/test/helpers/postgres.js'
import { openPostgresStore } from './dist/src/store/postgres/postgres-store.js'
import { randomUUID } from 'node:crypto'
const s = await startPostgres()
const url = await s.newDatabase()
const A = '0x' + 'a'.repeat(40), B = '0x' + 'b'.repeat(40)
const stores = [await openPostgresStore({ url }), await openPostgresStore({ url })]
await stores[0].ledger.addFunds(A, 'deposit', 10n ** 30n, '', 1)
await stores[0].ledger.addFunds(B, 'deposit', 10n ** 30n, '', 1)
const mk = (acc) => ({ requestId: randomUUID(), accountId: acc, keyId: 'k1', model: 'm', provider: 'p', at: Date.now(), promptTokens: 10, completionTokens: 20, images: 0, audioMs: 0, cost: 21000000000000n })
async function run(store, batch, ms) {
  let n = 0, b = 0; const lat = []
  const end = Date.now() + ms
  while (Date.now() < end) {
    const charges = Array.from({ length: batch }, (_, i) => mk(i % 2 ? A : B))
    const t = performance.now(); await store.ledger.recordCharges(charges); lat.push(performance.now() - t)
    n += batch; b++
  }
  lat.sort((a, b) => a - b)
  return { perSec: Math.round(n / (ms / 1000)), batches: b, p50ms: lat[lat.length >> 1].toFixed(2) }
}
for (const batch of [1, 16, 256]) console.log('1 replica, batch', batch, await run(stores[0], batch, 3000))
for (const batch of [1, 256]) console.log('2 replicas, batch', batch, await Promise.all(stores.map(st => run(st, batch, 3000))))
await Promise.all(stores.map(st => st.close())); await s.stop(); process.exit(0)
