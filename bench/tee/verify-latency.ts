/**
 * What a TEE-verified answer costs (issue 29): the same chat request through the router, with and without
 * `X-SVC-Verify-TEE: true`, against a TEE simulator registered on a local anvil chain, JSON and streamed, plus
 * the provider asked directly as the baseline. Requests run one at a time and the variants are interleaved, so
 * a noisy machine slows all of them alike; the result is the added latency (median and p90 of verified minus
 * unverified) and the ratios. `npm run bench:tee` (about 20 s; BENCH_TEE_ROUNDS to change the 150 rounds,
 * BENCH_TEE_SYNC=full to measure with the default fsync per charge).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { request } from 'undici'
import { startChainStack } from '../../test/helpers/chain-stack.js'

const ROUNDS = Number(process.env.BENCH_TEE_ROUNDS ?? 150)
const WARMUP = 20

type Variant = 'direct' | 'plain' | 'verified'

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
}

async function main(): Promise<void> {
  const teardowns: (() => unknown)[] = []
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-tee-'))
  const t = { testdir: () => dir, teardown: (fn: () => unknown) => void teardowns.push(fn) }
  try {
    const { stack, providers } = await startChainStack(
      t,
      [{ account: 1, model: 'qwen', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n, tee: true, sim: { completionTokens: 64 } }],
      // store.synchronous normal: with full, the charge's fsync (the last byte waits for it) would hide the
      // verification, which runs beside it; here what it adds is in plain sight.
      { extra: { tee: { sample_rate: 0 }, limits: { requests_per_minute: 1_000_000 }, store: { synchronous: process.env.BENCH_TEE_SYNC ?? 'normal' } } },
    )
    const sim = providers[0]!.sim!
    const results: Record<string, number[]> = {}
    async function once(variant: Variant, stream: boolean): Promise<void> {
      const body = JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'measure me' }], stream })
      const url = variant === 'direct' ? `${sim.url}/v1/proxy/chat/completions` : `${stack.url}/v1/chat/completions`
      const headers: Record<string, string> = { 'content-type': 'application/json', ...stack.auth }
      if (variant === 'verified') headers['x-svc-verify-tee'] = 'true'
      const started = performance.now()
      const res = await request(url, { method: 'POST', headers, body })
      const text = await res.body.text()
      const ms = performance.now() - started
      if (res.statusCode !== 200) throw new Error(`${variant}: ${res.statusCode} ${text.slice(0, 200)}`)
      if (variant === 'verified' && !text.includes('"tee_verified":true')) throw new Error(`verified: not verified: ${text.slice(-300)}`)
      ;(results[`${variant}/${stream ? 'stream' : 'json'}`] ??= []).push(ms)
    }
    const variants: Variant[] = ['direct', 'plain', 'verified']
    for (let i = 0; i < WARMUP + ROUNDS; i++) {
      for (const stream of [false, true]) for (const v of variants) await once(v, stream)
      if (i + 1 === WARMUP) for (const k of Object.keys(results)) results[k] = []
    }
    const rows: string[] = []
    for (const shape of ['json', 'stream']) {
      const stat = (v: Variant) => {
        const s = [...results[`${v}/${shape}`]!].sort((a, b) => a - b)
        return { p50: quantile(s, 0.5), p90: quantile(s, 0.9) }
      }
      const d = stat('direct')
      const p = stat('plain')
      const v = stat('verified')
      rows.push(
        `${shape.padEnd(6)}  direct p50 ${d.p50.toFixed(2)} ms  router p50 ${p.p50.toFixed(2)} ms  verified p50 ${v.p50.toFixed(2)} ms` +
          `  | added by verification: p50 +${(v.p50 - p.p50).toFixed(2)} ms, p90 +${(v.p90 - p.p90).toFixed(2)} ms` +
          `  | verified/unverified ${(v.p50 / p.p50).toFixed(2)}x`,
      )
    }
    const sync = process.env.BENCH_TEE_SYNC ?? 'normal'
    process.stdout.write(`TEE verification latency, ${ROUNDS} sequential requests per variant (one TEE simulator, 64 completion tokens, store.synchronous ${sync}):\n${rows.join('\n')}\n`)
  } finally {
    for (const fn of teardowns.reverse()) await fn()
    rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${String((err as Error)?.stack ?? err)}\n`)
  process.exit(1)
})
