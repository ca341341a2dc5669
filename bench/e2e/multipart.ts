/**
 * The multipart workload of the e2e run (registered in run.ts; issue #12's benchmark): POST
 * /v1/audio/transcriptions with WAV uploads, through a svc-router of its own and direct to the same simulator.
 *
 * 1. Throughput: `concurrency` clients in a closed loop, each sending a WAV of FILE_MIB MiB (the router keeps
 *    the upload for a failover in its upload spool, memory then a temporary file, while it streams it through);
 *    req/s and MiB/s of request body, direct, through the router and through the floor relay (floor-relay.ts:
 *    the body streamed through unread) in turn (after the memory part), best of two rounds each in a full run.
 *    The router's and the floor's CPU time per MiB relayed is issue 45's multipart target.
 * 2. Memory (first, on a router warmed by UPLOADS concurrent uploads of FILE_MIB MiB: its chunk pool and heap at
 *    the size such a burst leaves them, see measureMultipart): UPLOADS concurrent uploads of UPLOAD_MIB MiB
 *    each through the router, whose VmRSS is sampled every 20 ms (processes.ts) with its own gauge of what
 *    uploads hold in memory (svc_upload_buffered_bytes); the growth over its idle RSS is
 *    set against UPLOADS × the upload (what holding the uploads would cost) and UPLOADS ×
 *    `server.upload_memory_bytes` (UPLOAD_MEMORY_MIB, well under the upload, so the two bounds differ: past it
 *    an upload waits in its spool file, not in memory).
 *
 * The client of each upload holds no upload (one reused 1 MiB chunk) and every answer is checked: 200 and the
 * audio's seconds as the provider counted them, so every byte reached it. As in load.ts the load runs in a
 * separate process (this file with a spec as its argument); the results go to stderr and into the run's raw
 * results (`multipart` in last-run.json), rendered as section 5c of BENCHMARKS.md.
 */
import { Readable } from 'node:stream'
import { Pool, type Dispatcher } from 'undici'
import { runAsLoadProcess, runScriptProcess, treeRssKb, UsageMonitor, type Usage } from './processes.js'
import { Samples, Tally, type Distribution } from './stats.js'
import { floorTarget, PROVIDER_KEY, startOwnRouter, type SimSet, type Target } from './targets.js'
import { WAV_BYTES_PER_SECOND, wavHeader } from '../../test/helpers/wav.js'

const PATH = '/v1/audio/transcriptions'
const MODEL = 'bench-stt'
const BOUNDARY = 'svc-bench-boundary'
const MIB = 1024 * 1024
const FILE_MIB = 3
const UPLOAD_MIB = 25
const UPLOADS = 10
/**
 * The router's `upstream.replay_buffer_bytes` in this workload: how far it scans a form for `model` before an
 * attempt takes the upload. What an upload keeps in memory is `server.upload_memory_bytes` (UPLOAD_MEMORY_MIB,
 * the default), the rest waiting in its spool file (src/upstream/upload-spool.ts).
 */
const REPLAY_MIB = 4
const UPLOAD_MEMORY_MIB = 4

/** Where to send: direct (the simulator's key) or through the router (its key). */
interface Route {
  readonly origin: string
  readonly authorization: string
}

type Spec =
  | { mode: 'throughput'; route: Route; fileBytes: number; concurrency: number; warmupMs: number; durationMs: number }
  | { mode: 'uploads'; route: Route; fileBytes: number; uploads: number; maxMs: number }

export interface MultipartResult {
  readonly ok: number
  readonly errors: number
  readonly firstError: string | null
  readonly seconds: number
  readonly rps: number
  /** MiB of request body per second (answered 2xx). */
  readonly mibPerS: number
  readonly latency: Distribution | null
  /** Requests sent, warm-up included. */
  readonly sent: number
}

