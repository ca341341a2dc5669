/**
 * Incremental Server-Sent Events framing, by the WHATWG rules ("event stream interpretation"), for codecs that
 * relay a stream byte for byte: it tells where each event lies in the bytes it was given, and what the event
 * holds, without copying the common case.
 *
 * Lines end in CRLF, LF or CR; an empty line ends an event; `field:value` loses one space after the colon;
 * a line that starts with ':' is a comment. Chunks may split anything anywhere, a CRLF included.
 *
 * The handler is called once per complete event with the event's bytes, [start, end) of `source`, its blank
 * line included: `source` is the pushed chunk itself when the event lies within it (so consecutive events are
 * consecutive ranges of one Buffer), or a Buffer of the framer's own for an event that spanned chunks (its
 * partial bytes copied once, the rest appended). That Buffer is never written again after the call, so a
 * subarray of it may be kept. What the event holds is read from the framer's fields during the call.
 *
 * Not done, on purpose: a leading byte-order mark is not stripped (it would make the first line's field
 * unknown); `id:` and `retry:` are not interpreted (a relay has no use for them).
 */

const LF = 10
const CR = 13
const COLON = 58
const SPACE = 32
const EMPTY = Buffer.alloc(0)

/** Called once per complete event, [start, end) of `source`: the pushed chunk, or a Buffer the framer no longer writes. */
export type SseEventHandler = (source: Buffer, start: number, end: number) => void

/** Splits a byte stream into SSE events, incrementally. */
export class SseFramer {
  /** How many `data` lines the event has (0: a comment, a bare `event:`, a stray blank line…). */
  dataLines = 0
  /**
   * The data payload is [dataStart, dataEnd) of `dataSource`: the event's own `source` when it has one data
   * line (parse it in place), else a scratch Buffer of the framer holding the lines joined with LF, reused
   * by the next event.
   */
  dataSource: Buffer = EMPTY
  dataStart = 0
  dataEnd = 0
  /** The value of the event's last `event:` line is [nameStart, nameEnd) of `source`; -1 when it has none. */
  nameStart = -1
  nameEnd = -1
  /** The event has lines and all of them are comments. */
  commentOnly = false
  /**
   * Not an event: the LF that completes a CRLF whose CR ended the previous event at the end of the previous
   * chunk (the previous event was handed over at its CR, so a CR-only stream is never held back a chunk).
   * Its bytes belong with the previous event's: forward them if it was forwarded, drop them if it was not.
   */
  continuation = false
  /** The event was handed over by `finish()`: the stream ended before its blank line. */
  unterminated = false

  readonly #onEvent: SseEventHandler
  /** The bytes of an event that started in an earlier chunk; null when no event spans the chunk boundary. */
  #pending: Buffer | null = null
  #pendingLen = 0
  /** Where the current, unfinished line starts in #pending. */
  #lineStart = 0
  /** The last byte seen was a CR that ended a line: an LF right after it belongs to that line ending. */
  #afterCR = false
  #lines = 0
  #comments = 0
  #source: Buffer = EMPTY
  #scratch: Buffer = EMPTY
  #scratchLen = 0

  constructor(onEvent: SseEventHandler) {
    this.#onEvent = onEvent
  }

  /** Bytes held for an event not yet complete. */
  get pendingBytes(): number {
    return this.#pendingLen
  }

  /** The event's name, '' when it has none (the type is then "message"). Valid during the handler call. */
  eventName(): string {
    return this.nameStart < 0 ? '' : this.#source.toString('utf8', this.nameStart, this.nameEnd)
  }

  /** Frames `chunk`, calling the handler for each event it completes. The handler must not push. */
  push(chunk: Buffer): void {
    const len = chunk.length
    if (len === 0) return
    let pos = 0
    if (this.#afterCR) {
      this.#afterCR = false
      if (chunk[0] === LF) {
        pos = 1
        if (this.#pending !== null) {
          this.#append(chunk, 0, 1)
          this.#lineStart = this.#pendingLen
        } else {
          this.continuation = true
          this.#dispatch(chunk, 0, 1)
        }
      }
    }
    if (this.#pending !== null) {
      pos = this.#continue(chunk, pos)
      if (pos === -1) return
    }
    this.#scan(chunk, pos)
  }

