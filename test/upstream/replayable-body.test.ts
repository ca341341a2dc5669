/**
 * A streamed request body sent through real undici Pools to real http servers: a failover inside the replay
 * buffer resends the whole body byte for byte; past it the body cannot be taken again (failover off); the
 * source is paused rather than buffered without bound.
 */
import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { request, type Dispatcher } from 'undici'
import { ReplayableBody, type BodySource, type UploadReader } from '../../src/upstream/request-body.js'

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

t.test('a failover inside the replay buffer resends the whole body byte for byte', async (t) => {
  const parts = chunks(16, 16 * 1024)
  const broken = await upstream(t, 64 * 1024)
  const good = await upstream(t)
  const source = new ManualSource()
  const body = new ReplayableBody(source, 1024 * 1024)
  const feeding = feedAll(source, parts)

  const first = body.take()
  t.ok(first, 'the first attempt gets the body')
  await t.rejects(post(broken.url, first!), 'the first upstream resets mid-upload')
  await feeding
  t.ok(body.replayable, 'still inside the replay buffer')
  const second = body.take()
  t.ok(second, 'the failover attempt gets the body again')
  const res = await post(good.url, second!)
  t.equal(await res.body.text(), sha(parts), 'the second upstream received every byte, in order')
})

t.test('past the replay buffer the body cannot be taken again: failover is off', async (t) => {
  const parts = chunks(32, 16 * 1024)
  const broken = await upstream(t, 400 * 1024)
  const source = new ManualSource()
  const body = new ReplayableBody(source, 128 * 1024)
  const first = body.take()!
  let gaveUp = false
  const feeding = feedAll(source, parts, () => gaveUp)
  await t.rejects(post(broken.url, first!))
  t.equal(body.replayable, false, 'the upload outgrew the buffer')
  t.equal(body.take(), null, 'no second attempt can send it')
  // With no attempt left the client is held (the request ends with an error and its upload is dropped).
  gaveUp = true
  await feeding
  t.ok(source.paused)
})

t.test('the whole body goes through when the first attempt succeeds, past the buffer too', async (t) => {
  const parts = chunks(64, 32 * 1024)
  const good = await upstream(t)
  const source = new ManualSource()
  const body = new ReplayableBody(source, 64 * 1024)
  const first = body.take()!
  const feeding = feedAll(source, parts)
  const res = await post(good.url, first!)
  t.equal(await res.body.text(), sha(parts))
  await feeding
  t.equal(body.replayable, false)
})

t.test('with no attempt reading yet, the source is paused once the buffer is full', async (t) => {
  const source = new ManualSource()
  const body = new ReplayableBody(source, 32 * 1024)
  const fed: Buffer[] = []
  for (let i = 0; i < 8 && !source.paused; i++) {
    fed.push(Buffer.alloc(16 * 1024, 1))
    source.feed(fed.at(-1)!)
  }
  t.ok(source.paused, 'the client is held instead of buffered without bound')
  t.equal(fed.length, 3, 'paused by the chunk that went past the buffer')
  const good = await upstream(t)
  const reader = body.take()!
  t.notOk(source.paused, 'taking the body resumes the client')
  const rest = feedAll(source, [Buffer.alloc(16 * 1024, 2)])
  const res = await post(good.url, reader!)
  await rest
  const expected = sha([...fed, Buffer.alloc(16 * 1024, 2)])
  t.equal(await res.body.text(), expected)
})

t.test('a reader that does not keep up pauses the source', async (t) => {
  const source = new ManualSource()
  const body = new ReplayableBody(source, 0)
  const reader = body.take()!
  // Nobody consumes `reader`: its queue fills to the high-water mark, then the source is paused.
  let fed = 0
  for (; fed < 16 && !source.paused; fed++) source.feed(Buffer.alloc(8 * 1024))
  t.ok(source.paused)
  t.equal(fed, 8, 'paused at the high-water mark (64 KiB)')
  for (let i = 0; i < fed; i++) t.equal((await reader.next()).value?.length, 8 * 1024)
  t.notOk(source.paused, 'reading resumes it')
  await reader.return()
})

t.test('drain: a body no attempt will read again lets the rest of the upload through, and keeps none of it', async (t) => {
  const source = new ManualSource()
  const body = new ReplayableBody(source, 0)
  const reader = body.take()!
  // A reader nobody consumes: the source is paused at its high-water mark, as an attempt that stopped reading.
  for (let i = 0; i < 16 && !source.paused; i++) source.feed(Buffer.alloc(8 * 1024))
  t.ok(source.paused, 'held by the stalled reader')
  body.drain()
  t.notOk(source.paused, 'resumed: the rest of the upload is read')
  t.ok(reader.closed, 'the reader gave back what it queued')
  const pauses = source.pauses
  for (let i = 0; i < 64; i++) source.feed(Buffer.alloc(64 * 1024), i === 63)
  t.equal(source.pauses, pauses, 'never paused again, however much comes')
  t.equal(body.take(), null, 'and no attempt can take it')
  t.notOk(body.replayable)
})
