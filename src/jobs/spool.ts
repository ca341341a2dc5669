/**
 * An async edit's upload, written whole to a file before the job is accepted (DESIGN.md §4: a job survives a
 * restart, so its request must outlive the process; and an async client waits for its 202, not for the job).
 * Flow control as for a streamed upload: the client is paused while the file write is behind. Each attempt
 * reads the file from the start (FileBody), so failover is always possible and costs no memory.
 */
import { createReadStream, createWriteStream, unlink, type WriteStream } from 'node:fs'
import type { Readable } from 'node:stream'
import { log } from '../log.js'
import { watchAnswer, type Reply } from '../server/reply.js'
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

export class SpoolBody extends FileBody {
  readonly #out: WriteStream
  #bytes = 0
  #finished = false
  #failed: Error | null = null
  #claimed = false
  #discarded = false
  #done: SpoolDone | null = null
  readonly #source: BodySource
  #paused = false

  constructor(source: BodySource, path: string) {
    super(path)
    this.#source = source
    // 'wx': a fresh file only (the name is random); 0600: uploads are the client's data.
    this.#out = createWriteStream(path, { flags: 'wx', mode: 0o600 })
    this.#out.on('error', (err) => this.#fail(err))
    this.#out.on('finish', () => {
      if (this.#discarded) return
      this.#finished = true
      this.#report()
    })
    source.onChunk((chunk, last) => {
      if (this.#discarded || this.#failed !== null) return
      this.#bytes += chunk.length
      if (!this.#out.write(chunk) && !this.#paused) {
        this.#paused = true
        source.pause()
        this.#out.once('drain', () => this.#resume())
      }
      if (last) this.#out.end()
    })
  }

  /** Whether discard() ran (then whoever discarded it answered the client). */
  get discarded(): boolean {
    return this.#discarded
  }

  /** Bytes written so far (all of the upload once done). */
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
    this.#fail(new Error('the upload was discarded'))
    this.#out.destroy()
    removeSpoolFile(this.path)
    // Whatever the client still sends is read and dropped, not left waiting on a paused socket.
    this.#resume()
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

/**
 * `reply` for the admission of a spooled upload: any answer before the job claimed the file (a refusal by any
 * stage) deletes it, so a refused upload leaves nothing on disk.
 */
export function discardOnAnswer(reply: Reply, spool: SpoolBody): Reply {
  return watchAnswer(reply, { starting: () => spool.discard() })
}
