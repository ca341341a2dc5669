/**
 * Image edits streamed straight through (issue 30), measured on their own: a client that uploads a 20 MiB edit at
 * a paced rate (PIECE_MIB every PACE_MS, as a client link slower than loopback does), with `model` and `prompt`
 * before the image and `n` after it, direct to an image-edit provider and through a svc-router of its own in turn.
 * Per upload: how much of it the provider had when the client sent its last byte, and the time from that byte
 * to the answer's head (what the client waits once it is done). A router that reads the form whole before it
 * sends has 0% at the provider then and adds the whole router → provider copy to the wait; one that streams
 * has nearly all of it there and adds about nothing. Medians of ROUNDS uploads each, and their ratio.
 *
 *   npm run build && node dist/bench/e2e/edit-upload.js [--root DIR]
 *
 * `--root` runs the router of another build (a checkout with its own dist/), to compare before and after. Not
 * part of `bench:e2e` (it takes about ROUNDS × 2 × the paced upload time, ~15 s).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { request } from 'undici'
import { stopAll } from './processes.js'
import { startOwnRouter } from './targets.js'

const MIB = 1024 * 1024
const IMAGE_MIB = 20
const PIECE_MIB = 1
const PACE_MS = 25
const ROUNDS = 5
const MODEL = 'bench-image'
const BOUNDARY = 'svc-bench-edit'

/** An image-edit provider that counts the bytes of the upload under way and answers once it has all of it. */
function provider(): Promise<{ server: Server; url: string; received: () => number; reset: () => void }> {
  let received = 0
  const server = createServer((req: IncomingMessage, res) => {
    if (req.method !== 'POST') return res.end('{"object":"list","data":[]}')
    received = 0
    req.on('data', (c: Buffer) => (received += c.length))
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ created: 1, data: [{ b64_json: 'aGk=' }, { b64_json: 'aGk=' }] }))
    })
  })
  return new Promise((done) =>
    server.listen(0, '127.0.0.1', () =>
      done({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received: () => received, reset: () => (received = 0) }),
    ),
  )
}

function form(): Buffer {
  const field = (name: string, value: string) => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`
  return Buffer.concat([
    Buffer.from(field('model', MODEL) + field('prompt', 'a hat')),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="i.png"\r\nContent-Type: image/png\r\n\r\n`),
    Buffer.alloc(IMAGE_MIB * MIB, 0x5a),
    Buffer.from('\r\n' + field('n', '2') + `--${BOUNDARY}--\r\n`),
  ])
}

interface Round {
  /** Share of the upload at the provider when the client sent its last byte. */
  readonly atProvider: number
  /** From the client's last byte to the answer's head, ms. */
  readonly tailMs: number
  readonly totalMs: number
}

async function upload(url: string, authorization: string, body: Buffer, p: { received: () => number; reset: () => void }): Promise<Round> {
  p.reset()
  let doneAt = 0
  let atProvider = 0
  async function* paced(): AsyncGenerator<Buffer> {
    for (let at = 0; at < body.length; at += PIECE_MIB * MIB) {
      if (at > 0) await new Promise((r) => setTimeout(r, PACE_MS))
      yield body.subarray(at, at + PIECE_MIB * MIB)
    }
    // Asked for more after the last piece: undici handed it to the socket.
    doneAt = performance.now()
    atProvider = p.received() / body.length
  }
  const started = performance.now()
  const res = await request(url + '/v1/images/edits', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, 'content-length': String(body.length), authorization },
    body: Readable.from(paced(), { objectMode: false }),
  })
  const headAt = performance.now()
  const text = await res.body.text()
  if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${text.slice(0, 200)}`)
  return { atProvider, tailMs: headAt - doneAt, totalMs: headAt - started }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

async function main(): Promise<void> {
  const here = fileURLToPath(new URL('.', import.meta.url))
  const at = process.argv.indexOf('--root')
  const root = at === -1 ? resolve(here, '..', '..', '..') : resolve(process.argv[at + 1]!)
  const work = mkdtempSync(join(tmpdir(), 'svc-edit-bench-'))
  const p = await provider()
  try {
    const registry = ['providers:', '  - address: "0x' + 'e'.repeat(40) + '"', `    url: "${p.url}"`, '    trust_mode: standard', '    models:', `      - { id: ${MODEL}, type: text-to-image, price: { image: 0.003 } }`, ''].join('\n')
    const router = await startOwnRouter(root, work, 'router-edits', registry, ['health: { probes: false }'])
    const body = form()
    const targets: [string, string, string][] = [
      ['direct', p.url, 'Bearer none'],
      ['svc-router', router.url, `Bearer ${router.key}`],
    ]
    const results = new Map<string, Round[]>()
    for (const [, url, auth] of targets) await upload(url, auth, body, p) // warm-up
    for (let i = 0; i < ROUNDS; i++) for (const [name, url, auth] of targets) results.set(name, [...(results.get(name) ?? []), await upload(url, auth, body, p)])
    const line = (name: string) => {
      const r = results.get(name)!
      return { at: median(r.map((x) => x.atProvider)), tail: median(r.map((x) => x.tailMs)), total: median(r.map((x) => x.totalMs)) }
    }
    const d = line('direct')
    const s = line('svc-router')
    console.log(`router: ${root}`)
    console.log(`${IMAGE_MIB} MiB edit, client paced at ${PIECE_MIB} MiB / ${PACE_MS} ms, median of ${ROUNDS}`)
    console.log('target      | at provider when the client is done | last byte → answer head | whole upload → answer head')
    for (const [name, v] of [['direct', d], ['svc-router', s]] as const) {
      console.log(`${name.padEnd(11)} | ${(v.at * 100).toFixed(1).padStart(6)} % | ${v.tail.toFixed(1).padStart(7)} ms | ${v.total.toFixed(0).padStart(6)} ms`)
    }
    console.log(`svc-router / direct: last byte → answer ${(s.tail / d.tail).toFixed(2)}×, whole ${(s.total / d.total).toFixed(3)}×; added ${(s.tail - d.tail).toFixed(1)} ms after the last byte`)
  } finally {
    await stopAll()
    p.server.closeAllConnections()
    p.server.close()
    rmSync(work, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  console.error(err)
  process.exitCode = 1
})
