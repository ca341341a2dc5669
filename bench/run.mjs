#!/usr/bin/env node
/**
 * `npm run bench`: runs every compiled micro benchmark (dist/bench/micro/*.bench.js) one after another, each
 * in its own process so one bench's JIT state and garbage never colour the next, then writes their summary
 * into BENCHMARKS.md between <!-- micro:start --> and <!-- micro:end --> (the e2e run keeps that section).
 *
 *   node bench/run.mjs            all of them, and update BENCHMARKS.md
 *   node bench/run.mjs select     only the files whose name contains "select" (BENCHMARKS.md untouched)
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const microDir = join(root, 'dist', 'bench', 'micro')
const reportFile = join(root, 'BENCHMARKS.md')
const START = '<!-- micro:start -->'
const END = '<!-- micro:end -->'

const filter = process.argv[2]
if (!existsSync(microDir)) {
  console.error(`no ${microDir}: build first (npm run bench builds, then runs this)`)
  process.exit(1)
}
const files = readdirSync(microDir)
  .filter((f) => f.endsWith('.bench.js') && (filter === undefined || f.includes(filter)))
  .sort()
if (files.length === 0) {
  console.error(`no benchmark matches ${filter ?? '*.bench.js'} in ${microDir}`)
  process.exit(1)
}

const work = mkdtempSync(join(tmpdir(), 'svc-bench-'))
const summaryFile = join(work, 'summary.jsonl')
writeFileSync(summaryFile, '')
const failed = []
for (const file of files) {
  console.log(`\n=== ${file} ===`)
  const started = Date.now()
  const run = spawnSync(process.execPath, [join(microDir, file)], {
    stdio: 'inherit',
    env: { ...process.env, SVC_BENCH_SUMMARY: summaryFile },
    timeout: 10 * 60_000,
  })
  if (run.status !== 0) failed.push(`${file} (${run.signal ?? `exit ${run.status}`})`)
  console.log(`--- ${file}: ${((Date.now() - started) / 1000).toFixed(1)} s`)
}

const summaries = readFileSync(summaryFile, 'utf8')
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => JSON.parse(line))
rmSync(work, { recursive: true, force: true })

const section = renderSection(summaries, failed)
console.log('\n' + section)
if (filter === undefined) {
  writeSection(section)
  console.log(`\nupdated the micro section of ${reportFile}`)
} else {
  console.log(`\n(filtered run: ${reportFile} left as it is)`)
}
if (failed.length > 0) {
  console.error(`\nfailed: ${failed.join(', ')}`)
  process.exit(1)
}

function formatNs(ns) {
  if (!Number.isFinite(ns)) return 'n/a'
  if (ns >= 1e6) return `${(ns / 1e6).toFixed(2)} ms`
  if (ns >= 1e4) return `${(ns / 1e3).toFixed(1)} µs`
  if (ns >= 1e3) return `${(ns / 1e3).toFixed(2)} µs`
  return `${ns.toFixed(ns >= 100 ? 0 : 1)} ns`
}

function renderSection(list, failures) {
  const cpu = cpus()[0]?.model ?? 'unknown cpu'
  const lines = [
    START,
    '## Micro benchmarks (`npm run bench`)',
    '',
    `Last run ${new Date().toISOString()} on ${cpu}, ${cpus().length} cores, Node ${process.versions.node}; ` +
      'tinybench 6, each file in its own process. Operations shorter than the timer run in batches and are ' +
      'reported per call (median and p99 are then over batch means, so they understate single-call outliers). ' +
      'Written by `bench/run.mjs`: edit the code, not this section.',
    '',
  ]
  const targets = list.flatMap((s) => s.findings.filter((f) => f.pass !== undefined).map((f) => ({ bench: s.name, ...f })))
  if (targets.length > 0) {
    lines.push('| target | measured | met |', '| --- | --- | --- |')
    for (const t of targets) lines.push(`| ${t.label} (${t.bench}) | ${t.value} | ${t.pass ? 'yes' : '**no**'} |`)
    lines.push('')
  }
  for (const s of list) {
    lines.push(`### ${s.name}`, '')
    for (const f of s.findings.filter((f) => f.pass === undefined)) lines.push(`- ${f.label}: ${f.value}`)
    if (s.findings.some((f) => f.pass === undefined)) lines.push('')
    lines.push('| task | mean per op | median | p99 | ± (rme) | samples |', '| --- | ---: | ---: | ---: | ---: | ---: |')
    for (const r of s.rows) {
      const rme = Number.isFinite(r.rmePct) ? r.rmePct.toFixed(1) + '%' : 'n/a'
      lines.push(`| ${r.task} | ${formatNs(r.nsPerOp)} | ${formatNs(r.p50Ns)} | ${formatNs(r.p99Ns)} | ${rme} | ${r.samples} |`)
    }
    lines.push('')
  }
  if (failures.length > 0) lines.push(`**Failed in this run:** ${failures.join(', ')}`, '')
  lines.push(END)
  return lines.join('\n')
}

function writeSection(section) {
  let text = existsSync(reportFile) ? readFileSync(reportFile, 'utf8') : '# svc-router benchmarks\n\nRun `npm run bench:e2e` for the end-to-end comparison.\n\n'
  const from = text.indexOf(START)
  const to = text.indexOf(END)
  if (from !== -1 && to > from) text = text.slice(0, from) + section + text.slice(to + END.length)
  else text = text.trimEnd() + '\n\n' + section + '\n'
  writeFileSync(reportFile, text)
}
