/**
 * The e2e benchmark's harness, end to end at a tiny size (`--smoke`): every reference of issue 45 started and
 * measured (the billed floor as `normal`, `full` and on PostgreSQL, replicas 0 and 1 ms from their stores
 * through the bench's delay proxy, multipart beside the floor relay), and the Targets table printed with a
 * verdict on each of the rows those workloads decide. What the figures are is not asserted (no timing): that
 * each row is measured, judged against the reference it names, and lists its interleaved runs.
 */
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { CRITERIA, criterion } from '../../bench/e2e/criteria.js'
import { runNode, type CliRun } from '../helpers/child.js'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const script = join(root, 'dist', 'bench', 'e2e', 'run.js')

t.setTimeout(400_000)

const run = (args: readonly string[]): Promise<CliRun> => runNode([script, ...args], { cwd: root })

/** The Targets table's row of criterion `id`: its cells (label, measured, met, beside). */
function rowOf(markdown: string, id: string): string[] | null {
  const label = criterion(id).label
  const line = markdown.split('\n').find((l) => l.startsWith(`| ${label} |`))
  return line === undefined ? null : line.slice(2, -2).split(' | ')
}

t.test('an unknown --rows names the known ones and measures nothing', async (t) => {
  const r = await run(['--smoke', '--rows=cpu-full,no-such-row'])
  t.equal(r.status, 1)
  t.match(r.stderr, /unknown --rows no-such-row; known: cpu-full, cpu-normal/)
  t.notMatch(r.stderr, /starting the simulated providers/)
})

t.test('a smoke run measures every like-for-like reference and judges each row against it', async (t) => {
  const r = await run([
    '--smoke',
    '--only=latency,throughput,ttft,multipart,replicas,rtt',
    '--targets=direct,router,router-normal,floor-billed,floor-billed-full,router-pg,floor-billed-pg',
  ])
  t.equal(r.status, 0, r.stderr.slice(-3000))
  t.match(r.stderr, /partial run \(--only\/--targets\): nothing written/)
  const decided = ['cpu-full', 'cpu-normal', 'throughput-full', 'throughput-normal', 'replica-throughput', 'replica-p50', 'p50', 'first-event', 'durable', 'multipart', 'rtt-p50', 'rtt-throughput', 'moonshot-throughput', 'moonshot-p50']
  for (const id of decided) {
    const row = rowOf(r.stdout, id)
    t.ok(row !== null, `the Targets table has row ${id}`)
    if (row === null) continue
    t.not(row[1], 'not measured in this run', `${id} is measured`)
    t.ok(['yes', '**no**', 'undecided'].includes(row[2]!), `${id} has a verdict (${row[2]})`)
  }
  // Rows whose workloads did not run say so rather than judge.
  t.same(rowOf(r.stdout, 'open-p99')?.[2], 'not measured')
  // The median rows list each of the interleaved runs (2 in a smoke run), and say what the medians were.
  t.match(rowOf(r.stdout, 'p50')?.[1], /\(medians of the added p50\) = [\d.]+× \(median of the runs: ([\d.]+×|n\/a), ([\d.]+×|n\/a)\)|not comparable/)
  t.match(rowOf(r.stdout, 'durable')?.[1], /the thread-pool fdatasync's p50, this run/)
  // Judged against the line's round trip as measured (PINGs through the same proxies), the set delay beside.
  t.match(rowOf(r.stdout, 'rtt-p50')?.[1], /vs the line's round trip [\d.]+ (µs|ms) \(a Redis PING through the same proxies, medians of the rounds' p50: [\d.]+ ms at 1\.00 ms set, [\d.]+ µs at 0\); the proxy held chunks .* for 500 µs set/)
  t.match(rowOf(r.stdout, 'multipart')?.[1], / per MiB \(3 MiB transcriptions, 2 clients\)/)
  // Each reference was started as what it is, and answered the smoke check.
  for (const name of ['uWS + undici relay + required billing work, flushed (`full`)', 'uWS + undici relay + required billing work on PostgreSQL']) {
    t.notMatch(r.stderr, new RegExp(`${name.replace(/[()`+]/g, '\\$&')} (unavailable|failed its smoke check)`), `${name} ran`)
  }
  t.equal(CRITERIA.filter((c) => rowOf(r.stdout, c.id) === null).length, 0, 'every criterion has its row')
})
