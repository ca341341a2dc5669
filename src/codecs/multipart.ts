/**
 * The multipart scanner of DESIGN.md §5 (codecs): reads a multipart/form-data upload just far enough to route
 * it, with busboy's streaming parser. It takes the upload's chunks as they arrive and stops once it has the
 * `model` field and, when asked, the first bytes of one file (an audio header for the duration fallback); the
 * rest of the upload is never parsed, only passed on. Fields seen before it stopped come with the outcome.
 */
import busboy from 'busboy'
import { RouterError } from '../errors.js'

/** What the scan found before it stopped. */
export interface FormHead {
  /** Every field that came before the scan stopped; `model` among them. */
  readonly fields: ReadonlyMap<string, string>
  /** The first bytes of the asked-for file part, empty when it did not come (yet). */
  readonly fileHead: Buffer
  /** The scan read the form to its end: a field absent from `fields` is absent from the form. */
  readonly whole: boolean
}

export interface ScanOptions {
  /** The scan gives up with a 400 when `model` has not come within this many bytes. */
  readonly limit: number
  /** A file field whose first `fileHeadBytes` are wanted ('' for none). */
  readonly fileField: string
  readonly fileHeadBytes: number
  /**
   * Read on past `model` to the form's end, as long as the form stays within `limit` (past it, the scan stops
   * with the fields seen so far): for a request whose later fields decide what it may cost (an edit's `n`).
   */
  readonly wholeForm?: boolean
}

const FIELD_SIZE = 64 * 1024

function invalid(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

export class MultipartScan {
  readonly #options: ScanOptions
  readonly #done: (outcome: FormHead | RouterError) => void
  readonly #fields = new Map<string, string>()
  #parser: busboy.Busboy | null = null
  #bytes = 0
  #headParts: Buffer[] = []
  #headBytes = 0
  /** The wanted file's head is whole: its part ended, or enough of it came. */
  #headDone: boolean
  #finished = false

  /** `done` runs once, with the head or the 400 to answer with. */
  constructor(contentType: string, options: ScanOptions, done: (outcome: FormHead | RouterError) => void) {
    this.#options = options
    this.#done = done
    this.#headDone = options.fileField === ''
    let parser: busboy.Busboy
    try {
      parser = busboy({ headers: { 'content-type': contentType }, limits: { fieldSize: FIELD_SIZE, fields: 64, parts: 256 } })
    } catch {
      this.#finish(invalid('Content-Type must be multipart/form-data with a boundary'))
      return
    }
    this.#parser = parser
    parser.on('field', (name, value, info) => {
      if (info.valueTruncated) return this.#finish(invalid(`form field ${name} exceeds ${FIELD_SIZE} bytes`))
      if (!this.#fields.has(name)) this.#fields.set(name, value)
      this.#check()
    })
    parser.on('file', (name, stream) => {
      const wanted = name === options.fileField && !this.#headDone
      // Destroying the parser mid-file (the scan stopped) errors the part's stream: nobody needs to hear it.
      stream.on('error', noop)
      stream.on('data', (chunk: Buffer) => {
        if (!wanted || this.#headDone) return
        const take = chunk.subarray(0, options.fileHeadBytes - this.#headBytes)
        this.#headParts.push(Buffer.from(take))
        this.#headBytes += take.length
        if (this.#headBytes >= options.fileHeadBytes) this.#gotHead()
      })
      stream.on('end', () => {
        if (wanted) this.#gotHead()
      })
    })
    parser.on('error', (err: Error) => this.#finish(invalid(`multipart body is malformed: ${err.message}`)))
  }

  /** Whether the scan reached its outcome (no more chunks are wanted). */
  get finished(): boolean {
    return this.#finished
  }

  push(chunk: Buffer, last: boolean): void {
    const parser = this.#parser
    if (this.#finished || parser === null) return
    this.#bytes += chunk.length
    // In slices: busboy reports fields and file data as it parses, so the scan can stop a few KiB past the
    // file head instead of searching the rest of a 512 KiB uWS chunk for boundaries nobody needs.
    for (let at = 0; at < chunk.length; at += SCAN_SLICE) {
      parser.write(at === 0 && chunk.length <= SCAN_SLICE ? chunk : chunk.subarray(at, at + SCAN_SLICE))
      if (this.#finished) return
    }
    if (last) {
      parser.end()
      // busboy emits what is left on its own schedule; then, a form without `model` is a 400.
      parser.once('close', () => this.#finish(this.#fields.has('model') ? this.#head(true) : invalid('the multipart field model is required')))
      return
    }
    if (!this.#finished && this.#bytes > this.#options.limit) {
      if (!this.#fields.has('model')) this.#finish(invalid(`the multipart field model must come within the first ${this.#options.limit} bytes of the body`))
      else if (this.#headDone) this.#finish(this.#head(false)) // a whole-form scan that outgrew the limit
    }
  }

  #gotHead(): void {
    if (this.#headDone) return
    this.#headDone = true
    this.#check()
  }

  #check(): void {
    if (this.#headDone && this.#fields.has('model') && this.#options.wholeForm !== true) this.#finish(this.#head(false))
  }

  #head(whole: boolean): FormHead {
    return { fields: this.#fields, fileHead: Buffer.concat(this.#headParts), whole }
  }

  #finish(outcome: FormHead | RouterError): void {
    if (this.#finished) return
    this.#finished = true
    const parser = this.#parser
    this.#parser = null
    // Nothing more is parsed: the rest of the upload is passed on as bytes.
    if (parser !== null) {
      parser.removeAllListeners()
      parser.on('error', noop)
      parser.destroy()
    }
    this.#done(outcome)
  }
}

function noop(): void {}

/** Bytes handed to busboy at a time (see push). */
const SCAN_SLICE = 16 * 1024
