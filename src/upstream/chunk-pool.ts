/**
 * Reused memory for streamed uploads (multipart surfaces). uWS lends each chunk of a request body only for the
 * length of its callback, so every chunk is copied out; a fresh Buffer per chunk is memory V8 counts as
 * external, and every 64 MiB of it starts a full mark-compact of the heap, whatever the heap holds: measured on
 * 3 MiB transcriptions at 8 clients, a quarter of the router's CPU went to those collections and its RSS under
 * concurrent uploads followed the collector's schedule rather than what the uploads held.
 *
 * Here chunks are carved in order out of slabs of SLAB_BYTES, and a slab is reused once every chunk cut from it
 * is released. A chunk is released when its last hold is: each party that keeps it takes a hold of its own and
 * gives it back when it no longer reads it.
 * - the source, for the callback that hands the chunk on (uws-reply.ts);
 * - the replay buffer, while the chunk may be sent again (request-body.ts);
 * - the reader of one attempt, from the chunk's arrival until the attempt has handed it to its socket;
 * - the socket write, until the kernel has the bytes or the socket is gone (watchWrites below): undici writes
 *   chunks as they are, and a socket's write callback runs once the write is done or failed.
 * Memory is only reused when nobody holds it. A hold that is never given back (a path that forgets) costs only
 * the reuse of its slab: the pool keeps no reference to a retired slab in use, so the collector frees it as before.
 */
import type { Socket } from 'node:net'

/** Bytes per slab: two of uWS's largest chunks (its receive buffer is 512 KiB). */
export const SLAB_BYTES = 1024 * 1024
/** Free slabs kept for reuse, at most (idle memory the pool may hold). */
const MAX_FREE_SLABS = 32

class Slab {
  readonly pool: ChunkPool
  readonly bytes: Buffer
  /** Where the next chunk starts. */
  used = 0
  /** Chunks cut from this slab and not yet released. */
  live = 0
  /** No longer the slab chunks are cut from: back in the pool once `live` is 0. */
  retired = false

  constructor(pool: ChunkPool) {
    this.pool = pool
    this.bytes = Buffer.allocUnsafeSlow(SLAB_BYTES)
  }
}

/** The pool's record of one chunk: its slab, and the holds on it. */
class Lease {
  readonly slab: Slab
  holds = 1

  constructor(slab: Slab) {
    this.slab = slab
  }
}

const LEASE = Symbol('svc.chunkLease')
type Leased = Buffer & { [LEASE]?: Lease }

export class ChunkPool {
  #current: Slab | null = null
  readonly #free: Slab[] = []
  /** Slabs made so far (what the pool cost in memory at most, beside MAX_FREE_SLABS). */
  made = 0
  /** Chunks copied outside the pool (larger than a slab). */
  unpooled = 0
  /** Pooled chunks not yet released (0 whenever no upload is under way, unless a hold was lost). */
  live = 0

  /** A copy of `bytes` that the caller holds once (release it when done); larger than a slab: a plain copy. */
  copy(bytes: Uint8Array): Buffer {
    const n = bytes.length
    if (n === 0) return Buffer.alloc(0)
    if (n > SLAB_BYTES) {
      this.unpooled++
      return Buffer.from(bytes)
    }
    const chunk = this.alloc(n)
    chunk.set(bytes)
    return chunk
  }

  /** `n` bytes (1 to SLAB_BYTES) of uninitialised pooled memory that the caller holds once (a read fills them). */
  alloc(n: number): Buffer {
    let slab = this.#current
    if (slab === null || slab.used + n > SLAB_BYTES) slab = this.#next(slab)
    const chunk: Leased = slab.bytes.subarray(slab.used, slab.used + n)
    slab.used += n
    slab.live++
    this.live++
    chunk[LEASE] = new Lease(slab)
    return chunk
  }

  /** Slabs waiting for reuse. */
  get free(): number {
    return this.#free.length
  }

  #next(full: Slab | null): Slab {
    if (full !== null) {
      if (full.live === 0) {
        // Every chunk of it is released already: start it over.
        full.used = 0
        return full
      }
      full.retired = true
    }
    const slab = this.#free.pop() ?? this.#make()
    slab.retired = false
    slab.used = 0
    this.#current = slab
    return slab
  }

  #make(): Slab {
    this.made++
    return new Slab(this)
  }

  /** A slab's last chunk was released. */
  reclaim(slab: Slab): void {
    if (!slab.retired) {
      // The current slab: start it over rather than move on.
      if (slab === this.#current) slab.used = 0
      return
    }
    slab.retired = false
    if (this.#free.length < MAX_FREE_SLABS) this.#free.push(slab)
  }
}

/** The pool of every streamed upload in this process. */
export const uploadChunks = new ChunkPool()

/** One more hold on `chunk` (a no-op for a Buffer not from a pool). */
export function hold(chunk: Buffer): void {
  const lease = (chunk as Leased)[LEASE]
  if (lease !== undefined) lease.holds++
}

/** Gives back one hold on `chunk`; its memory may be reused after the last (a no-op for a Buffer not from a pool). */
export function release(chunk: Buffer): void {
  const lease = (chunk as Leased)[LEASE]
  if (lease === undefined || lease.holds <= 0) return
  if (--lease.holds > 0) return
  // Whoever still has this Buffer object must not find a lease that lets it hold reused memory again.
  ;(chunk as Leased)[LEASE] = undefined
  const slab = lease.slab
  slab.pool.live--
  if (--slab.live === 0) slab.pool.reclaim(slab)
}

/** Whether `chunk` is pooled memory still held by someone. */
export function leased(chunk: Buffer): boolean {
  const lease = (chunk as Leased)[LEASE]
  return lease !== undefined && lease.holds > 0
}

/**
 * Makes a socket hold each pooled chunk written to it until its write is done (or failed: a destroyed socket
 * calls back every write it had). Applied to every upstream socket (pools.ts), it costs other writes one
 * property lookup.
 */
export function watchWrites(socket: Socket): void {
  const write = socket.write as (chunk: unknown, encoding?: unknown, cb?: unknown) => boolean
  socket.write = function writeHolding(this: Socket, chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
    if (typeof chunk !== 'object' || chunk === null || (chunk as Leased)[LEASE] === undefined) return write.call(this, chunk, encoding, cb)
    const buffer = chunk as Buffer
    hold(buffer)
    const done = typeof encoding === 'function' ? encoding : cb
    return write.call(this, buffer, (err?: Error | null) => {
      release(buffer)
      if (typeof done === 'function') (done as (err?: Error | null) => void)(err)
    })
  } as Socket['write']
}
