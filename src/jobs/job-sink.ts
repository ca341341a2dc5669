/**
 * The response sink of an async job (DESIGN.md §5: the HTTP reply is one sink, a job record another): the
 * failover loop writes the job's answer here exactly as it would to a client, and `ended` receives it whole.
 * A job has no reader that can be slow or go away, except when the router stops: detach() then makes the sink
 * "gone" so the loop cancels its attempt and records nothing, and the job stays unfinished for the next start.
 */
import type { HeaderList, ResponseSink } from '../upstream/sink.js'

export type JobEnded = (status: number, headers: HeaderList, body: Buffer) => void

function bytes(chunk: string | Uint8Array): Buffer {
  // A copy: the job keeps it past the call, and a view may be of a buffer its writer reuses.
  return typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk)
}

export class JobSink implements ResponseSink {
  readonly #ended: JobEnded
  #aborted = false
  #started = false
  #done = false
  #status = 0
  #headers: HeaderList = []
  #chunks: Buffer[] = []
  #onAborted: (() => void) | null = null

  constructor(ended: JobEnded) {
    this.#ended = ended
  }

  get aborted(): boolean {
    return this.#aborted
  }

  get started(): boolean {
    return this.#started
  }

  onAborted(handler: () => void): void {
    this.#onAborted = handler
  }

  send(status: number, headers: HeaderList, body: string | Uint8Array): void {
    if (this.#aborted || this.#done) return
    this.#started = true
    this.#finish(status, headers, bytes(body))
  }

  begin(status: number, headers: HeaderList): void {
    if (this.#aborted || this.#done) return
    this.#started = true
    this.#status = status
    this.#headers = headers
  }

  write(chunk: string | Uint8Array): boolean {
    if (!this.#aborted && !this.#done) this.#chunks.push(bytes(chunk))
    return true
  }

  /** Never slow: write() never returns false. */
  onWritable(): void {}

  end(chunk?: string | Uint8Array): void {
    if (this.#aborted || this.#done) return
    if (chunk !== undefined) this.#chunks.push(bytes(chunk))
    const body = Buffer.concat(this.#chunks)
    this.#chunks = []
    this.#finish(this.#status, this.#headers, body)
  }

  cork(fn: () => void): void {
    fn()
  }

  /** The router is stopping: the job's loop gives up its attempt, and nothing reaches `ended`. */
  detach(): void {
    if (this.#aborted || this.#done) return
    this.#aborted = true
    const handler = this.#onAborted
    this.#onAborted = null
    handler?.()
  }

  #finish(status: number, headers: HeaderList, body: Buffer): void {
    this.#done = true
    this.#ended(status, headers, body)
  }
}
