/**
 * Bodies as sockets deliver them: one chunk per read (from uWS, lent for the callback only). A client that
 * sends its body a byte at a time (1-byte writes with Nagle off) gets one read, so one chunk, per byte, and a
 * Buffer kept per chunk costs ~100 bytes of heap per byte of body: measured before these helpers, 1.7 MB of
 * JSON sent that way grew the router by 107 MiB in 10 s and a 2 MB multipart upload by 168 MiB, on the way to
 * the 10 MiB JSON limit and the 25 MiB replay buffer. Both ways of reading a body keep a number of objects
 * that follows its bytes, not its reads:
 * - a body read whole (a JSON request, a provider's answer held whole) grows one buffer by doubling
 *   (GrowingBody);
 * - a streamed body (multipart) hands on small reads gathered into chunks of at least SMALL_CHUNK bytes
 *   (ChunkGatherer), except its last.
 */

/** Reads smaller than this are gathered before they are handed on. */
export const SMALL_CHUNK = 8 * 1024

/**
 * Gathers the small reads of a streamed body: a read of SMALL_CHUNK bytes or more is handed on as it is (after
 * what was gathered before it), smaller ones are copied into a buffer of this body's and handed on together
 * once they reach SMALL_CHUNK bytes, or with the body's last read. Nothing is held back otherwise: a body's
 * bytes are all handed on by its last read, and what a paused source has not read is not here.
 */
export class ChunkGatherer {
  #staged: Buffer | null = null
  #fill = 0

  /** Hands `bytes` (valid for this call only) on through `emit`, whose argument is valid for its call only. */
  push(bytes: Uint8Array, last: boolean, emit: (bytes: Uint8Array, last: boolean) => void): void {
    if (bytes.length >= SMALL_CHUNK) {
      if (this.#fill > 0) this.#emitStaged(false, emit)
      return emit(bytes, last)
    }
    // Below SMALL_CHUNK each time, so two such reads always fit.
    const staged = (this.#staged ??= Buffer.allocUnsafeSlow(2 * SMALL_CHUNK))
    staged.set(bytes, this.#fill)
    this.#fill += bytes.length
    if (this.#fill >= SMALL_CHUNK || last) this.#emitStaged(last, emit)
  }

  #emitStaged(last: boolean, emit: (bytes: Uint8Array, last: boolean) => void): void {
    const bytes = this.#staged!.subarray(0, this.#fill)
    this.#fill = 0
    emit(bytes, last)
  }
}

/** Where a body read whole starts growing from (bodies in one read are copied once, at their size). */
const FIRST_CAPACITY = 64 * 1024

/**
 * A body read whole, in as many reads as the sender made: one buffer that doubles as it fills (at most
 * `limit` bytes), so a body in many small reads costs a few allocations, not one object per read.
 */
export class GrowingBody {
  readonly #limit: number
  #buffer: Buffer | null = null
  /** The first read, kept as it came (keep()): a body of one read is never copied. */
  #kept: Buffer | null = null
  size = 0

  constructor(limit: number) {
    this.#limit = limit
  }

  /**
   * Appends a read the body may keep as it is (its own Buffer, not lent): the first is kept uncopied, and a
   * second is copied with it into a buffer of exactly both (an answer in two reads is copied once, as
   * Buffer.concat would).
   */
  keep(bytes: Buffer): void {
    if (this.size === 0 && this.#buffer === null && this.#kept === null) {
      this.#kept = bytes
      this.size = bytes.length
    } else this.append(bytes)
  }

  /** Appends a read (valid for this call only); the caller has checked that the body stays within `limit`. */
  append(bytes: Uint8Array): void {
    const need = this.size + bytes.length
    let buffer = this.#buffer
    if (buffer === null || need > buffer.length) {
      const kept = this.#kept
      const capacity = buffer !== null ? 2 * buffer.length : kept !== null ? need : FIRST_CAPACITY
      const grown = Buffer.allocUnsafe(Math.min(this.#limit, Math.max(need, capacity)))
      if (buffer !== null) buffer.copy(grown, 0, 0, this.size)
      else if (kept !== null) kept.copy(grown)
      this.#kept = null
      this.#buffer = buffer = grown
    }
    buffer.set(bytes, this.size)
    this.size = need
  }

  /** The body: exactly its bytes (copied once more when the buffer has over a quarter to spare). */
  bytes(): Buffer {
    const buffer = this.#buffer
    if (buffer === null) return this.#kept ?? Buffer.alloc(0)
    const body = buffer.subarray(0, this.size)
    return this.size * 4 < buffer.length * 3 ? Buffer.from(body) : body
  }
}
