/**
 * The multipart scanner of DESIGN.md §5 (codecs): reads a multipart/form-data upload just far enough to route
 * it, with busboy's streaming parser. It takes the upload's chunks as they arrive and stops once it has the
 * `model` field and, when asked, the first bytes of one file (an audio header for the duration fallback); the
 * rest of the upload is never parsed, only passed on. Fields seen before it stopped come with the outcome.
 */
import busboy from 'busboy'
import type { Readable } from 'node:stream'
import { RouterError } from '../errors.js'

/** What the scan found before it stopped. */
export interface FormHead {
  /** Every field that came before the scan stopped; `model` among them. */
  readonly fields: ReadonlyMap<string, string>
  /** The first bytes of the asked-for file part, empty when it did not come (yet). */
  readonly fileHead: Buffer
  /** The file part ended within its head: `fileHead` is the whole file. */
  readonly fileWhole: boolean
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
   * Whether the file's head so far is all that is wanted of it: the scan stops there, as it would at
   * `fileHeadBytes` (the head is then not known to be the whole file: `fileWhole` is false).
   */
  readonly headEnough?: (head: Buffer) => boolean
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
  /** The wanted file's part ended before its head was full. */
  #fileWhole = false
  #finished = false
  /** The wanted file part's stream while its head is read (see push). */
  #fileStream: Readable | null = null

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
      if (wanted) this.#fileStream = stream
      stream.on('data', (chunk: Buffer) => {
        if (!wanted || this.#headDone) return
        const take = chunk.subarray(0, options.fileHeadBytes - this.#headBytes)
        this.#headParts.push(Buffer.from(take))
        this.#headBytes += take.length
        if (this.#headBytes >= options.fileHeadBytes) this.#gotHead()
        else if (options.headEnough?.(this.#headSoFar()) === true) this.#gotHead()
      })
      stream.on('end', () => {
        if (!wanted || this.#headDone) return
        this.#fileWhole = true
        this.#gotHead()
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
      // A new stream emits its first data only on the next tick, by when the rest of the client's chunk (up to
      // 512 KiB) would have been searched too: read() hands what the slice gave it to the 'data' handler now.
      const file = this.#fileStream
      while (file !== null && !this.#headDone && file.read() !== null) {}
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

  /** The wanted file's head so far, as one buffer (kept as the one part when it came in one). */
  #headSoFar(): Buffer {
    const parts = this.#headParts
    if (parts.length > 1) this.#headParts = [Buffer.concat(parts)]
    return this.#headParts[0]!
  }

  #gotHead(): void {
    if (this.#headDone) return
    this.#headDone = true
    this.#fileStream = null
    this.#check()
  }

  #check(): void {
    if (this.#headDone && this.#fields.has('model') && this.#options.wholeForm !== true) this.#finish(this.#head(false))
  }

  #head(whole: boolean): FormHead {
    return { fields: this.#fields, fileHead: Buffer.concat(this.#headParts), fileWhole: this.#fileWhole, whole }
  }

  #finish(outcome: FormHead | RouterError): void {
    if (this.#finished) return
    this.#finished = true
    const parser = this.#parser
    this.#parser = null
    // Nothing more is parsed: the rest of the upload is passed on as bytes. Destroyed with an error made once:
    // without one, busboy makes two ("Unexpected end of file", "of form") whose stacks Node's stream teardown
    // formats, for every upload the scan stops short of its end.
    if (parser !== null) {
      parser.removeAllListeners()
      parser.on('error', noop)
      parser.destroy(SCAN_STOPPED)
    }
    this.#done(outcome)
  }
}

function noop(): void {}

/** What a parser the scan stopped is destroyed with (its stack formatted once, not per upload). */
const SCAN_STOPPED = new Error('the multipart scan stopped; the rest of the upload is passed on unparsed')

/** Bytes handed to busboy at a time (see push). */
const SCAN_SLICE = 16 * 1024

/** The longest head a part may have (busboy's own bound on a part's header block). */
const MAX_PART_HEAD = 16 * 1024
const HEAD_END = Buffer.from('\r\n\r\n')
/** The longest value PartWatch.valued reads; a longer one is told as null. */
export const VALUE_BYTES = 1024
const NO_NAMES: ReadonlySet<string> = new Set()

/** Told a value PartWatch.valued reads: its name and text (null past VALUE_BYTES); answers a 400 or null. */
export type ValueListener = (name: string, value: string | null) => RouterError | null
const EMPTY = Buffer.alloc(0)

/**
 * Parts a form must have, each met by any of its names (an edit's image: `image`, or `image[]` as clients that
 * send several name it). Built once per surface; a PartWatch notes which are met in one number.
 */
export class RequiredParts {
  readonly #byName = new Map<string, number>()
  readonly #labels: string[] = []

  /** `parts`: each requirement's label (what a refusal names) → the part names that meet it. At most 31. */
  constructor(parts: Readonly<Record<string, readonly string[]>>) {
    for (const label in parts) {
      const bit = 1 << this.#labels.length
      this.#labels.push(label)
      for (const name of parts[label]!) this.#byName.set(name, bit)
    }
    if (this.#labels.length > 31) throw new Error('at most 31 required parts')
  }

  /** The bit of the requirement a part named `name` meets, 0 for none. */
  bitOf(name: string): number {
    return this.#byName.get(name) ?? 0
  }

  /** The label of the first requirement not in `met`, null when every one is. */
  missing(met: number): string | null {
    for (let i = 0; i < this.#labels.length; i++) if ((met & (1 << i)) === 0) return this.#labels[i]!
    return null
  }
}

const NONE_REQUIRED = new RequiredParts({})

/**
 * Every part name of a multipart upload as it streams past, for the fields a surface acts on once (`model`,
 * `n`, the audio file…): a second part of one of those names is reported, because the router routed, checked and
 * priced one value and a provider may act on another (busboy keeps the first, many servers keep the last). It
 * runs over the whole upload, also past where the scan stopped: only the delimiters are searched for (a native
 * Buffer#indexOf, about 0.3 ms for 3 MiB here), and each part's head is read by busboy on its own, so a name
 * means what it means to the scan. It also notes which required parts came (RequiredParts), over the whole
 * upload too: a part the scan did not reach is still seen.
 */
export class PartWatch {
  readonly #boundary: string
  /** `\r\n--boundary`: what starts every part but the first (the body is watched as if it began with `\r\n`). */
  readonly #delimiter: Buffer
  readonly #watched: ReadonlySet<string>
  readonly #seen = new Set<string>()
  readonly #required: RequiredParts
  /** Bits of the required parts that came. */
  #met = 0
  /** Looking for a delimiter: the last bytes of what came, a delimiter's start maybe. In a head: the head so far. */
  #carry: Buffer = Buffer.from('\r\n')
  #inHead = false
  /** The closing delimiter passed (or the watch gave up): what follows is not parts. */
  #over = false
  /** Names whose values are read (PartWatch.valued); empty for none. */
  #valued: ReadonlySet<string> = NO_NAMES
  /** The part whose value is being read: its name, its first bytes, its length so far. */
  #valueName = ''
  #valueParts: Buffer[] | null = null
  #valueKept = 0
  #valueLength = 0
  /**
   * Told each value of a `valued` name once its part ended (null when it is longer than VALUE_BYTES); answers
   * the 400 to refuse the upload with, or null.
   */
  #onValue: ValueListener | null = null

  /** Null when the content type has no boundary the watch can read (the scan refuses such a form anyway). */
  static of(contentType: string, watched: ReadonlySet<string>, required: RequiredParts = NONE_REQUIRED): PartWatch | null {
    const boundary = boundaryOf(contentType)
    return boundary === null ? null : new PartWatch(boundary, watched, required)
  }

  private constructor(boundary: string, watched: ReadonlySet<string>, required: RequiredParts) {
    this.#boundary = boundary
    this.#delimiter = Buffer.from(`\r\n--${boundary}`, 'latin1')
    this.#watched = watched
    this.#required = required
  }

  /**
   * Reads the values of the parts named in `names` as they stream past, wherever they come (an edit's `n` after
   * its image), and tells `listener` each one once its part ended: before the bytes that end it are passed on.
   */
  valued(names: ReadonlySet<string>, listener: ValueListener): void {
    this.#valued = names
    this.#onValue = listener
  }

  /** Whether the closing delimiter passed: the form has no more parts. */
  get over(): boolean {
    return this.#over
  }

  /**
   * The label of a required part that has not come (so far: once the whole upload was pushed, that it lacks),
   * null when every one did.
   */
  missing(): string | null {
    return this.#required.missing(this.#met)
  }

  /**
   * The next bytes of the upload (read now, not kept: pooled memory may be reused after the call). Answers the
   * 400 to refuse the upload with when a watched name came again or a part's head is past its bound, else null.
   */
  push(chunk: Buffer): RouterError | null {
    let at = 0
    while (at < chunk.length && !this.#over) {
      if (this.#inHead) {
        const end = this.#headEnd(chunk, at)
        const head = Buffer.concat([this.#carry, end === -1 ? chunk.subarray(at) : chunk.subarray(at, end)])
        if (head.length > MAX_PART_HEAD) return invalid(`a multipart part's headers exceed ${MAX_PART_HEAD} bytes`)
        // A closing delimiter is `--` right after the boundary: what follows it is not parts.
        if (head.length >= 2 && head[0] === 0x2d && head[1] === 0x2d) {
          this.#over = true
          return null
        }
        if (end === -1) {
          this.#carry = head
          return null
        }
        this.#inHead = false
        this.#carry = EMPTY
        at = end
        const name = this.#nameOf(head)
        this.#met |= this.#required.bitOf(name)
        if (this.#watched.has(name)) {
          if (this.#seen.has(name)) return invalid(`the multipart field ${name} may appear only once`)
          this.#seen.add(name)
        }
        if (this.#valued.has(name)) {
          this.#valueName = name
          this.#valueParts = []
          this.#valueKept = 0
          this.#valueLength = 0
        }
        continue
      }
      const d = this.#delimiter
      const carry = this.#carry
      if (carry.length > 0) {
        // A delimiter split between the previous bytes and these.
        const seam = Buffer.concat([carry, chunk.subarray(at, at + d.length - 1)])
        const found = seam.indexOf(d)
        this.#carry = EMPTY
        if (found !== -1) {
          if (this.#valueParts !== null) {
            // The carry was counted into the value already: the value ends `found` bytes into the seam.
            if (found > carry.length) this.#valueBytes(chunk.subarray(at, at + found - carry.length))
            const err = this.#endValue(this.#valueLength - Math.max(0, carry.length - found))
            if (err !== null) return err
          }
          at += found + d.length - carry.length
          this.#inHead = true
          continue
        }
      }
      const found = chunk.indexOf(d, at)
      if (this.#valueParts !== null) {
        this.#valueBytes(chunk.subarray(at, found === -1 ? chunk.length : found))
        if (found !== -1) {
          const err = this.#endValue(this.#valueLength)
          if (err !== null) return err
        }
      }
      if (found === -1) {
        // Kept: the bytes a delimiter split with the next chunk could start in (copied: the chunk may be reused).
        const rest = chunk.length - at
        this.#carry =
          rest >= d.length - 1 ? Buffer.from(chunk.subarray(chunk.length - (d.length - 1))) : Buffer.concat([carry.subarray(Math.max(0, carry.length - (d.length - 1 - rest))), chunk.subarray(at)])
        return null
      }
      at = found + d.length
      this.#inHead = true
    }
    return null
  }

  /** The next bytes of a value being read: counted, and copied while within what a value may hold. */
  #valueBytes(bytes: Buffer): void {
    this.#valueLength += bytes.length
    const room = VALUE_BYTES + 1 - this.#valueKept
    if (room <= 0 || bytes.length === 0) return
    const take = bytes.subarray(0, room)
    this.#valueParts!.push(Buffer.from(take))
    this.#valueKept += take.length
  }

  /** The value being read ended after `length` bytes: told to the listener. */
  #endValue(length: number): RouterError | null {
    const parts = this.#valueParts!
    this.#valueParts = null
    const value = length > VALUE_BYTES ? null : Buffer.concat(parts).toString('utf8', 0, length)
    return this.#onValue?.(this.#valueName, value) ?? null
  }

  /** Where the head ends in `chunk` (just past its blank line), looking from `at`; -1 when not in it. */
  #headEnd(chunk: Buffer, at: number): number {
    const carry = this.#carry
    if (carry.length > 0) {
      // The blank line split between the head so far and these bytes.
      const seam = Buffer.concat([carry.subarray(Math.max(0, carry.length - 3)), chunk.subarray(at, at + 3)])
      const found = seam.indexOf(HEAD_END)
      if (found !== -1) return at + found + 4 - Math.min(carry.length, 3)
    }
    const found = chunk.indexOf(HEAD_END, at)
    return found === -1 ? -1 : found + 4
  }

  /**
   * The part's name as busboy reads it, from its head alone in a form of its own ('' when it has none). A pure
   * function of the boundary and the head, so remembered (HEAD_NAMES): a client's parts mostly repeat their
   * heads, and a busboy made for each costs more than the rest of the watch.
   */
  #nameOf(head: Buffer): string {
    if (head.length > HEAD_REMEMBERED) return nameInHead(this.#boundary, head)
    const key = this.#boundary + '\n' + head.toString('latin1')
    let name = HEAD_NAMES.get(key)
    if (name === undefined) {
      name = nameInHead(this.#boundary, head)
      if (HEAD_NAMES.size >= HEAD_NAMES_MAX) HEAD_NAMES.clear()
      HEAD_NAMES.set(key, name)
    }
    return name
  }
}

/** Part heads read before (PartWatch.#nameOf): boundary and head → name. Emptied whole when full. */
const HEAD_NAMES = new Map<string, string>()
const HEAD_NAMES_MAX = 1024
/** The longest head remembered: a usual one is ~100 bytes; a head up to MAX_PART_HEAD is read but not kept. */
const HEAD_REMEMBERED = 512

/** What busboy reads as the name of a part with this head, the part alone in a form of its own. */
function nameInHead(boundary: string, head: Buffer): string {
  let name = ''
  let parser: busboy.Busboy
  try {
    parser = busboy({ headers: { 'content-type': `multipart/form-data; boundary="${boundary}"` } })
  } catch {
    return ''
  }
  parser.on('field', (n) => (name = n))
  parser.on('file', (n, stream) => {
    name = n
    stream.resume()
  })
  parser.on('error', noop)
  // The head runs from the delimiter's end (padding, CRLF, the header lines) to its blank line: the part is empty.
  parser.end(Buffer.concat([Buffer.from(`--${boundary}`, 'latin1'), head, Buffer.from(`\r\n--${boundary}--\r\n`, 'latin1')]))
  return name
}

/** The boundary parameter of a multipart/form-data content type (quoted or not), null when there is none. */
export function boundaryOf(contentType: string): string | null {
  const lower = contentType.toLowerCase()
  let at = lower.indexOf('boundary=')
  while (at > 0 && lower.charCodeAt(at - 1) !== 0x3b /* ; */ && lower.charCodeAt(at - 1) !== 0x20 && lower.charCodeAt(at - 1) !== 0x09) {
    at = lower.indexOf('boundary=', at + 1)
  }
  if (at === -1) return null
  let value = contentType.slice(at + 'boundary='.length)
  if (value.startsWith('"')) {
    let out = ''
    for (let i = 1; i < value.length; i++) {
      const c = value[i]!
      if (c === '"') return out.length > 0 ? out : null
      out += c === '\\' && i + 1 < value.length ? value[++i]! : c
    }
    return null
  }
  let end = 0
  while (end < value.length) {
    const c = value.charCodeAt(end)
    if (c === 0x3b || c === 0x20 || c === 0x09) break
    end++
  }
  value = value.slice(0, end)
  return value.length > 0 ? value : null
}
