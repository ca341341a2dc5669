/**
 * A request body as the failover loop sends it (DESIGN.md §5): each attempt takes the body anew, and a body that
 * cannot be sent again (the request is over) says so, which turns failover off for the request.
 */
import type { Readable } from 'node:stream'
import { hold, release, type ChunkPool } from './chunk-pool.js'
import type { SpoolFile, UploadSpool } from './upload-spool.js'

export interface RequestBody {
  /** The body for the next attempt, or null when it can no longer be sent (failover is then off). */
  take(): Buffer | Readable | AsyncIterable<Buffer> | null
}

/** A body held whole in memory (JSON surfaces): every attempt sends the same bytes. */
export class BufferBody implements RequestBody {
  readonly bytes: Buffer

  constructor(bytes: Buffer) {
    this.bytes = bytes
  }

  take(): Buffer {
    return this.bytes
  }
}

/**
 * Where a streamed body's bytes come from: the client's upload, delivered in chunks, with flow control back to
 * the client (the uWS reply pauses and resumes the socket).
 */
export interface BodySource {
  /**
   * `handler` receives every chunk and `last` on the final one. A chunk is the handler's to keep, unless it is
   * pooled memory (chunk-pool.ts): then keeping it past the call takes a hold, given back when done.
   */
  onChunk(handler: (chunk: Buffer, last: boolean) => void): void
  pause(): void
  resume(): void
}

/**
 * A streamed body (multipart uploads) that each attempt reads from the start, whatever its size: the upload is
 * kept whole for as long as the request lasts, its first bytes in memory and the rest in a temporary file
 * (upload-spool.ts), so a failover can send it again up to server.max_multipart_body_bytes. An attempt is handed
 * the bytes as they arrive when it keeps up, and reads them back from the file when it fell behind (a slow
 * provider, or a failover starting over).
 *
 * Flow control is as it was with the whole upload in memory: the source is paused while the reader is more than
 * READER_HIGH_WATER behind, while the file's writes lag WRITE_HIGH_WATER behind, and, with no attempt reading,
 * once `holdLimit` bytes came. What a source sends past pause() (uWS cores that read on, README "Known issues")
 * costs disk, not memory, beyond the in-memory part.
 *
 * Chunks may be pooled memory (chunk-pool.ts): the in-memory part, the file's write queue and each reader hold
 * what they keep, and `release()` (the request is over) gives back whatever is still held.
 */
export class ReplayableBody implements RequestBody {
  readonly #source: BodySource
  readonly #holdLimit: number
  readonly #spool: UploadSpool
  readonly #pool: ChunkPool
  readonly #failed: (err: NodeJS.ErrnoException) => void
  /** The upload's declared length (Content-Length), -1 when unknown. */
  readonly #declared: number
  /** The upload's first bytes, in memory: every chunk up to the first that went to the file. */
  readonly #memory: Buffer[] = []
  #memoryBytes = 0
  /** The rest of the upload's file (opened once half the memory bound is used). */
  #file: SpoolFile | null = null
  /** A chunk did not fit in memory: every later chunk goes to the file. */
  #toDisk = false
  #received = 0
  #ended = false
  #reader: UploadReader | null = null
  #paused = false
  #released = false

