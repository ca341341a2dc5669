/**
 * BENCHMARK BASELINE ONLY: the SSE relay the router used before src/codecs/openai-sse.ts replaced it (it
 * misread Python-spaced ids, `data:[DONE]` and CRLF streams split in their first chunk), kept so the sse bench
 * compares the codec with it in the same run.
 *
 * Relays an upstream OpenAI-style SSE stream to the client byte for byte, never re-serialising a chunk. It
 * only looks for what the router needs: the chat id (first event), the usage object (last event before
 * [DONE]) and the [DONE] terminator itself, which it holds back so the trace chunk can go out first.
 *
 * Bytes are forwarded a complete event at a time: a chunk that ends mid-event keeps the tail until the next
 * chunk completes it (a client could not parse half an event anyway). A chunk that ends on an event boundary,
 * the usual case, is forwarded as the same Buffer with no copy.
 */

const LF2 = Buffer.from('\n\n')
const CRLF2 = Buffer.from('\r\n\r\n')
const DONE = Buffer.from('data: [DONE]')
const USAGE = Buffer.from('"usage":')
const ID = Buffer.from('"id":"')
const DATA = Buffer.from('data:')
const SPACE = 32
const OPEN_BRACE = 123
const QUOTE = 34

export interface StreamUsage {
  readonly prompt_tokens?: number
  readonly completion_tokens?: number
  readonly total_tokens?: number
  readonly [key: string]: unknown
}

export type Emit = (bytes: Buffer) => void

export class SseRelay {
  /** Provider chat id from the first event, '' if none was seen. */
  chatId = ''
  /** Usage from the provider's usage event, null if it sent none. */
  usage: StreamUsage | null = null
  /** Whether the upstream sent its [DONE]. */
  done = false
  /** Complete events seen, for estimating usage when the provider reports none. */
  events = 0
  /** Bytes of events forwarded, for the same purpose. */
  forwardedBytes = 0

  readonly #withholdUsage: boolean
  #delim = LF2
  #pending: Buffer | null = null
  #first = true

  /** `withholdUsage`: drop the provider's usage-only chunk (the client did not ask for include_usage). */
  constructor(withholdUsage: boolean) {
    this.#withholdUsage = withholdUsage
  }

  push(chunk: Buffer, emit: Emit): void {
    let data = chunk
    if (this.#pending !== null) {
      data = Buffer.concat([this.#pending, chunk])
      this.#pending = null
    }
    if (this.#first) {
      this.#first = false
      if (data.indexOf(LF2) === -1 && data.indexOf(CRLF2) !== -1) this.#delim = CRLF2
    }
    const delim = this.#delim
    const last = data.lastIndexOf(delim)
    if (last === -1) {
      this.#pending = Buffer.from(data)
      return
    }
    const end = last + delim.length
    if (end < data.length) this.#pending = Buffer.from(data.subarray(end))
    this.#forward(end === data.length ? data : data.subarray(0, end), emit)
  }

  /** At the end of the upstream body: what is left is forwarded, an unterminated [DONE] still counts. */
  finish(emit: Emit): void {
    const rest = this.#pending
    this.#pending = null
    if (rest === null) return
    const text = rest.toString('latin1').trim()
    if (text === 'data: [DONE]' || text === 'data:[DONE]') {
      this.done = true
      return
    }
    if (text.length !== 0) this.#forward(rest, emit)
  }

  #forward(region: Buffer, emit: Emit): void {
    const delim = this.#delim
    // Usually found in the first event; a provider that opens with a comment (": ping") gets looked at again.
    if (this.chatId === '') this.#readChatId(region)
    for (let at = region.indexOf(delim); at !== -1; at = region.indexOf(delim, at + delim.length)) this.events++

    // [DONE] is always the last event: hold it back.
    const doneAt = region.length - delim.length - DONE.length
    if (doneAt >= 0 && region.indexOf(DONE, doneAt) === doneAt && (doneAt === 0 || region[doneAt - 1] === 10)) {
      this.done = true
      this.events--
      region = region.subarray(0, doneAt)
      if (region.length === 0) return
    }

    const u = region.lastIndexOf(USAGE)
    if (u !== -1) {
      let i = u + USAGE.length
      while (region[i] === SPACE) i++
      if (region[i] === OPEN_BRACE) {
        const start = region.lastIndexOf(DATA, u)
        const stop = region.indexOf(delim, u)
        if (start !== -1 && stop !== -1 && this.#readUsage(region.subarray(start + DATA.length, stop))) {
          // Drop the usage-only chunk the router asked for on the client's behalf.
          const after = stop + delim.length
          this.forwardedBytes += region.length - (after - start)
          if (start > 0) emit(region.subarray(0, start))
          if (after < region.length) emit(region.subarray(after))
          return
        }
      }
    }
    this.forwardedBytes += region.length
    emit(region)
  }

  /** Parses the usage event; true when it is a usage-only chunk that should be withheld. */
  #readUsage(payload: Buffer): boolean {
    try {
      const event = JSON.parse(payload.toString('utf8')) as { usage?: StreamUsage; choices?: unknown[] }
      if (event.usage !== undefined && event.usage !== null && typeof event.usage === 'object') this.usage = event.usage
      return this.#withholdUsage && Array.isArray(event.choices) && event.choices.length === 0
    } catch {
      return false
    }
  }

  #readChatId(region: Buffer): void {
    const at = region.indexOf(ID)
    if (at === -1) return
    const from = at + ID.length
    const to = region.indexOf(QUOTE, from)
    if (to !== -1 && to - from < 256) this.chatId = region.toString('latin1', from, to)
  }
}
