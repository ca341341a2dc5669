/**
 * A request body as the failover loop sends it (DESIGN.md §5): each attempt takes the body anew, and a body that
 * cannot be sent again (a streamed upload past its replay buffer, as undici's `isDisturbed` turns retry off)
 * says so, which turns failover off for the request.
 */
import { Readable } from 'node:stream'

export interface RequestBody {
  /** The body for the next attempt, or null when it can no longer be sent (failover is then off). */
  take(): Buffer | Readable | null
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
  /** `handler` receives every chunk (a copy it may keep) and `last` on the final one. */
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
 */
export class ReplayableBody implements RequestBody {
  readonly #source: BodySource
  readonly #limit: number
  /** Every chunk so far while they fit in `limit`; null once the body outgrew it. */
  #kept: Buffer[] | null = []
  #keptBytes = 0
  #ended = false
  #taken = 0
  #reader: Readable | null = null
  #paused = false

  constructor(source: BodySource, limit: number) {
    this.#source = source
    this.#limit = limit
    source.onChunk((chunk, last) => this.#onChunk(chunk, last))
  }

  /** Whether another attempt could still send the whole body. */
  get replayable(): boolean {
    return this.#kept !== null
  }

  take(): Readable | null {
    if (this.#taken > 0 && this.#kept === null) return null
    this.#taken++
    const previous = this.#reader
    if (previous !== null && !previous.destroyed) previous.destroy()
    const reader = new PassThroughReader(() => this.#resume())
    this.#reader = reader
    for (const chunk of this.#kept ?? []) reader.push(chunk)
    if (this.#ended) reader.push(null)
    this.#resume()
    return reader
  }

  #onChunk(chunk: Buffer, last: boolean): void {
    if (this.#kept !== null) {
      if (this.#keptBytes + chunk.length <= this.#limit) {
        this.#kept.push(chunk)
        this.#keptBytes += chunk.length
      } else if (this.#reader !== null) {
        // Past the replay buffer while an attempt reads: it is the last one that can send this body.
        this.#kept = null
        this.#keptBytes = 0
      } else {
        // Nobody reads yet and the buffer is full: hold the client until an attempt takes the body.
        this.#kept.push(chunk)
        this.#keptBytes += chunk.length
        this.#pause()
      }
    }
    if (last) this.#ended = true
    const reader = this.#reader
    if (reader === null || reader.destroyed) {
      if (this.#kept === null) this.#pause()
      return
    }
    if (!reader.push(chunk)) this.#pause()
    if (last) reader.push(null)
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

/** A Readable fed by push(); asking for more resumes the source. */
class PassThroughReader extends Readable {
  readonly #more: () => void

  constructor(more: () => void) {
    super()
    this.#more = more
  }

  override _read(): void {
    this.#more()
  }
}