  /** `declaredLength`: the upload's Content-Length, -1 (the default) when it has none. */
  constructor(source: BodySource, options: { holdLimit: number; spool: UploadSpool; pool: ChunkPool; failed: (err: NodeJS.ErrnoException) => void; declaredLength?: number }) {
    this.#source = source
    this.#holdLimit = options.holdLimit
    this.#spool = options.spool
    this.#pool = options.pool
    this.#failed = options.failed
    this.#declared = options.declaredLength ?? -1
    source.onChunk((chunk, last) => this.#onChunk(chunk, last))
  }

  /** Bytes of the upload on disk now (written to its file). */
  get spooled(): number {
    return this.#file?.written ?? 0
  }

  /** Bytes of the upload kept in memory for a replay (not counting the file's write queue). */
  get inMemory(): number {
    return this.#memoryBytes
  }

  take(): UploadReader | null {
    if (this.#released) return null
    this.#reader?.close()
    const reader = new UploadReader(this)
    this.#reader = reader
    this.#flow()
    return reader
  }

  /**
   * The request is over (answered or abandoned): the in-memory part and the file are given back, and the
   * reader closed. An attempt still writing is failed by its reader; what a socket is writing stays held by it.
   */
  release(): void {
    if (this.#released) return
    this.#released = true
    this.#reader?.close()
    this.#reader = null
    for (const chunk of this.#memory) release(chunk)
    this.#memory.length = 0
    this.#spool.memory -= this.#memoryBytes
    this.#memoryBytes = 0
    this.#file?.close()
    this.#file = null
    this.#resume()
  }

  /**
   * No attempt will read this body again, yet the rest of the upload is wanted (an answer came before the
   * upload's end and waits for it to be judged): what is held is given back, and the rest is read and dropped.
   */
  drain(): void {
    this.release()
  }

  #onChunk(chunk: Buffer, last: boolean): void {
    if (this.#released) return
    const n = chunk.length
    if (n === 0) {
      // Nothing to keep (a last call with no bytes).
    } else if (!this.#toDisk && this.#spool.admits(this.#memoryBytes, n)) {
      hold(chunk)
      this.#memory.push(chunk)
      this.#memoryBytes += n
      this.#spool.memory += n
      // Half the memory bound used: the file is opened now, in the background, to be ready when it is needed;
      // not for an upload declared to fit in memory (it needs one only if the shared bound turns it away, and
      // then it opens one below): an open, an unlink and a close on the thread pool per upload, for nothing.
      if (this.#file === null && 2 * this.#memoryBytes >= this.#spool.settings.memoryBytes && !this.#fitsInMemory()) this.#openFile()
    } else {
      this.#toDisk = true
      if (this.#file === null) this.#openFile()
      if (this.#released) return
      // Past pause() and past the file's high-water mark: written before the source reads on.
      const file = this.#file!
      if (this.#paused && file.queuedBytes >= WRITE_HIGH_WATER) file.writeNow(chunk)
      else file.append(chunk)
      if (this.#released) return
    }
    this.#received += n
    if (last) this.#ended = true
    const reader = this.#reader
    if (reader !== null && !reader.closed) reader.more()
    this.#flow()
  }

  #fitsInMemory(): boolean {
    return this.#declared >= 0 && this.#declared <= this.#spool.settings.memoryBytes
  }

  #openFile(): void {
    const file = this.#spool.file((err) => this.#fail(err))
    file.onWritten = () => this.#flow()
    this.#file = file
  }

  /** The spool failed (disk full, directory unwritable, no descriptor left): the upload cannot go on. */
  #fail(err: NodeJS.ErrnoException): void {
    if (this.#released) return
    this.release()
    this.#failed(err)
  }

  /**
   * The bytes at `reader`'s position, for its next read: `serve` gets a chunk the reader then holds once, or
   * null at the end of the upload; `wait` when none came yet. A read back from the file answers later.
   */
  read(reader: UploadReader, serve: (chunk: Buffer | null) => void, wait: () => void): void {
    const at = reader.position
    if (at < this.#memoryBytes) {
      const chunk = this.#memory[reader.index++]!
      hold(chunk)
      return serve(chunk)
    }
    const file = this.#file
    if (file !== null) {
      const fileAt = at - this.#memoryBytes
      const found = file.locate(fileAt)
      if (typeof found === 'number') {
        reader.reading = true
        return file.read(this.#pool, fileAt, Math.min(READ_BYTES, found), (chunk) => {
          reader.reading = false
          if (chunk === null || reader.closed) {
            if (chunk !== null) release(chunk)
            return reader.fail()
          }
          serve(chunk)
        })
      }
      if (found !== null) {
        hold(found)
        return serve(found)
      }
    }
    if (this.#ended && at >= this.#received) return serve(null)
    wait()
  }

  /** Pauses or resumes the source after anything that changes how far behind the reader or the file is. */
  #flow(): void {
    if (this.#released || this.#ended) return this.#resume()
    const reader = this.#reader
    const lagging =
      reader === null || reader.closed ? this.#received >= this.#holdLimit : this.#received - reader.position >= READER_HIGH_WATER
    if (lagging || (this.#file !== null && this.#file.queuedBytes >= WRITE_HIGH_WATER)) this.#pause()
    else this.#resume()
  }

  /** The reader moved on. */
  advanced(): void {
    this.#flow()
  }

  #pause(): void {
    if (this.#paused) return
    this.#paused = true
    this.#source.pause()
  }

  #resume(): void {
    if (!this.#paused) return
    this.#paused = false
    this.#source.resume()
  }
}

/** Bytes a reader may be behind the upload before the source is paused (one of uWS's chunks at most arrives past it). */
const READER_HIGH_WATER = 64 * 1024
/** Bytes waiting to be written to an upload's file before the source is paused. */
const WRITE_HIGH_WATER = 1024 * 1024
/** Bytes read back from a spool file at a time. */
const READ_BYTES = 256 * 1024

/**
 * One attempt's view of a ReplayableBody, as the async iterable undici writes a request body from: undici asks
 * for the next chunk only once it has handed the previous one to its socket (or failed), so the reader holds
 * each chunk from its arrival until then, and the socket holds it while it writes (chunk-pool.ts watchWrites).
 */
export class UploadReader implements AsyncIterableIterator<Buffer> {
  readonly #body: ReplayableBody
  /** Bytes of the upload handed out so far. */
  position = 0
  /** The in-memory chunk at `position`, while it is in the body's in-memory part. */
  index = 0
  /** A read back from the file is under way. */
  reading = false
  /** The chunk last handed out, held until undici asks for the next one or stops. */
  #out: Buffer | null = null
  /** Superseded by another attempt's reader, or the request is over: undici's next read fails. */
  closed = false
  #waiting: { resolve: (r: IteratorResult<Buffer>) => void; reject: (err: Error) => void } | null = null
  readonly #serve = (chunk: Buffer | null): void => this.#served(chunk)
  readonly #wait = (): void => {}

  constructor(body: ReplayableBody) {
    this.#body = body
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  next(): Promise<IteratorResult<Buffer>> {
    // Undici asks again only once the previous chunk is with its socket.
    this.#handedOn()
    if (this.closed) return Promise.reject(readerClosed())
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject }
      this.#body.read(this, this.#serve, this.#wait)
    })
  }

  /** More of the upload came: a read that waits for it is answered. */
  more(): void {
    if (this.#waiting !== null && !this.reading) this.#body.read(this, this.#serve, this.#wait)
  }

  /** The read back from the file failed, or the reader was closed meanwhile. */
  fail(): void {
    const waiting = this.#waiting
    this.#waiting = null
    waiting?.reject(readerClosed())
  }

  /** Undici stopped reading (its write failed): what this reader holds is given back. */
  return(): Promise<IteratorResult<Buffer>> {
    this.#handedOn()
    this.close()
    return Promise.resolve({ value: undefined, done: true })
  }

  /**
   * No more chunks for this reader: a read under way fails. The chunk handed out last stays held until undici
   * asks again or stops, whichever comes: it may be on its way to the socket in this very turn.
   */
  close(): void {
    if (this.closed) return
    this.closed = true
    if (!this.reading) this.fail()
  }

  #served(chunk: Buffer | null): void {
    const waiting = this.#waiting
    if (waiting === null || this.closed) {
      if (chunk !== null) release(chunk)
      return this.fail()
    }
    this.#waiting = null
    if (chunk === null) return waiting.resolve({ value: undefined, done: true })
    this.#out = chunk
    this.position += chunk.length
    waiting.resolve({ value: chunk, done: false })
    this.#body.advanced()
  }

  #handedOn(): void {
    const out = this.#out
    if (out === null) return
    this.#out = null
    release(out)
  }
}

function readerClosed(): Error {
  return Object.assign(new Error('the upload was taken by another attempt or the request is over'), { code: 'SVC_UPLOAD_CLOSED' })
}
