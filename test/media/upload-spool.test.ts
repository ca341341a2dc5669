/**
 * The upload spool through the real router (src/upstream/upload-spool.ts): /metrics shows the bytes uploads hold
 * in memory and on disk while a provider holds one back, and none after; a spool that cannot be written (a
 * directory that is not one; a full disk, on a real 1 MiB tmpfs in a mount namespace of the router's own) fails
 * that upload with 503 upload_spool_failed, its hold given back and nothing billed, while an upload that fits
 * in memory at the same time is served.
 */
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { spawnRouter } from '../helpers/spawn-router.js'
import { startStack, type Stack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'
import { A, AUDIO_MODEL, charges, PRICE_SORT, wav } from './fixtures.js'

const BOUNDARY = 'svc-spool-boundary'
const KIB = 1024

/** A transcription form around a WAV of `bytes` bytes. */
function upload(bytes: number): Buffer {
  const file = wav((bytes - 44) / 32_000)
  randomBytes(file.length - 44).copy(file, 44)
  return Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${AUDIO_MODEL}\r\n`),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    file,
    Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
  ])
}

async function send(url: string, auth: Record<string, string>, body: Buffer): Promise<{ status: number; json: any }> {
  const res = await request(url + '/v1/audio/transcriptions', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...auth, ...PRICE_SORT },
    body,
  })
  return { status: res.statusCode, json: await res.body.json() }
}

/** A speech-to-text provider that reads an upload only once `open()` was called, then answers its size. */
async function gatedProvider(t: Test): Promise<{ url: string; open: () => void; asked: () => number }> {
  let gate: () => void = () => {}
  let opened = new Promise<void>((resolve) => (gate = resolve))
  let asked = 0
  const server = createServer((req: IncomingMessage, res) => {
    asked++
    let n = 0
    void opened.then(() => {
      req.on('data', (c: Buffer) => (n += c.length))
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ text: String(n) }))
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    open: () => {
      gate()
      opened = Promise.resolve()
    },
    asked: () => asked,
  }
}

function providers(url: string) {
  return [{ address: A, url, models: [{ id: AUDIO_MODEL, type: 'speech-to-text' as const, price: { audio_second: '0.0001' } }] }]
}

/** The two upload gauges of a /metrics page, in bytes. */
async function gauges(url: string): Promise<{ memory: number; disk: number; files: number }> {
  const text = await (await request(url + '/metrics')).body.text()
  const value = (re: RegExp): number => Number(re.exec(text)?.[1] ?? NaN)
  return {
    memory: value(/^svc_upload_buffered_bytes\{where="memory"\} (\d+)$/m),
    disk: value(/^svc_upload_buffered_bytes\{where="disk"\} (\d+)$/m),
    files: value(/^svc_upload_spool_files (\d+)$/m),
  }
}

t.test('/metrics shows the bytes an upload holds in memory and on disk while its provider waits, and none after', async (t) => {
  const provider = await gatedProvider(t)
  const stack = await startStack(t, providers(provider.url), { server: { upload_memory_bytes: 256 * KIB, upload_spool_dir: t.testdir() } })
  t.same(await gauges(stack.url), { memory: 0, disk: 0, files: 0 }, 'nothing before')
  const body = upload(4 * 1024 * KIB)
  const answer = send(stack.url, stack.auth, body)
  let seen = { memory: 0, disk: 0, files: 0 }
  t.ok(
    await eventually(async () => {
      seen = await gauges(stack.url)
      return seen.disk > 0 && seen.files === 1
    }),
    'bytes on disk while the provider waits',
  )
  t.ok(seen.memory > 0, `${seen.memory} bytes in memory: the upload's first ones`)
  provider.open()
  const res = await answer
  t.equal(res.status, 200)
  t.equal(res.json.text, String(body.length), 'the provider got every byte')
  t.ok(await eventually(async () => (await gauges(stack.url)).files === 0))
  t.same(await gauges(stack.url), { memory: 0, disk: 0, files: 0 }, 'nothing after')
})

t.test('a spool directory that cannot be written: 503 upload_spool_failed for that upload, hold given back; one in memory is served', async (t) => {
  const provider = await gatedProvider(t)
  const notADir = join(tmp(t), 'not-a-dir')
  writeFileSync(notADir, '')
  const stack: Stack = await startStack(t, providers(provider.url), { server: { upload_memory_bytes: 256 * KIB, upload_spool_dir: notADir } })
  provider.open()
  const [big, small] = await Promise.all([send(stack.url, stack.auth, upload(2 * 1024 * KIB)), send(stack.url, stack.auth, upload(64 * KIB))])
  t.equal(big.status, 503)
  t.equal(big.json.error.code, 'upload_spool_failed')
  t.equal(big.json.error.type, 'service_unavailable')
  t.match(big.json.error.message, /could not be buffered to disk \(ENOTDIR\)/)
  t.equal(small.status, 200, 'the upload that fits in memory is served')
  t.equal(small.json.text, String(upload(64 * KIB).length))
  t.ok(await eventually(() => stack.router.ledger.reserved(stack.account) === 0n))
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'the failed upload\'s hold was given back')
  t.equal((await charges(stack)).length, 1, 'only the served upload is billed')
})

/** A directory of the test's own, outside the fixture directory its router uses. */
function tmp(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-spool-test-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Whether this process may make a mount namespace with a tmpfs in it (root, and unshare and mount allowed). */
function tmpfsAllowed(): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'svc-spool-probe-'))
  const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount -t tmpfs -o size=64k tmpfs "$0" && umount "$0"', dir], { stdio: 'ignore' })
  rmSync(dir, { recursive: true, force: true })
  return probe.status === 0
}

const noTmpfs = tmpfsAllowed() ? false : 'needs a mount namespace with a tmpfs (root; unshare and mount allowed)'

t.test('a full disk: 503 upload_spool_failed, and the router serves the next upload', { skip: noTmpfs }, async (t) => {
  const spoolDir = tmp(t)
  const provider = await gatedProvider(t)
  provider.open()
  // The router alone sees a 1 MiB tmpfs on its spool directory: a real ENOSPC, gone with its process.
  const router = await spawnRouter(
    t,
    providers(provider.url),
    { server: { upload_memory_bytes: 256 * KIB, upload_spool_dir: spoolDir } },
    { wrap: ['unshare', '-m', 'sh', '-c', 'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"', spoolDir] },
  )
  const auth = { authorization: `Bearer ${router.key}` }
  const full = await send(router.url, auth, upload(3 * 1024 * KIB))
  t.equal(full.status, 503)
  t.equal(full.json.error.code, 'upload_spool_failed')
  t.match(full.json.error.message, /the disk is full/)
  const next = await send(router.url, auth, upload(512 * KIB))
  t.equal(next.status, 200, 'an upload that fits the disk is served after it')
  t.equal(next.json.text, String(upload(512 * KIB).length))
  t.ok(await eventually(async () => (await gauges(router.url)).files === 0))
  t.same(await gauges(router.url), { memory: 0, disk: 0, files: 0 }, 'nothing held')
})