  /**
   * At the end of the stream: an event still open (its blank line, maybe its last line ending, never came)
   * is handed over with `unterminated` set. The framer is then empty again.
   */
  finish(): void {
    this.#afterCR = false
    const pending = this.#pending
    if (pending === null) return
    const len = this.#pendingLen
    if (this.#lineStart < len) this.#line(pending, this.#lineStart, len)
    this.#pending = null
    this.#pendingLen = 0
    this.#lineStart = 0
    this.unterminated = true
    this.#dispatch(pending, 0, len)
  }

  /** The main loop, over a chunk from `pos` with no event open before it. */
  #scan(chunk: Buffer, pos: number): void {
    const len = chunk.length
    let eventStart = pos
    let lineStart = pos
    // Next CR and LF at or after lineStart, searched again only once passed: an LF-only stream costs one
    // (failed) CR search per chunk and one LF search per event (its blank line is seen without one).
    let cr = lineStart < len ? chunk.indexOf(CR, lineStart) : -1
    if (cr === -1) cr = len
    let lf = -1
    while (lineStart < len) {
      let end = lineStart
      const first = chunk[lineStart]
      if (first !== LF && first !== CR) {
        if (lf < lineStart) {
          lf = chunk.indexOf(LF, lineStart)
          if (lf === -1) lf = len
        }
        if (cr < lineStart) {
          cr = chunk.indexOf(CR, lineStart)
          if (cr === -1) cr = len
        }
        end = lf < cr ? lf : cr
        if (end === len) break
      }
      let next = end + 1
      if (chunk[end] === CR) {
        if (next < len) {
          if (chunk[next] === LF) next++
        } else {
          this.#afterCR = true
        }
      }
      if (end === lineStart) {
        this.#dispatch(chunk, eventStart, next)
        eventStart = next
      } else {
        this.#line(chunk, lineStart, end)
      }
      lineStart = next
    }
    if (eventStart < len) this.#keep(chunk, eventStart, lineStart)
  }

