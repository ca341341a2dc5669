/**
 * The pool of upload chunks (src/upstream/chunk-pool.ts): memory is reused only once every hold on every chunk
 * of a slab is given back, and a socket holds what it is still writing, on a real TCP connection whose reader
 * is slower than the writer.
 */
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { createServer, connect, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { ChunkPool, hold, leased, release, SLAB_BYTES, uploadChunks, watchWrites } from '../../src/upstream/chunk-pool.js'

t.test('a slab is reused only once every chunk cut from it is released', async (t) => {
  const pool = new ChunkPool()
  const half = SLAB_BYTES / 2
  const a = pool.copy(Buffer.alloc(half, 1))
  const b = pool.copy(Buffer.alloc(half, 2))
  t.equal(pool.made, 1, 'two halves share one slab')
  hold(a) // a second party keeps `a`
  release(b)
  const c = pool.copy(Buffer.alloc(half, 3)) // the first slab is full: a new one
  t.equal(pool.made, 2)
  release(a)
  t.ok(leased(a), 'still held once')
  t.equal(a[0], 1)
  release(a)
  t.notOk(leased(a), 'its last hold is gone')
  t.equal(pool.free, 1, 'the first slab is back in the pool')
  release(c)
  const d = pool.copy(Buffer.alloc(half, 4))
  const e = pool.copy(Buffer.alloc(half, 5))
  const f = pool.copy(Buffer.alloc(half, 6))
  t.equal(pool.made, 2, 'the released memory served three more chunks, no new slab')
  t.same([d[0], e[0], f[0]], [4, 5, 6])
  for (const x of [d, e, f]) release(x)
  t.equal(pool.live, 0)
  release(d)
  t.equal(pool.live, 0, 'a release past the last hold is ignored')
})

t.test('a chunk larger than a slab is a plain copy; holds on plain Buffers do nothing', async (t) => {
  const pool = new ChunkPool()
  const big = pool.copy(Buffer.alloc(SLAB_BYTES + 1, 9))
  t.equal(pool.unpooled, 1)
  t.notOk(leased(big))
  hold(big)
  release(big)
  t.equal(big[SLAB_BYTES], 9)
  t.equal(pool.made, 0)
})

t.test('a socket holds pooled chunks until they are written, even when the reader is slow', async (t) => {
  // A reader that reads nothing until the writer has queued far more than the kernel buffers take.
  let received: Buffer[] = []
  let peer: Socket | null = null
  const done = new Promise<void>((resolve) => {
    const server = createServer((s) => {
      peer = s
      s.pause()
      s.on('data', (c: Buffer) => received.push(c))
      s.on('end', () => {
        server.close()
        resolve()
      })
    })
    server.listen(0, '127.0.0.1', () => {
      const socket = connect((server.address() as AddressInfo).port, '127.0.0.1')
      watchWrites(socket)
      socket.on('connect', () => void write(socket))
    })
  })
  const sent = createHash('sha256')
  let queued = 0
  let asyncWrites = 0
  async function write(socket: Socket): Promise<void> {
    // 48 MiB in 256 KiB chunks, each released by its writer right after write(): only the socket's hold keeps
    // it. The first 33 go out while the reader reads nothing (more than the kernel's buffers take), the rest
    // at the pace the reader drains.
    for (let i = 0; i < 192; i++) {
      const bytes = Buffer.alloc(256 * 1024, (i * 7 + 1) & 0xff)
      sent.update(bytes)
      const chunk = uploadChunks.copy(bytes)
      const more = socket.write(chunk)
      queued += chunk.length
      if (socket.writableLength > 0) asyncWrites++
      release(chunk)
      if (i === 32) peer!.resume()
      else if (i > 32 && !more) await once(socket, 'drain')
    }
    socket.end()
  }
  await done
  t.equal(queued, 48 * 1024 * 1024)
  t.ok(asyncWrites > 0, `${asyncWrites} chunks were still being written when their writer let go`)
  t.equal(createHash('sha256').update(Buffer.concat(received)).digest('hex'), sent.digest('hex'), 'every byte arrived as written')
  t.ok(uploadChunks.made <= 24, `${uploadChunks.made} slabs of 1 MiB served 48 MiB: memory was reused`)
  t.equal(uploadChunks.live, 0, 'every hold was given back')
  received = []
})
