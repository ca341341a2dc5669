/**
 * Where a streamed upload's bytes wait (as nginx's client_body_buffer_size and client_body_temp_path): the first
 * `server.upload_memory_bytes` of each upload in memory, while all uploads together keep at most
 * `server.upload_memory_total_bytes` there, and the rest in a temporary file of the upload. The file is created
 * 0600 in `server.upload_spool_dir` and unlinked as soon as it is open, so a crash leaves nothing behind; its
 * space is the kernel's to free once the descriptor is closed.
 *
 * Every file operation runs on libuv's thread pool (fs callbacks): the event loop never waits on the disk, and
 * nothing reads a whole file into memory (a reader reads it back a block at a time).
 */
import { close, open, openSync, read, unlink, unlinkSync, writev, writevSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { hold, release, type ChunkPool } from './chunk-pool.js'

export interface UploadSpoolSettings {
  /** The directory of the temporary files. */
  readonly dir: string
  /** Bytes of one upload kept in memory before the rest goes to its file. */
  readonly memoryBytes: number
  /** Bytes all uploads keep in memory together, at most (then the next bytes of any go to disk). */
  readonly memoryTotalBytes: number
}

/** The spool of one router: its settings and what its uploads hold now (the /metrics gauges). */
export class UploadSpool {
  readonly settings: UploadSpoolSettings
  /** Bytes uploads keep in memory: their in-memory parts and the chunks waiting to be written. */
  memory = 0
  /** Bytes in the spool files of uploads under way. */
  disk = 0
  /** Spool files open now. */
  files = 0

  constructor(settings: UploadSpoolSettings) {
    this.settings = settings
  }

  /** Whether an upload that keeps `kept` bytes in memory may keep `n` more there. */
  admits(kept: number, n: number): boolean {
    return kept + n <= this.settings.memoryBytes && this.memory + n <= this.settings.memoryTotalBytes
  }

  /** A new temporary file, opened in the background; `failed` hears of the first error of any operation. */
  file(failed: (err: NodeJS.ErrnoException) => void): SpoolFile {
    return new SpoolFile(this, failed)
  }
}

/**
 * One upload's temporary file, written in order: chunks are appended (held until the kernel has them) and
 * written a batch at a time with writev at the file's end. The descriptor is closed only once no operation
 * uses it, so a close never lets a later open reuse a number an operation still writes to.
 */
export class SpoolFile {
  readonly #spool: UploadSpool
  readonly #failed: (err: NodeJS.ErrnoException) => void
  #fd = -1
  readonly #path: string
  /** Open and unlinked: writes may start. */
  #ready = false
  #settled = false
  /** Operations in flight on the descriptor (the open, a write, reads). */
  #busy = 1
  #closed = false
  #error: NodeJS.ErrnoException | null = null
  /** Chunks not yet written whole, in order; the first `#writing` of them are in the write under way. */
  readonly queue: Buffer[] = []
  queuedBytes = 0
  /** Bytes of `queue[0]` already on disk (a short write). */
  #headWritten = 0
  #writing = 0
  /** Bytes of the chunks in the write under way (whole chunks, from where `queue[0]` starts). */
  #writingBytes = 0
  /** Bytes written at once (writeNow) past the write under way; they count as written when it completes. */
  #ahead = 0
  /** Bytes on disk. */
  written = 0

  constructor(spool: UploadSpool, failed: (err: NodeJS.ErrnoException) => void) {
    this.#spool = spool
    this.#failed = failed
    spool.files++
    const path = join(spool.settings.dir, `svc-upload-${process.pid}-${randomBytes(8).toString('hex')}`)
    this.#path = path
    open(path, 'wx+', 0o600, (err, fd) => {
      this.#busy--
      // Opened at once meanwhile (openNow), or closed: this one is not needed.
      if (this.#fd >= 0 || this.#closed || this.#error !== null) {
        if (err === null) {
          unlink(path, () => {})
          close(fd, () => {})
        }
        return this.#settle()
      }
      if (err !== null) {
        this.#fail(err)
        return this.#settle()
      }
      this.#fd = fd
      // Nothing is written before the name is gone: no byte of an upload is left behind a crash.
      unlink(path, (unlinked) => {
        if (this.#ready) return
        if (unlinked !== null) {
          this.#fail(unlinked)
          return this.#settle()
        }
        this.#ready = true
        this.#flush()
      })
    })
  }

  /**
   * Opens the file before returning (writeNow's case: the event loop is held by a source that reads on).
   * False when that failed; the failure is reported from a microtask, once the caller holds this file.
   */
  #openNow(): boolean {
    try {
      if (this.#fd >= 0) {
        // The background open completed and its unlink is under way: done here, unless it was quicker.
        try {
          unlinkSync(this.#path)
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        }
      } else {
        // A name of its own: the background open may have created its file already (it closes it then).
        const path = `${this.#path}-now`
        this.#fd = openSync(path, 'wx+', 0o600)
        unlinkSync(path)
      }
      this.#ready = true
      return true
    } catch (err) {
      this.#error ??= err as NodeJS.ErrnoException
      queueMicrotask(() => {
        if (!this.#closed) this.#failed(err as NodeJS.ErrnoException)
        this.#settle()
      })
      return false
    }
  }

  /** Where chunks still in memory start in the file: bytes before it can only be read back from disk. */
  get stable(): number {
    return this.written - this.#headWritten
  }

  /**
   * What is at `at`: a queued chunk that starts there, the bytes readable from disk from there on (a number), or
   * null when nothing came there yet. Readers move chunk by chunk through the queue and read the disk up to where
   * queued chunks start, so `at` is never inside a queued chunk.
   */
  locate(at: number): Buffer | number | null {
    let offset = this.stable
    if (at < offset) return offset - at
    const queue = this.queue
    let i = 0
    for (; i < this.#writing; i++) {
      if (offset === at) return queue[i]!
      offset += queue[i]!.length
    }
    if (at < offset + this.#ahead) return offset + this.#ahead - at
    offset += this.#ahead
    for (; i < queue.length; i++) {
      if (offset === at) return queue[i]!
      offset += queue[i]!.length
    }
    return null
  }

  /**
   * Appends `chunk` and writes it, with every queued chunk not yet being written, before returning: for a source
   * that reads on past pause() while this file's writes lag behind (README "Known issues"), where waiting for
   * the thread pool would hold each chunk in memory until the source stops. The event loop is held by that
   * source's read loop anyway; this makes the disk, not memory, what slows it down.
   */
  writeNow(chunk: Buffer): void {
    if (this.#closed || this.#error !== null) return
    if (!this.#ready && !this.#openNow()) return
    if (this.#writing === 0 && this.#headWritten > 0) return this.append(chunk)
    const tail = this.queue.splice(this.#writing)
    let held = 0
    for (const c of tail) held += c.length
    tail.push(chunk)
    const position = this.#writing === 0 ? this.written : this.stable + this.#writingBytes + this.#ahead
    let n = 0
    try {
      n = writevSync(this.#fd, tail, position)
    } catch (err) {
      n = -1
      this.#fail(err as NodeJS.ErrnoException)
    }
    for (let i = 0; i < tail.length - 1; i++) release(tail[i]!)
    this.queuedBytes -= held
    this.#spool.memory -= held
    if (n < 0) return this.#settle()
    if (n < held + chunk.length) {
      this.#fail(Object.assign(new Error(`short write to the spool file (${n} of ${held + chunk.length} bytes)`), { code: 'EIO' }))
      return this.#settle()
    }
    this.#spool.disk += n
    if (this.#writing === 0) this.written += n
    else this.#ahead += n
  }

  /** Appends `chunk` (held until written). */
  append(chunk: Buffer): void {
    if (this.#closed || this.#error !== null) return
    hold(chunk)
    this.queue.push(chunk)
    this.queuedBytes += chunk.length
    this.#spool.memory += chunk.length
    if (this.#writing === 0) this.#flush()
  }

  /**
   * Reads `length` bytes at `position` (where `locate` answered a number) into pooled memory the caller then holds once; `done`
   * gets the chunk, or null when the read failed or the file was closed meanwhile.
   */
  read(pool: ChunkPool, position: number, length: number, done: (chunk: Buffer | null) => void): void {
    if (this.#closed || this.#error !== null || !this.#ready) return done(null)
    const chunk = pool.alloc(length)
    this.#busy++
    let got = 0
    const more = (): void => {
      read(this.#fd, chunk, got, length - got, position + got, (err, n) => {
        if (err === null && n > 0 && got + n < length && !this.#closed) {
          got += n
          return more()
        }
        this.#busy--
        const whole = err === null && got + n === length && !this.#closed
        if (!whole) release(chunk)
        if (err !== null) this.#fail(err)
        else if (got + n < length && !this.#closed) this.#fail(Object.assign(new Error('spool file shorter than written'), { code: 'EIO' }))
        this.#settle()
        done(whole ? chunk : null)
      })
    }
    more()
  }

  /** The upload no longer needs the file: queued chunks are given back, and the descriptor closed once idle. */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#settle()
  }

  #flush(): void {
    if (this.#closed || this.#error !== null || !this.#ready || this.#writing > 0 || this.queue.length === 0) return
    const batch = this.queue.slice()
    let bytes = 0
    for (const c of batch) bytes += c.length
    this.#writingBytes = bytes
    bytes -= this.#headWritten
    if (this.#headWritten > 0) batch[0] = batch[0]!.subarray(this.#headWritten)
    this.#writing = batch.length
    this.#busy++
    writev(this.#fd, batch, this.written, (err, n) => {
      this.#busy--
      this.#writing = 0
      this.#writingBytes = 0
      if (err === null && n < bytes && this.#ahead > 0) {
        err = Object.assign(new Error(`short write to the spool file (${n} of ${bytes} bytes)`), { code: 'EIO' })
      }
      if (err !== null) {
        this.#fail(err)
        return this.#settle()
      }
      this.#wrote(n)
      // What writeNow put past this write is in order behind it now.
      this.written += this.#ahead
      this.#ahead = 0
      if (this.#closed) return this.#settle()
      this.#flush()
      this.onWritten?.()
    })
  }

  /** Called after each write: room in the queue (flow control) and bytes readable from disk. */
  onWritten: (() => void) | null = null

  /** `n` more bytes reached the file: the chunks written whole are given back. */
  #wrote(n: number): void {
    this.written += n
    this.#spool.disk += n
    let left = n + this.#headWritten
    while (this.queue.length > 0 && left >= this.queue[0]!.length) {
      const chunk = this.queue.shift()!
      left -= chunk.length
      this.queuedBytes -= chunk.length
      this.#spool.memory -= chunk.length
      release(chunk)
    }
    this.#headWritten = left
  }

  #fail(err: NodeJS.ErrnoException): void {
    if (this.#error !== null) return
    this.#error = err
    if (!this.#closed) this.#failed(err)
  }

  /** Once closed (or failed) and idle: the queue given back, the descriptor closed, the gauges left. */
  #settle(): void {
    if (!(this.#closed || this.#error !== null) || this.#busy > 0) return
    for (const chunk of this.queue) release(chunk)
    this.#spool.memory -= this.queuedBytes
    this.queue.length = 0
    this.queuedBytes = 0
    this.#headWritten = 0
    if (!this.#closed || this.#settled) return
    this.#settled = true
    this.#spool.disk -= this.written
    this.written = 0
    this.#spool.files--
    const fd = this.#fd
    this.#fd = -1
    if (fd >= 0) close(fd, () => {})
  }
}