  /** Copies the open event's bytes, [from, end of chunk), and moves its offsets into #pending. */
  #keep(chunk: Buffer, from: number, lineStart: number): void {
    const size = chunk.length - from
    const pending = Buffer.allocUnsafe(Math.max(512, size * 2))
    chunk.copy(pending, 0, from)
    this.#pending = pending
    this.#pendingLen = size
    this.#lineStart = lineStart - from
    if (this.dataLines === 1) {
      this.dataStart -= from
      this.dataEnd -= from
    }
    if (this.nameStart >= 0) {
      this.nameStart -= from
      this.nameEnd -= from
    }
  }

  /** Goes on with the event held in #pending; returns where the chunk's next event starts, -1 if none does. */
  #continue(chunk: Buffer, pos: number): number {
    const len = chunk.length
    // Cached as in #scan, so an event of many lines in one big chunk is not searched to the end per line.
    let cr = -1
    let lf = -1
    while (pos < len) {
      if (lf < pos) {
        lf = chunk.indexOf(LF, pos)
        if (lf === -1) lf = len
      }
      if (cr < pos) {
        cr = chunk.indexOf(CR, pos)
        if (cr === -1) cr = len
      }
      const end = lf < cr ? lf : cr
      if (end === len) {
        this.#append(chunk, pos, len)
        return -1
      }
      let next = end + 1
      if (chunk[end] === CR) {
        if (next < len) {
          if (chunk[next] === LF) next++
        } else {
          this.#afterCR = true
        }
      }
      const lineEnd = this.#pendingLen + (end - pos)
      this.#append(chunk, pos, next)
      const pending = this.#pending as Buffer
      if (lineEnd === this.#lineStart) {
        const size = this.#pendingLen
        this.#pending = null
        this.#pendingLen = 0
        this.#lineStart = 0
        this.#dispatch(pending, 0, size)
        return next
      }
      this.#line(pending, this.#lineStart, lineEnd)
      this.#lineStart = this.#pendingLen
      pos = next
    }
    return -1
  }

  #append(chunk: Buffer, from: number, to: number): void {
    let pending = this.#pending as Buffer
    const size = this.#pendingLen
    const need = size + (to - from)
    if (need > pending.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, pending.length * 2))
      pending.copy(grown, 0, 0, size)
      this.#pending = pending = grown
    }
    chunk.copy(pending, size, from, to)
    this.#pendingLen = need
  }

  /** One line, [start, end) of `src`, its line ending excluded; never empty. */
  #line(src: Buffer, start: number, end: number): void {
    this.#lines++
    const first = src[start]
    if (first === COLON) {
      this.#comments++
      return
    }
    const size = end - start
    // "data" / "data:…"; any other name that merely starts with "data" is another field.
    if (first === 100 && size >= 4 && src[start + 1] === 97 && src[start + 2] === 116 && src[start + 3] === 97) {
      if (size === 4) this.#data(src, end, end)
      else if (src[start + 4] === COLON) this.#data(src, start + 5 < end && src[start + 5] === SPACE ? start + 6 : start + 5, end)
      return
    }
    // "event" / "event:…"
    if (first === 101 && size >= 5 && src[start + 1] === 118 && src[start + 2] === 101 && src[start + 3] === 110 && src[start + 4] === 116) {
      if (size === 5) {
        this.nameStart = this.nameEnd = end
      } else if (src[start + 5] === COLON) {
        this.nameStart = start + 6 < end && src[start + 6] === SPACE ? start + 7 : start + 6
        this.nameEnd = end
      }
    }
  }

  #data(src: Buffer, from: number, to: number): void {
    const lines = this.dataLines++
    if (lines === 0) {
      this.dataStart = from
      this.dataEnd = to
      return
    }
    if (lines === 1) {
      this.#scratchLen = 0
      this.#toScratch(src, this.dataStart, this.dataEnd)
    }
    this.#ensureScratch(1)
    this.#scratch[this.#scratchLen++] = LF
    this.#toScratch(src, from, to)
  }

  #toScratch(src: Buffer, from: number, to: number): void {
    this.#ensureScratch(to - from)
    src.copy(this.#scratch, this.#scratchLen, from, to)
    this.#scratchLen += to - from
  }

  #ensureScratch(more: number): void {
    const need = this.#scratchLen + more
    if (need <= this.#scratch.length) return
    const grown = Buffer.allocUnsafe(Math.max(need, this.#scratch.length * 2, 256))
    this.#scratch.copy(grown, 0, 0, this.#scratchLen)
    this.#scratch = grown
  }

  #dispatch(source: Buffer, start: number, end: number): void {
    if (this.dataLines > 1) {
      this.dataSource = this.#scratch
      this.dataStart = 0
      this.dataEnd = this.#scratchLen
    } else if (this.dataLines === 1) {
      this.dataSource = source
    }
    this.commentOnly = this.#lines > 0 && this.#comments === this.#lines
    this.#source = source
    this.#onEvent(source, start, end)
    this.dataLines = 0
    this.dataSource = EMPTY
    this.dataStart = this.dataEnd = 0
    this.nameStart = this.nameEnd = -1
    this.commentOnly = false
    this.continuation = false
    this.unterminated = false
    this.#lines = this.#comments = 0
    this.#source = EMPTY
  }
}

/** The end of [from, to) with trailing JSON whitespace (space, tab, LF, CR) left out. */
export function skipSpaceBack(src: Buffer, from: number, to: number): number {
  while (to > from) {
    const b = src[to - 1]
    if (b !== 32 && b !== 9 && b !== 10 && b !== 13) break
    to--
  }
  return to
}

/** The first index of [i, to) that is not JSON whitespace (space, tab, LF, CR); `to` when there is none. */
export function skipSpace(src: Buffer, i: number, to: number): number {
  while (i < to) {
    const b = src[i]
    if (b !== 32 && b !== 9 && b !== 10 && b !== 13) break
    i++
  }
  return i
}

/**
 * What an event's data payload [from, to) of `src` is, by its first and last non-blank bytes only (no parse):
 * nothing, what can only be a JSON object ('{' … '}'), or something else. Every event of the chat and
 * Messages streams is an object; anything else is a provider failing, never to be relayed (a client's SDK
 * would throw on it).
 */
export function payloadKind(src: Buffer, from: number, to: number): 'blank' | 'object' | 'other' {
  const first = skipSpace(src, from, to)
  if (first === to) return 'blank'
  return src[first] === 123 && src[skipSpaceBack(src, first, to) - 1] === 125 ? 'object' : 'other'
}
