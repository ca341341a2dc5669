/**
 * The relay of an OpenAI chat stream through a translator into another surface's stream (Anthropic's Messages,
 * the Responses API): the SSE framing of the provider's chunks, `[DONE]`, a mid-stream `{"error":…}` chunk and a
 * malformed event are read the same way whatever the stream becomes. A subclass says what the translated answer
 * is called (id), billed (usage) and ended with (complete, fail, errorBody).
 */
import type { ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import { SSE_HEADERS } from './anthropic-native.js'
import { isEventStream, type Emit, type ResponseCodec } from './codec.js'
import { payloadKind, SseFramer } from './sse-framing.js'

type Json = Record<string, any>

/** A translator of OpenAI chat chunks: pure, chunk objects in, the other surface's event text out. */
export interface ChatChunkTranslator {
  /** An OpenAI-style `{"error":…}` chunk the provider sent mid-stream. */
  error: Json | null
  /** A chunk was translated (the answer has begun). */
  readonly started: boolean
  /** The provider's finish chunk arrived. */
  readonly finished: boolean
  chunk(chunk: Json): string
}

/** An OpenAI SSE answer relayed as another surface's SSE through `translator`. */
export abstract class ChatChunkStreamCodec<T extends ChatChunkTranslator> implements ResponseCodec {
  readonly streaming = true
  readonly responseHeaders = SSE_HEADERS
  readonly translator: T
  #out = ''
  #sawDone = false
  /** An event whose data was not a JSON object: the provider failing (dropped; the try is a stream_error). */
  #malformed = false
  readonly #framer: SseFramer

  constructor(translator: T) {
    this.translator = translator
    this.#framer = new SseFramer(() => this.#onEvent())
  }

  accepts(contentType: string): boolean {
    return isEventStream(contentType)
  }

  push(chunk: Buffer, emit: Emit): void {
    this.#framer.push(chunk)
    this.#flush(emit)
  }

  get pendingBytes(): number {
    return this.#framer.pendingBytes
  }

  finish(emit: Emit): void {
    this.#framer.finish()
    this.#flush(emit)
  }

  get ended(): boolean {
    return !this.#malformed && (this.#sawDone || this.translator.finished || this.translator.error !== null)
  }

  get streamError(): boolean {
    return this.#malformed
  }

  get terminated(): boolean {
    return this.#sawDone
  }

  read(): boolean {
    return false
  }

  get produced(): boolean {
    return this.translator.started
  }

  abstract readonly id: string
  abstract usage(promptBytes: number): ChatUsage
  abstract complete(trace: Record<string, unknown>): string
  abstract fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string
  abstract errorBody(status: number, body: Buffer, requestId: string): string | Buffer

  #flush(emit: Emit): void {
    if (this.#out === '') return
    emit(Buffer.from(this.#out))
    this.#out = ''
  }

  #onEvent(): void {
    const f = this.#framer
    if (f.continuation || f.dataLines === 0) return
    const kind = payloadKind(f.dataSource, f.dataStart, f.dataEnd)
    if (kind === 'blank') return
    const data = f.dataSource.toString('utf8', f.dataStart, f.dataEnd)
    if (kind === 'other') {
      if (data.trim() === '[DONE]') this.#sawDone = true
      else this.#malformed = true
      return
    }
    let chunk: Json
    try {
      chunk = JSON.parse(data) as Json
    } catch {
      this.#malformed = true
      return
    }
    const error = chunk.error
    if (error !== null && typeof error === 'object') this.translator.error = error
    else this.#out += this.translator.chunk(chunk)
  }
}
