/**
 * A request body as the failover loop sends it (DESIGN.md §5): each attempt takes the body anew, and a body that
 * cannot be sent again (a streamed upload past its replay buffer, as undici's `isDisturbed` turns retry off)
 * says so, which turns failover off for the request.
 */
import type { Readable } from 'node:stream'
import { hold, release } from './chunk-pool.js'

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
 * A streamed body (multipart uploads) that each attempt reads from the start: the bytes seen so far are kept in a
 * replay buffer of at most `limit` bytes, so a failover can send them again, then the attempt continues with the
 * live bytes. Once the upload outgrows the buffer the kept bytes are dropped and the body cannot be sent again:
 * `take()` then answers null for every later attempt, which turns failover off for the request (as undici's
 * `isDisturbed` turns retry off). It never holds more than `limit` bytes plus what the reader has not taken yet:
 * a reader that does not keep up pauses the source, and with no reader attached the source is paused once the
 * buffer is full.
 *
 * Chunks may be pooled memory (chunk-pool.ts): the replay buffer and each reader hold what they keep, and
 * `release()` (the request is over) gives back whatever is still held.
 */
export class ReplayableBody implements RequestBody {
  readonly #source: BodySource
  readonly #limit: number
  /** Every chunk so far while they fit in `limit`; null once the body outgrew it or was released. */
  #kept: Buffer[] | null = []
  #keptBytes = 0
  #ended = false
  #taken = 0
  #reader: UploadReader | null = null
  #paused = false
  #released = false

  constructor(source: BodySource, limit: number) {
    this.#source = source
    this.#limit = limit
    source.onChunk((chunk, last) => this.#onChunk(chunk, last))
  }

  /** Whether another attempt could still send the whole body. */
  get replayable(): boolean {
    return this.#kept !== null
  }

  take(): UploadReader | null {
    if (this.#released || (this.#taken > 0 && this.#kept === null)) return null
    this.#taken++
    this.#reader?.close()
    const reader = new UploadReader(() => this.#resume())
    this.#reader = reader
    for (const chunk of this.#kept ?? []) reader.push(chunk)
    if (this.#ended) reader.end()
    this.#resume()
    return reader
  }

  /**
   * The request is over (answered or abandoned): the replay buffer and the reader give back their holds. An
   * attempt still writing is failed by its reader, and what a socket is writing stays held by the socket.
   */
  release(): void {
    if (this.#released) return
    this.#released = true
    this.#reader?.close()
    this.#reader = null
    this.#drop()
  }

  /**
   * No attempt will read this body again, yet the rest of the upload is wanted (an answer came before the
   * upload's end and waits for it to be judged): what is held is given back, and the rest is read and dropped.
   */
  drain(): void {
    this.release()
    this.#resume()
  }

  #onChunk(chunk: Buffer, last: boolean): void {
    if (this.#released) return
    if (this.#kept !== null) {
      if (this.#keptBytes + chunk.length <= this.#limit) {
        this.#keep(this.#kept, chunk)
      } else if (this.#reader !== null) {
        // Past the replay buffer while an attempt reads: it is the last one that can send this body.
        this.#drop()
      } else {
        // Nobody reads yet and the buffer is full: hold the client until an attempt takes the body.
        this.#keep(this.#kept, chunk)
        this.#pause()
      }
    }
    if (last) this.#ended = true
    const reader = this.#reader
    if (reader === null || reader.closed) {
      if (this.#kept === null) this.#pause()
      return
    }
    if (!reader.push(chunk)) this.#pause()
    if (last) reader.end()
  }

  /** A chunk into the replay buffer, held there until it is dropped. */
  #keep(kept: Buffer[], chunk: Buffer): void {
    hold(chunk)
    kept.push(chunk)
    this.#keptBytes += chunk.length
  }

  /** The replay buffer's chunks given back: the body can no longer be sent again. */
  #drop(): void {
    const kept = this.#kept
    this.#kept = null
    this.#keptBytes = 0
    if (kept !== null) for (const chunk of kept) release(chunk)
  }

  #pause(): void {
    if (this.#paused || this.#ended) return
    this.#paused = true
    this.#source.pause()
  }

  #resume(): void {
    if (!this.#paused) return
    this.#paused = false
    this.#source.resume()
  }
}

/** Bytes a reader queues before the source is paused (one of uWS's chunks at most arrives past it). */
const READER_HIGH_WATER = 64 * 1024

/**
 * One attempt's view of a ReplayableBody, as the async iterable undici writes a request body from: undici asks
 * for the next chunk only once it has handed the previous one to its socket (or failed), so the reader holds
 * each chunk from its arrival until then, and the socket holds it while it writes (chunk-pool.ts watchWrites).
 */
export class UploadReader implements AsyncIterableIterator<Buffer> {
  readonly #more: () => void
  readonly #queue: Buffer[] = []
  #queuedBytes = 0
  /** The chunk last handed out, held until undici asks for the next one or stops. */
  #out: Buffer | null = null
  #ended = false
  /** Superseded by another attempt's reader, or the request is over: undici's next read fails. */
  closed = false
  #waiting: { resolve: (r: IteratorResult<Buffer>) => void; reject: (err: Error) => void } | null = null

  constructor(more: () => void) {
    this.#more = more
  }

  [Symbol.asyncIterator](): this {
    return this
  }

  /** A chunk for this reader; false when it has enough queued and the source should pause. */
  push(chunk: Buffer): boolean {
    if (this.closed) return true
    hold(chunk)
    const waiting = this.#waiting
    if (waiting !== null) {
      this.#waiting = null
      this.#out = chunk
      waiting.resolve({ value: chunk, done: false })
      return true
    }
    this.#queue.push(chunk)
    this.#queuedBytes += chunk.length
    return this.#queuedBytes < READER_HIGH_WATER
  }

  /** The upload is whole: after the queued chunks, the reader ends. */
  end(): void {
    this.#ended = true
    const waiting = this.#waiting
    if (waiting !== null && this.#queue.length === 0) {
      this.#waiting = null
      waiting.resolve({ value: undefined, done: true })
    }
  }

  next(): Promise<IteratorResult<Buffer>> {
    // Undici asks again only once the previous chunk is with its socket.
    this.#handedOn()
    if (this.closed) return Promise.reject(readerClosed())
    const chunk = this.#queue.shift()
    if (chunk !== undefined) {
      this.#queuedBytes -= chunk.length
      this.#out = chunk
      if (this.#queuedBytes < READER_HIGH_WATER) this.#more()
      return Promise.resolve({ value: chunk, done: false })
    }
    if (this.#ended) return Promise.resolve({ value: undefined, done: true })
    this.#more()
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject }
    })
  }

  /** Undici stopped reading (its write failed): what this reader holds is given back. */
  return(): Promise<IteratorResult<Buffer>> {
    this.#handedOn()
    this.close()
    return Promise.resolve({ value: undefined, done: true })
  }

  /**
   * No more chunks for this reader: the queued ones are given back and a read under way fails. The chunk
   * handed out last stays held until undici asks again or stops, whichever comes: it may be on its way to the
   * socket in this very turn.
   */
  close(): void {
    if (this.closed) return
    this.closed = true
    for (const chunk of this.#queue) release(chunk)
    this.#queue.length = 0
    this.#queuedBytes = 0
    const waiting = this.#waiting
    this.#waiting = null
    waiting?.reject(readerClosed())
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
