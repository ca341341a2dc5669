/**
 * bench/e2e/pg-batch.ts at a tiny size: each side's batches run on a server of the tool's own and are reported,
 * and the billed floor with roll-ups ends with every total equal to its journal's (the tool fails otherwise).
 * What the figures are is not asserted (no timing).
 */
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { runNode } from '../helpers/child.js'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

t.setTimeout(180_000)

t.test('pg-batch measures svc-router\'s batch, the billed floor\'s and the floor with roll-ups', async (t) => {
  if (process.env.TEST_PG_URL !== undefined) return t.pass('skipped: pg-batch reads the CPU of a server of its own')
  const r = await runNode([join(root, 'dist', 'bench', 'e2e', 'pg-batch.js'), '--rounds=1', '--batches=20', '--sizes=1,3'], { cwd: root })
  t.equal(r.status, 0, r.stderr)
  for (const side of ['svc-router (svc_charge_batch, leased)', 'billed floor (one INSERT)', 'billed floor with roll-ups (one statement)']) {
    for (const size of [1, 3]) t.match(r.stdout, new RegExp(`  ${side.replace(/[()]/g, '\\$&')}, batches of ${size}: server CPU \\d+ µs a batch \\(\\d+\\), wall \\d+ µs`), `${side}, batches of ${size}`)
  }
})
