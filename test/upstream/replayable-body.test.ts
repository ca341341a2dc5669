/**
 * A streamed request body sent through real undici Pools to real http servers, kept in memory up to its bound
 * and in a real temporary file past it: a failover resends the whole body byte for byte from both; the order
 * holds across memory, disk and the read back; the file is 0600, nameless from its opening and closed at the
 * end; the memory bound is shared by concurrent uploads; a spool that cannot be written fails the upload and
 * gives everything back; the source is paused as before where pause holds.
 */
import { createHash } from 'node:crypto'
import { readdirSync, readlinkSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { request, type Dispatcher } from 'undici'
import { uploadChunks } from '../../src/upstream/chunk-pool.js'
import { ReplayableBody, type BodySource, type UploadReader } from '../../src/upstream/request-body.js'
import { UploadSpool } from '../../src/upstream/upload-spool.js'
import { eventually } from '../helpers/wait.js'

/** Sends a reader as undici's request body (its types leave out the async iterables it takes). */
function post(url: string, reader: UploadReader): Promise<Dispatcher.ResponseData> {
  return request(url, { method: 'POST', body: reader as unknown as Dispatcher.DispatchOptions['body'] })
}

/** A source the test feeds by hand, recording flow control. */
class ManualSource implements BodySource {
  handler: ((chunk: Buffer, last: boolean) => void) | null = null
  paused = false
  pauses = 0

  onChunk(handler: (chunk: Buffer, last: boolean) => void): void {
    this.handler = handler
  }
  pause(): void {
    this.paused = true
    this.pauses++
  }
  resume(): void {
    this.paused = false
  }
  feed(chunk: Buffer, last = false): void {
    this.handler!(Buffer.from(chunk), last)
  }
}

/** An upstream that reads the whole body and answers its sha256, or resets after `resetAfter` bytes. */
async function upstream(t: Test, resetAfter = -1): Promise<{ url: string; received: () => number }> {
  let received = 0
  const server = createServer((req: IncomingMessage, res) => {
    const hash = createHash('sha256')
    let n = 0
    req.on('data', (c: Buffer) => {
      n += c.length
      received += c.length
      hash.update(c)
      if (resetAfter >= 0 && n >= resetAfter) req.socket.destroy()
    })
    req.on('end', () => res.end(hash.digest('hex')))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received: () => received }
}

function chunks(count: number, size: number): Buffer[] {
  return Array.from({ length: count }, (_, i) => Buffer.alloc(size, i % 251))
}

function sha(parts: Buffer[]): string {
  const h = createHash('sha256')
  for (const p of parts) h.update(p)
  return h.digest('hex')
}

/** Feeds `parts` one per turn, honouring pause, until `stopped()` says the client gave up. */
async function feedAll(source: ManualSource, parts: Buffer[], stopped = () => false): Promise<void> {
  for (let i = 0; i < parts.length; i++) {
    while (source.paused) {
      if (stopped()) return
      await new Promise((r) => setTimeout(r, 1))
    }
    source.feed(parts[i]!, i === parts.length - 1)
    await new Promise((r) => setImmediate(r))
  }
}

function spoolIn(dir: string, memoryBytes = 64 * 1024, memoryTotalBytes = 1024 * 1024): UploadSpool {
  return new UploadSpool({ dir, memoryBytes, memoryTotalBytes })
}

/** A body over `spool`, failing the test on a spool error unless `failed` takes it. */
function bodyOf(source: BodySource, spool: UploadSpool, holdLimit = 1024 * 1024, failed?: (err: NodeJS.ErrnoException) => void, declaredLength = -1): ReplayableBody {
  return new ReplayableBody(source, {
    holdLimit,
    spool,
    pool: uploadChunks,
    failed: failed ?? ((err) => t.fail(`spool failed: ${String(err)}`)),
    declaredLength,
  })
}

/** Every chunk of a reader, as one buffer. */
async function readAll(reader: UploadReader): Promise<Buffer> {
  const got: Buffer[] = []
  for (;;) {
    const r = await reader.next()
    if (r.done === true) return Buffer.concat(got)
    got.push(Buffer.from(r.value))
  }
}

/** The descriptors of this process open on deleted files in `dir`, with their modes. */
function deletedIn(dir: string): { fd: string; mode: number }[] {
  const found: { fd: string; mode: number }[] = []
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`)
    } catch {
      continue
    }
    if (target.startsWith(dir + '/') && target.endsWith(' (deleted)')) found.push({ fd, mode: statSync(`/proc/self/fd/${fd}`).mode & 0o777 })
  }
  return found
}

t.test('a failover resends the whole body byte for byte, from memory and from the spool file', async (t) => {
  const parts = chunks(64, 16 * 1024)
  const broken = await upstream(t, 300 * 1024)
  const good = await upstream(t)
  const source = new ManualSource()
  const spool = spoolIn(t.testdir())
  const body = bodyOf(source, spool)
  const feeding = feedAll(source, parts)

  const first = body.take()
  t.ok(first, 'the first attempt gets the body')
  await t.rejects(post(broken.url, first!), 'the first upstream resets mid-upload')
  await feeding
  t.equal(body.inMemory, 64 * 1024, 'its first 64 KiB in memory')
  await eventually(() => body.spooled === 1024 * 1024 - 64 * 1024)
  const second = body.take()
  t.ok(second, 'the failover attempt gets the body again, 16 times its memory bound')
  const res = await post(good.url, second!)
  t.equal(await res.body.text(), sha(parts), 'the second upstream received every byte, in order')
  body.release()
  await eventually(() => spool.files === 0)
  t.same([spool.memory, spool.disk], [0, 0], 'nothing held once released')
})

t.test('order holds across memory, disk and the read back when a source reads on past pause', async (t) => {
  const spool = spoolIn(t.testdir())
  const source = new ManualSource()
  const body = bodyOf(source, spool)
  const live = uploadChunks.live
  // 2 MiB in one run, as a uWS core that reads on while paused: nobody reads yet, and pause is ignored.
  const parts = chunks(128, 16 * 1024)
  for (let i = 0; i < parts.length; i++) source.handler!(uploadChunks.copy(parts[i]!), i === parts.length - 1)
  t.ok(source.pauses > 0, 'the source was asked to pause')
  t.equal(body.inMemory, 64 * 1024, 'past the memory bound nothing more is kept in memory')
  await eventually(() => spool.memory === 64 * 1024)
  t.equal(spool.disk, 2 * 1024 * 1024 - 64 * 1024, 'the rest is on disk, and no longer in memory')
  const good = await upstream(t)
  const res = await post(good.url, body.take()!)
  t.equal(await res.body.text(), sha(parts), 'the provider gets every byte in order')
  body.release()
  await eventually(() => spool.files === 0)
  t.same([spool.memory, spool.disk], [0, 0])
  // The source's own hold of each chunk (uws-reply.ts gives it back after the callback) is this test's.
  t.ok(uploadChunks.live - live <= parts.length, 'the body holds none of the pooled chunks')
})

t.test('the spool file is created 0600, has no name from its opening on, and is closed at release', async (t) => {
  const dir = t.testdir()
  const spool = spoolIn(dir)
  const source = new ManualSource()
  const body = bodyOf(source, spool)
  for (const part of chunks(16, 16 * 1024)) source.feed(part)
  await eventually(() => body.spooled === 192 * 1024)
  t.same(readdirSync(dir), [], 'no name in the directory')
  const open = deletedIn(dir)
  t.equal(open.length, 1, 'one descriptor on the deleted file')
  t.equal(open[0]!.mode, 0o600, 'mode 0600')
  body.release()
  await eventually(() => deletedIn(dir).length === 0)
  t.equal(spool.files, 0)
})

t.test('an upload declared to fit in memory opens no spool file, unless the shared bound sends it to disk', async (t) => {
  const dir = t.testdir()
  const spool = spoolIn(dir, 64 * 1024, 96 * 1024)
  const good = await upstream(t)
  // 48 KiB declared, past half the 64 KiB bound (where an upload of unknown length opens its file).
  const small = chunks(3, 16 * 1024)
  const source = new ManualSource()
  const body = bodyOf(source, spool, 1024 * 1024, undefined, 48 * 1024)
  for (let i = 0; i < small.length; i++) source.feed(small[i]!, i === small.length - 1)
  await new Promise((r) => setTimeout(r, 20))
  t.equal(spool.files, 0, 'no file for an upload that fits')
  t.same(deletedIn(dir), [], 'no descriptor either')
  t.equal(body.inMemory, 48 * 1024, 'all of it in memory')
  t.equal(await (await post(good.url, body.take()!)).body.text(), sha(small), 'sent whole')
  t.equal(await (await post(good.url, body.take()!)).body.text(), sha(small), 'and again, for a failover')

  body.release()
  // The same declared size while another upload keeps most of the shared bound: the rest goes to a file.
  const other = new ManualSource()
  const big = bodyOf(other, spool)
  for (const part of chunks(4, 16 * 1024)) other.feed(part)
  t.equal(big.inMemory, 64 * 1024, 'another upload keeps 64 of the 96 KiB all may keep')
  const third = new ManualSource()
  const squeezed = bodyOf(third, spool, 1024 * 1024, undefined, 48 * 1024)
  const parts = chunks(3, 16 * 1024).map((c) => Buffer.alloc(c.length, 9))
  for (let i = 0; i < parts.length; i++) third.feed(parts[i]!, i === parts.length - 1)
  t.equal(squeezed.inMemory, 32 * 1024, 'only what the shared bound had left in memory')
  await eventually(() => squeezed.spooled === 16 * 1024)
  t.equal(await (await post(good.url, squeezed.take()!)).body.text(), sha(parts), 'the rest read back from its file')
  squeezed.release()
  big.release()
  await eventually(() => spool.files === 0)
  t.same([spool.memory, spool.disk], [0, 0])
})

t.test('the memory bound across uploads is shared: together they keep at most upload_memory_total_bytes', async (t) => {
  const spool = spoolIn(t.testdir(), 64 * 1024, 96 * 1024)
  const sources = [new ManualSource(), new ManualSource()]
  const bodies = sources.map((s) => bodyOf(s, spool))
  const parts = [chunks(8, 16 * 1024), chunks(8, 16 * 1024).map((c) => Buffer.alloc(c.length, 7))]
  for (let u = 0; u < 2; u++) {
    for (let i = 0; i < 8; i++) sources[u]!.feed(parts[u]![i]!, i === 7)
    // Chunks waiting to be written are memory too: once written, only the in-memory parts are.
    await eventually(() => spool.memory === bodies.reduce((n, b) => n + b.inMemory, 0))
  }
  t.equal(bodies[0]!.inMemory, 64 * 1024, 'the first keeps its own bound')
  t.equal(bodies[1]!.inMemory, 32 * 1024, 'the second only what was left of the total')
  t.equal(spool.disk, 160 * 1024, 'the rest of both on disk')
  const good = await upstream(t)
  for (let u = 0; u < 2; u++) t.equal(await (await post(good.url, bodies[u]!.take()!)).body.text(), sha(parts[u]!), `upload ${u + 1} whole`)
  bodies[0]!.release()
  const third = new ManualSource()
  const body3 = bodyOf(third, spool)
  for (const part of chunks(8, 16 * 1024)) third.feed(part)
  t.equal(body3.inMemory, 64 * 1024, 'memory given back is there for the next upload')
  bodies[1]!.release()
  body3.release()
  await eventually(() => spool.files === 0)
  t.same([spool.memory, spool.disk], [0, 0])
})

t.test('a spool directory that cannot be written fails that upload and gives back all it held', async (t) => {
  const notADir = join(t.testdir(), 'file')
  writeFileSync(notADir, '')
  const spool = spoolIn(notADir)
  const source = new ManualSource()
  const errors: NodeJS.ErrnoException[] = []
  const body = bodyOf(source, spool, 1024 * 1024, (err) => errors.push(err))
  const reader = body.take()!
  const pending = readAll(reader).then(
    () => null,
    (err: NodeJS.ErrnoException) => err.code,
  )
  for (const part of chunks(8, 16 * 1024)) source.feed(part)
  await eventually(() => errors.length > 0)
  t.equal(errors[0]!.code, 'ENOTDIR', 'the open failed, and the upload heard why')
  t.equal(await pending, 'SVC_UPLOAD_CLOSED', 'the attempt reading it fails')
  t.equal(body.take(), null, 'and nothing can send it again')
  t.notOk(source.paused, 'the rest of the upload is read and dropped')
  await eventually(() => spool.files === 0)
  t.same([spool.memory, spool.disk], [0, 0], 'nothing held')
})

t.test('with no attempt reading yet, the source is paused once holdLimit bytes came', async (t) => {
  const source = new ManualSource()
  const body = bodyOf(source, spoolIn(t.testdir()), 32 * 1024)
  const fed: Buffer[] = []
  for (let i = 0; i < 8 && !source.paused; i++) {
    fed.push(Buffer.alloc(16 * 1024, 1))
    source.feed(fed.at(-1)!)
  }
  t.ok(source.paused, 'the client is held instead of read on')
  t.equal(fed.length, 2, 'paused by the chunk that reached the limit')
  const good = await upstream(t)
  const reader = body.take()!
  t.notOk(source.paused, 'taking the body resumes the client')
  const rest = feedAll(source, [Buffer.alloc(16 * 1024, 2)])
  const res = await post(good.url, reader)
  await rest
  t.equal(await res.body.text(), sha([...fed, Buffer.alloc(16 * 1024, 2)]))
  body.release()
})

t.test('a reader that does not keep up pauses the source', async (t) => {
  const source = new ManualSource()
  const body = bodyOf(source, spoolIn(t.testdir()))
  const reader = body.take()!
  // Nobody consumes `reader`: once it is 64 KiB behind, the source is paused.
  let fed = 0
  for (; fed < 16 && !source.paused; fed++) source.feed(Buffer.alloc(8 * 1024))
  t.ok(source.paused)
  t.equal(fed, 8, 'paused at the high-water mark (64 KiB)')
  for (let i = 0; i < fed; i++) t.equal((await reader.next()).value?.length, 8 * 1024)
  t.notOk(source.paused, 'reading resumes it')
  await reader.return()
  body.release()
})

t.test('drain: a body no attempt will read again lets the rest of the upload through, and keeps none of it', async (t) => {
  const source = new ManualSource()
  const spool = spoolIn(t.testdir(), 0)
  const body = bodyOf(source, spool)
  const reader = body.take()!
  for (let i = 0; i < 16 && !source.paused; i++) source.feed(Buffer.alloc(8 * 1024))
  t.ok(source.paused, 'held by the stalled reader')
  body.drain()
  t.notOk(source.paused, 'resumed: the rest of the upload is read')
  t.ok(reader.closed, 'the reader is closed')
  const pauses = source.pauses
  for (let i = 0; i < 64; i++) source.feed(Buffer.alloc(64 * 1024), i === 63)
  t.equal(source.pauses, pauses, 'never paused again, however much comes')
  t.equal(body.take(), null, 'and no attempt can take it')
  await eventually(() => spool.files === 0)
  t.same([spool.memory, spool.disk], [0, 0], 'nothing kept')
})
