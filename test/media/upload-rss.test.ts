/**
 * The router's memory under large concurrent uploads to a slow provider, on every Node line: past
 * server.upload_memory_bytes an upload waits in its spool file (src/upstream/upload-spool.ts), so the router's
 * RSS stays within the memory bound across uploads plus a constant, whether its uWS core honours pause() (Node
 * 20) or reads on past it (Node 22 and 24, README "Known issues"). The router runs in a process of its own so
 * that its RSS is its alone.
 */
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import t from 'tap'
import { Agent, request } from 'undici'
import { spawnRouter } from '../helpers/spawn-router.js'
import { A, AUDIO_MODEL, wav } from './fixtures.js'

const BOUNDARY = 'svc-rss-boundary'
const MIB = 1024 * 1024
const UPLOADS = 10
const UPLOAD_MIB = 240
const MEMORY_BYTES = 4 * MIB
const MEMORY_TOTAL_BYTES = 32 * MIB
/**
 * What the process may grow by besides what uploads keep in memory: the pool's free slabs (32 MiB at most,
 * chunk-pool.ts), each connection's buffers, and the chunks a core that reads on past pause() delivers in one
 * run before their writes to disk complete.
 */
const CONSTANT_MIB = 64

t.test(`${UPLOADS} concurrent ${UPLOAD_MIB} MiB uploads to a slow provider: RSS grows by the memory bound plus a constant, not the uploads`, async (t) => {
  // A provider that reads each upload slowly (a pause between its reads) and answers how many bytes came.
  const server = createServer((req: IncomingMessage, res) => {
    let n = 0
    let since = 0
    req.on('data', (c: Buffer) => {
      n += c.length
      since += c.length
      if (since < 256 * 1024) return
      since = 0
      req.pause()
      setTimeout(() => req.resume(), 2)
    })
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ text: String(n) }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const router = await spawnRouter(t, [{ address: A, url, trust_mode: 'standard', models: [{ id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.0001' } }] }], {
    server: {
      max_multipart_body_bytes: 300 * MIB,
      upload_memory_bytes: MEMORY_BYTES,
      upload_memory_total_bytes: MEMORY_TOTAL_BYTES,
      upload_spool_dir: t.testdir(),
    },
  })
  let exited: string | null = null
  router.child.once('exit', (code, signal) => (exited = `router exited: code ${code}, signal ${signal}`))
  const agent = new Agent({ connections: UPLOADS })
  t.teardown(() => agent.close())
  const chunk = Buffer.alloc(MIB, 1)
  const opening = (total: number): Buffer => {
    const head = wav(0).subarray(0, 44)
    head.writeUInt32LE(total * MIB, 40)
    return Buffer.concat([
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${AUDIO_MODEL}\r\n`),
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
      head,
    ])
  }
  const closing = Buffer.from(`\r\n--${BOUNDARY}--\r\n`)
  /** Posts a WAV of `total` MiB made from one reused chunk (the client holds no upload). */
  async function post(total: number): Promise<{ status: number; text: string }> {
    const first = opening(total)
    async function* upload() {
      yield first
      for (let i = 0; i < total; i++) yield chunk
      yield closing
    }
    const res = await request(router.url + '/v1/audio/transcriptions', {
      method: 'POST',
      dispatcher: agent,
      headers: {
        'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
        authorization: `Bearer ${router.key}`,
        'content-length': String(first.length + total * MIB + closing.length),
      },
      body: Readable.from(upload()),
    })
    return { status: res.statusCode, text: await res.body.text() }
  }
  // Smaller uploads first warm the process (code, pools, the parser, every connection) so the measure is of the
  // uploads alone.
  for (const r of await Promise.all(Array.from({ length: UPLOADS }, () => post(2)))) t.equal(r.status, 200, r.text)

  const before = router.rssMiB()
  let peak = before
  const sampler = setInterval(() => {
    if (exited === null) peak = Math.max(peak, router.rssMiB())
  }, 10)
  let memPeak = 0
  let diskPeak = 0
  const scraper = setInterval(() => {
    void request(router.url + '/metrics').then(async (r) => {
      const text = await r.body.text()
      const m = /svc_upload_buffered_bytes\{where="memory"\} (\d+)/.exec(text)
      const d = /svc_upload_buffered_bytes\{where="disk"\} (\d+)/.exec(text)
      if (m !== null) memPeak = Math.max(memPeak, Number(m[1]) / MIB)
      if (d !== null) diskPeak = Math.max(diskPeak, Number(d[1]) / MIB)
    }, () => {})
  }, 100)
  const settled = await Promise.allSettled(Array.from({ length: UPLOADS }, () => post(UPLOAD_MIB))).finally(() => {
    clearInterval(sampler)
    clearInterval(scraper)
  })
  t.comment(`uploads held at most ${memPeak.toFixed(1)} MiB in memory, ${diskPeak.toFixed(1)} MiB on disk`)
  await new Promise((r) => setTimeout(r, 200))
  t.equal(exited, null, 'the router is still up')
  const results = settled.map((r) => (r.status === 'fulfilled' ? r.value : { status: 0, text: String(r.reason) }))
  const length = opening(UPLOAD_MIB).length + UPLOAD_MIB * MIB + closing.length
  for (const r of results) {
    t.equal(r.status, 200)
    if (r.status === 200) t.equal(JSON.parse(r.text).text, String(length), "the provider got every byte")
    else t.fail(r.text)
  }
  const growth = peak - before
  const bound = MEMORY_TOTAL_BYTES / MIB + CONSTANT_MIB
  t.comment(`router RSS ${before.toFixed(1)} MiB before, peak ${peak.toFixed(1)} MiB during ${UPLOADS} × ${UPLOAD_MIB} MiB uploads (${process.version})`)
  t.ok(growth <= bound, `the router's RSS grew ${growth.toFixed(1)} MiB, within ${MEMORY_TOTAL_BYTES / MIB} MiB of memory bound + ${CONSTANT_MIB} MiB`)
})
