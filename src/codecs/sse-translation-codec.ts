/**
 * A provider's SSE stream read event by event and written as another format's SSE (a translation, not a relay):
 * what every translated stream codec shares. Each event's text is gathered by the subclass's onEvent() and sent
 * in one buffer per pushed chunk; an event whose data is not what the format allows marks the stream malformed
 * (dropped; the try is a stream_error).
 */
import type { ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import type { HeaderList } from '../upstream/sink.js'
import { SSE_HEADERS } from './anthropic-native.js'
import { isEventStream, type Emit, type ResponseCodec } from './codec.js'
import { SseFramer } from './sse-framing.js'

export abstract class SseTranslationCodec implements ResponseCodec {
  readonly streaming = true
  readonly responseHeaders: HeaderList = SSE_HEADERS
  #out = ''
  #malformed = false
  readonly #framer: SseFramer

  constructor() {
    this.#framer = new SseFramer(() => this.onEvent(this.#framer))
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

  /** An event whose data was not a JSON object: the provider failing. */
  get streamError(): boolean {
    return this.#malformed
  }

  read(): boolean {
    return false
  }

  /** One event of the provider, framed by `f`. */
  protected abstract onEvent(f: SseFramer): void

  /** Text of the translated stream, sent with the rest of the pushed chunk's. */
  protected write(text: string): void {
    this.#out += text
  }

  protected markMalformed(): void {
    this.#malformed = true
  }

  abstract readonly ended: boolean
  abstract readonly terminated: boolean
  abstract readonly id: string
  abstract readonly produced: boolean
  abstract usage(promptBytes: number): ChatUsage
  abstract complete(trace: Record<string, unknown>): string
  abstract fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string
  abstract errorBody(status: number, body: Buffer, requestId: string): string | Buffer

  #flush(emit: Emit): void {
    if (this.#out === '') return
    emit(Buffer.from(this.#out))
    this.#out = ''
  }
}
