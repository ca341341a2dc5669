/**
 * An async edit's upload, written whole to a file before the job is accepted (DESIGN.md §4: a job survives a
 * restart, so its request must outlive the process; and an async client waits for its 202, not for the job).
 * Flow control as for a streamed upload: the client is paused while the file write is behind. Each attempt
 * reads the file from the start (FileBody), so failover is always possible and costs no memory.
 */
import { createReadStream, createWriteStream, unlink, type WriteStream } from 'node:fs'
import type { Readable } from 'node:stream'
import { log } from '../log.js'
import type { HeldUpload } from '../pipeline/multipart-admission.js'
import type { BodySource, RequestBody } from '../upstream/request-body.js'

/** A body read from a file, anew for every attempt. */
export class FileBody implements RequestBody {
  constructor(readonly path: string) {}

  take(): Readable {
    return createReadStream(this.path)
  }
}

/** Deletes a spooled file; a file already gone is not an error. */
export function removeSpoolFile(path: string): void {
  unlink(path, (err) => {
    if (err !== null && err.code !== 'ENOENT') log.warn('jobs: could not delete a spooled upload', { path, err: err.message })
  })
}

type SpoolDone = (err: Error | null) => void

/**
 * Nothing is written, nor any file created, until open(): the request's head must be admitted first (a client
 * refused at authentication, the rate limit or the routing headers leaves nothing on disk). Chunks that come
 * before that (authentication waiting for the store) are held here, and the client paused.
 */
export class SpoolBody extends FileBody implements HeldUpload {
  #out: WriteStream | null = null
  readonly #prepare: (() => void) | undefined
  /** What came before open(); null once it ran. */
  #early: Buffer[] | null = null
  #earlyLast = false
  #bytes = 0
  #finished = false
  #failed: Error | null = null
  #claimed = false
  #discarded = false
  #done: SpoolDone | null = null
  readonly #source: BodySource
  #paused = false
  /** Paused because the file write is behind (not only because the file is not open yet). */
  #draining = false

  /** `prepare` runs before the file is created (the spool directory made once). */
  constructor(source: BodySource, path: string, prepare?: () => void) {
    super(path)
    this.#source = source
    this.#prepare = prepare
    source.onChunk((chunk, last) => {
      if (this.#discarded || this.#failed !== null) return
      this.#bytes += chunk.length
      if (this.#out !== null) return this.#write(chunk, last)
      ;(this.#early ??= []).push(chunk)
      if (last) this.#earlyLast = true
      this.#pause()
    })
  }

  /** The request's head was admitted: the file is created, and what came so far written to it. */
  open(): void {
    if (this.#out !== null || this.#discarded) return
    try {
      this.#prepare?.()
    } catch (err) {
      return this.#fail(err as Error)
    }
    // 'wx': a fresh file only (the name is random); 0600: uploads are the client's data.
    const out = createWriteStream(this.path, { flags: 'wx', mode: 0o600 })
    this.#out = out
    out.on('error', (err) => this.#fail(err))
    out.on('finish', () => {
      if (this.#discarded) return
      this.#finished = true
      this.#report()
    })
    const early = this.#early
    this.#early = null
    if (early !== null) for (let i = 0; i < early.length; i++) this.#write(early[i]!, this.#earlyLast && i === early.length - 1)
    if (!this.#draining) this.#resume()
  }

  #write(chunk: Buffer, last: boolean): void {
    const out = this.#out!
    if (!out.write(chunk) && !this.#draining) {
      this.#draining = true
      this.#pause()
      out.once('drain', () => {
        this.#draining = false
        this.#resume()
      })
    }
    if (last) out.end()
  }

  /** Whether discard() ran (then whoever discarded it answered the client). */
  get discarded(): boolean {
    return this.#discarded
  }

  /** Bytes received so far (all of the upload, on disk, once done). */
  get bytes(): number {
    return this.#bytes
  }

  /** `done` runs once: when the whole upload is on disk, or with why it never will be. */
  whenWritten(done: SpoolDone): void {
    this.#done = done
    this.#report()
  }

  /** The job took the file: from now on it is the job's to delete. False when it was discarded already. */
  claim(): boolean {
    if (this.#discarded) return false
    this.#claimed = true
    return true
  }

  /** The upload was refused, or its client went away: stop writing and delete the file (unless a job owns it). */
  discard(): void {
    if (this.#claimed || this.#discarded) return
    this.#discarded = true
    this.#early = null
    this.#fail(new Error('the upload was discarded'))
    const out = this.#out
    if (out !== null) {
      // Deleted once closed: a file still being opened (the open runs on the thread pool, after this call)
      // would otherwise be created after its deletion, and stay.
      if (out.closed) removeSpoolFile(this.path)
      else out.once('close', () => removeSpoolFile(this.path))
      out.destroy()
    }
    // Whatever the client still sends is read and dropped, not left waiting on a paused socket.
    this.#resume()
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

  #fail(err: Error): void {
    if (this.#failed !== null) return
    this.#failed = err
    if (!this.#discarded) log.error('jobs: writing an upload to its spool file failed', { path: this.path, err: err.message })
    this.#report()
  }

  #report(): void {
    const done = this.#done
    if (done === null) return
    if (this.#failed !== null) {
      this.#done = null
      done(this.#failed)
    } else if (this.#finished) {
      this.#done = null
      done(null)
    }
  }
}