export interface MultipartRun {
  readonly fileMiB: number
  readonly concurrency: number
  readonly durationMs: number
  /** Throughput rounds (direct, router, direct, …); each one's best round is kept. */
  readonly rounds: number
  readonly uploadMiB: number
  readonly uploads: number
  readonly replayBufferMiB: number
  readonly throughput: {
    readonly direct: MultipartResult
    readonly router: MultipartResult
    /** The router's CPU time and peak RSS over its throughput run. */
    readonly routerUsage: Usage
    /** The simulator's CPU time over each run: the share of the 2 cores the provider's own parsing takes. */
    readonly simCpuMs: { readonly direct: number; readonly router: number }
    /**
     * The floor relay (floor-relay.ts, the body streamed through unread) on the same uploads, and its CPU time:
     * the reference of the CPU per MiB relayed (issue 45); absent in runs before it or when it did not start.
     */
    readonly floor?: MultipartResult
    readonly floorUsage?: Usage
    readonly floorSimCpuMs?: number
  }
  /** Bytes of one upload in the request (the form around the file included). */
  readonly requestBytes?: number
  /** The router's `server.upload_memory_bytes` (the default), in MiB: what one upload may keep in memory. */
  readonly uploadMemoryMiB?: number
  readonly memory: MemoryRound
  /** The warm-up before the memory rounds: this many concurrent uploads of `mib` (absent: two of FILE_MIB, one after the other's start). */
  readonly warmup?: { readonly uploads: number; readonly mib: number }
  /** The same uploads twice as large, right after: what the upload size adds to the router's memory. */
  readonly memoryDouble?: MemoryRound
}

export interface MemoryRound {
  readonly uploadMiB: number
  readonly idleRssMb: number
  readonly peakRssMb: number
  /** The most the router's gauge of uploads' memory (svc_upload_buffered_bytes{where="memory"}) showed, MiB. */
  readonly peakBufferedMb?: number
  readonly load: MultipartResult
}

/** The router's gauge of what uploads hold in memory now, MiB (NaN when /metrics does not answer). */
async function bufferedMb(origin: string): Promise<number> {
  try {
    const text = await (await fetch(`${origin}/metrics`)).text()
    const m = /^svc_upload_buffered_bytes\{where="memory"\} (\S+)$/m.exec(text)
    return m === null ? Number.NaN : Number(m[1]) / MIB
  } catch {
    return Number.NaN
  }
}

// ---------------------------------------------------------------------------------------------------------
// The load process.

/** The form around a file of `fileBytes` (WAV header included): `model` first, as the router reads only until it. */
function envelope(fileBytes: number): { opening: Buffer; closing: Buffer; length: number } {
  const opening = Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${MODEL}\r\n`),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="speech.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    wavHeader(fileBytes - 44),
  ])
  const closing = Buffer.from(`\r\n--${BOUNDARY}--\r\n`)
  return { opening, closing, length: opening.length + fileBytes - 44 + closing.length }
}

let sent = 0

/** One upload; resolves with the status and the (small) answer. */
function exchange(d: Dispatcher, headers: Record<string, string>, body: Buffer | Readable): Promise<{ status: number; text: string }> {
  sent++
  return new Promise((resolve, reject) => {
    let status = 0
    let text = ''
    d.dispatch(
      { path: PATH, method: 'POST', headers, body },
      {
        onRequestStart() {},
        onResponseStart(_c, s) {
          status = s
        },
        onResponseData(_c, chunk: Buffer) {
          if (text.length < 64 * 1024) text += chunk.toString('utf8')
        },
        onResponseEnd() {
          resolve({ status, text })
        },
        onResponseError(_c, err) {
          reject(err)
        },
      },
    )
  })
}

/** Why an answer is wrong (null: right): 200, and the audio's length as the provider counted it, to the byte. */
function problem(r: { status: number; text: string }, fileBytes: number): string | null {
  if (r.status !== 200) return `HTTP ${r.status}: ${r.text.slice(0, 160)}`
  try {
    const body = JSON.parse(r.text) as { usage?: { seconds?: number }; x_svc_trace?: { usage?: { seconds?: number } } }
    const seconds = body.x_svc_trace?.usage?.seconds ?? body.usage?.seconds
    const expected = (fileBytes - 44) / WAV_BYTES_PER_SECOND
    return seconds !== undefined && Math.abs(seconds - expected) < 0.001 ? null : `${seconds} s of audio counted, ${expected} s sent`
  } catch {
    return `not JSON: ${r.text.slice(0, 160)}`
  }
}

async function runSpec(spec: Spec): Promise<MultipartResult> {
  const { opening, closing, length } = envelope(spec.fileBytes)
  const headers = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, 'content-length': String(length), authorization: spec.route.authorization }
  const lanes = spec.mode === 'throughput' ? spec.concurrency : spec.uploads
  const pool = new Pool(spec.route.origin, { connections: lanes, pipelining: 1, keepAliveTimeout: 60_000 })
  const samples = new Samples(1024)
  const tally = new Tally()
  let seconds: number
  if (spec.mode === 'throughput') {
    // One whole body, sent again and again: the cheapest client, the same for both targets.
    const whole = Buffer.concat([opening, Buffer.alloc(spec.fileBytes - 44), closing])
    const begin = performance.now()
    const measureFrom = begin + spec.warmupMs
    const end = measureFrom + spec.durationMs
    await Promise.all(
      Array.from({ length: lanes }, async () => {
        while (performance.now() < end) {
          const t0 = performance.now()
          try {
            const r = await exchange(pool, headers, whole)
            const t1 = performance.now()
            // Only requests that start and finish inside the window count, so warm-up and tail do not.
            if (t0 < measureFrom || t1 > end) continue
            const why = problem(r, spec.fileBytes)
            if (why !== null) tally.fail(why)
            else {
              tally.ok++
              samples.push(t1 - t0)
            }
          } catch (err) {
            if (t0 >= measureFrom) tally.fail(String(err))
          }
        }
      }),
    )
    seconds = spec.durationMs / 1000
  } else {
    // All uploads at once, each from one reused chunk: the client holds no upload.
    const chunk = Buffer.alloc(MIB)
    const audio = spec.fileBytes - 44
    async function* upload(): AsyncGenerator<Buffer> {
      yield opening
      for (let left = audio; left > 0; left -= chunk.length) yield left >= chunk.length ? chunk : chunk.subarray(0, left)
      yield closing
    }
    const begin = performance.now()
    const stopAt = begin + spec.maxMs
    await Promise.all(
      Array.from({ length: lanes }, async () => {
        const t0 = performance.now()
        try {
          const body = Readable.from(upload(), { objectMode: false })
          const bound = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('not answered in time')), stopAt - t0).unref())
          const why = problem(await Promise.race([exchange(pool, headers, body), bound]), spec.fileBytes)
          if (why !== null) return tally.fail(why)
          tally.ok++
          samples.push(performance.now() - t0)
        } catch (err) {
          tally.fail(String(err))
        }
      }),
    )
    seconds = (performance.now() - begin) / 1000
  }
  await pool.destroy()
  const rps = seconds > 0 ? tally.ok / seconds : 0
  return { ok: tally.ok, errors: tally.errors, firstError: tally.firstError, seconds, rps, mibPerS: (rps * length) / MIB, latency: samples.distribution(), sent }
}

// ---------------------------------------------------------------------------------------------------------
// The run's side.

export interface MultipartOptions {
  readonly root: string
  readonly sims: SimSet
  readonly workDir: string
  readonly quick: boolean
  /** A handful of small uploads: the harness's own test (run.ts --smoke). */
  readonly smoke?: boolean
  readonly progress: (line: string) => void
}

function runLoad(root: string, spec: Spec, boundMs: number): Promise<MultipartResult> {
  return runScriptProcess<MultipartResult>(root, 'multipart.js', spec, boundMs)
}

const ms = (v: number | undefined): string => (v === undefined || Number.isNaN(v) ? 'n/a' : `${v.toFixed(1)} ms`)

function line(r: MultipartResult): string {
  const errs = r.errors > 0 ? `, ${r.errors} errors (first: ${r.firstError?.slice(0, 160)})` : ''
  return `${r.rps.toFixed(1)} req/s, ${r.mibPerS.toFixed(0)} MiB/s, p50 ${ms(r.latency?.p50)}, p99 ${ms(r.latency?.p99)}${errs}`
}

/** Starts the workload's router (replay buffer REPLAY_MIB), measures throughput both ways and the router's RSS, stops it. */
export async function measureMultipart(o: MultipartOptions): Promise<MultipartRun> {
  const plan = o.smoke === true
    ? { concurrency: 2, warmupMs: 100, durationMs: 300, rounds: 1, uploadMiB: 1, uploads: 2 }
    : o.quick
      ? { concurrency: 8, warmupMs: 1_000, durationMs: 3_000, rounds: 1, uploadMiB: UPLOAD_MIB, uploads: UPLOADS }
      : { concurrency: 8, warmupMs: 2_000, durationMs: 10_000, rounds: 2, uploadMiB: UPLOAD_MIB, uploads: UPLOADS }
  const fileBytes = FILE_MIB * MIB
  const sim = o.sims.fast
  const registry = ['providers:', '  - address: "0x' + 'd'.repeat(40) + '"', `    url: "${sim.url}"`, '    trust_mode: standard', '    models:', `      - { id: ${MODEL}, type: speech-to-text, price: { audio_second: 0.0001 } }`, ''].join('\n')
  o.progress(`multipart: starting its svc-router (${MODEL} on the fast simulator, replay buffer ${REPLAY_MIB} MiB)`)
  const router = await startOwnRouter(o.root, o.workDir, 'router-multipart', registry, [`upstream: { replay_buffer_bytes: ${REPLAY_MIB * MIB} }`])
  try {
    const viaRouter: Route = { origin: router.url, authorization: `Bearer ${router.key}` }
    // Memory first, on a router that has served only a warm-up (code, pools, the parser): after the throughput
    // run its heap would hold that run's garbage, which the uploads could reuse unseen. The warm-up is as wide as
    // the round (each upload within its memory bound): the chunk pool keeps up to 32 free 1 MiB slabs for the
    // next uploads (chunk-pool.ts), and after two uploads it holds about 6, so the round's growth counted the pool
    // reaching the size any burst of 10 leaves it at (2026-11-29: idle 122 -> 153 MiB after such a warm-up,
    // growth +51 -> +27 MiB for the same round).
    const maxMs = o.quick ? 60_000 : 120_000
    const uploads = (count: number, bytes: number): Promise<MultipartResult> => runLoad(o.root, { mode: 'uploads', route: viaRouter, fileBytes: bytes, uploads: count, maxMs }, maxMs + 30_000)
    const warmup = { uploads: plan.uploads, mib: FILE_MIB }
    const warm = await uploads(warmup.uploads, warmup.mib * MIB)
    if (warm.errors > 0) o.progress(`multipart: warm-up failed: ${warm.firstError}`)
    await new Promise((r) => setTimeout(r, 500))
    const round = async (uploadMiB: number): Promise<MemoryRound> => {
      const idleRssMb = treeRssKb(router.child.pid) / 1024
      const rss = new UsageMonitor(router.child.pid)
      rss.start(20)
      let peakBufferedMb = 0
      let polling = true
      const poll = (async () => {
        while (polling) {
          const mb = await bufferedMb(router.url)
          if (mb > peakBufferedMb) peakBufferedMb = mb
          await new Promise((r) => setTimeout(r, 20))
        }
      })()
      const load = await uploads(plan.uploads, uploadMiB * MIB)
      polling = false
      await poll
      const { peakRssMb } = rss.stop()
      o.progress(
        `multipart: ${plan.uploads} concurrent ${uploadMiB} MiB uploads through svc-router: ${load.ok}/${plan.uploads} in ${load.seconds.toFixed(1)} s; RSS ${idleRssMb.toFixed(0)} MiB idle, peak ${peakRssMb.toFixed(0)} MiB (+${(peakRssMb - idleRssMb).toFixed(0)}; uploads' gauge peak ${peakBufferedMb.toFixed(1)} MiB; ${plan.uploads} × upload ${plan.uploads * uploadMiB} MiB, ${plan.uploads} × upload memory ${plan.uploads * UPLOAD_MEMORY_MIB} MiB)${load.errors > 0 ? `, ${load.errors} errors (first: ${load.firstError})` : ''}`,
      )
      return { uploadMiB, idleRssMb, peakRssMb, peakBufferedMb, load }
    }
    const memory = await round(plan.uploadMiB)
    // Twice the upload size on the same router: if the router held uploads, its growth would double too.
    await new Promise((r) => setTimeout(r, 500))
    const memoryDouble = await round(2 * plan.uploadMiB)

    // Throughput: direct and through the router in turn, `rounds` times on a shared machine, each one's best kept.
    type Turn = { r: MultipartResult; router: Usage; simCpuMs: number }
    const throughput = async (label: string, route: Route, best: Turn | null, pid = router.child.pid): Promise<Turn> => {
      const routerMonitor = new UsageMonitor(pid)
      const simMonitor = new UsageMonitor(sim.child.pid)
      routerMonitor.start()
      simMonitor.start()
      const r = await runLoad(o.root, { mode: 'throughput', route, fileBytes, concurrency: plan.concurrency, warmupMs: plan.warmupMs, durationMs: plan.durationMs }, plan.warmupMs + plan.durationMs + 60_000)
      const turn = { r, router: routerMonitor.stop(), simCpuMs: simMonitor.stop().cpuMs }
      o.progress(`multipart: ${FILE_MIB} MiB transcriptions, ${plan.concurrency} clients, ${label}: ${line(r)}; CPU per request: simulator ${ms(turn.simCpuMs / r.sent)}, relay ${ms(turn.router.cpuMs / r.sent)}`)
      return best !== null && best.r.mibPerS >= r.mibPerS ? best : turn
    }
    // The floor relay on the same uploads (its `fast` relay, in front of the same simulator), in the same rounds.
    let floor: Target | null = null
    try {
      floor = await floorTarget(o.root, o.sims)
    } catch (err) {
      o.progress(`multipart: the floor relay did not start: ${(err as Error).message.slice(0, 300)}`)
    }
    let direct: Turn | null = null
    let routed: Turn | null = null
    let floored: Turn | null = null
    try {
      for (let round = 1; round <= plan.rounds; round++) {
        direct = await throughput(`direct (round ${round}/${plan.rounds})`, { origin: sim.url, authorization: `Bearer ${PROVIDER_KEY}` }, direct)
        routed = await throughput(`svc-router (round ${round}/${plan.rounds})`, viaRouter, routed)
        if (floor !== null) floored = await throughput(`the floor relay (round ${round}/${plan.rounds})`, { origin: floor.request('fast', false).origin, authorization: `Bearer ${PROVIDER_KEY}` }, floored, floor.pid!)
      }
    } finally {
      await floor?.stop()
    }
    o.progress(`multipart: throughput through svc-router ${(routed!.r.mibPerS / direct!.r.mibPerS).toFixed(2)}× direct`)
    const requestBytes = envelope(fileBytes).length
    const perMiB = (t: Turn): number => t.router.cpuMs / ((t.r.sent * requestBytes) / MIB)
    if (floored !== null) o.progress(`multipart: CPU per MiB relayed: svc-router ${ms(perMiB(routed!))}, the floor relay ${ms(perMiB(floored))}`)

    return {
      fileMiB: FILE_MIB,
      concurrency: plan.concurrency,
      durationMs: plan.durationMs,
      rounds: plan.rounds,
      uploadMiB: plan.uploadMiB,
      uploads: plan.uploads,
      replayBufferMiB: REPLAY_MIB,
      uploadMemoryMiB: UPLOAD_MEMORY_MIB,
      requestBytes,
      throughput: {
        direct: direct!.r,
        router: routed!.r,
        routerUsage: routed!.router,
        simCpuMs: { direct: direct!.simCpuMs, router: routed!.simCpuMs },
        ...(floored === null ? {} : { floor: floored.r, floorUsage: floored.router, floorSimCpuMs: floored.simCpuMs }),
      },
      memory,
      warmup,
      memoryDouble,
    }
  } finally {
    await router.child.stop()
  }
}

runAsLoadProcess(import.meta.url, runSpec)
