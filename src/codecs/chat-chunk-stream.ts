/**
 * The relay of an OpenAI chat stream through a translator into another surface's stream (Anthropic's Messages,
 * the Responses API): the SSE framing of the provider's chunks, `[DONE]`, a mid-stream `{"error":…}` chunk and a
 * malformed event are read the same way whatever the stream becomes. A subclass says what the translated answer
 * is called (id), billed (usage) and ended with (complete, fail, errorBody).
 */
import { payloadKind, type SseFramer } from './sse-framing.js'
import { SseTranslationCodec } from './sse-translation-codec.js'

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
export abstract class ChatChunkStreamCodec<T extends ChatChunkTranslator> extends SseTranslationCodec {
  readonly translator: T
  #sawDone = false
  /** The provider's first event was an error or malformed: nothing was translated, and nothing more is read. */
  #failed = false

  constructor(translator: T) {
    super()
    this.translator = translator
  }

  get ended(): boolean {
    return !this.streamError && (this.#sawDone || this.translator.finished || this.translator.error !== null)
  }

  /** The provider's [DONE], or a stream that failed before its first chunk (nothing sent: a miss). */
  get terminated(): boolean {
    return this.#sawDone || this.#failed
  }

  get produced(): boolean {
    return this.translator.started
  }

  protected onEvent(f: SseFramer): void {
    // The answer is over (its [DONE]) or failed before it began: whatever follows in the body is not read.
    if (this.#sawDone || this.#failed || f.continuation || f.dataLines === 0) return
    const kind = payloadKind(f.dataSource, f.dataStart, f.dataEnd)
    if (kind === 'blank') return
    const data = f.dataSource.toString('utf8', f.dataStart, f.dataEnd)
    if (kind === 'other') {
      if (data.trim() !== '[DONE]') this.#malformed()
      // [DONE] before any chunk: no answer at all, as a body that ended empty (a miss, incomplete_stream).
      else if (!this.translator.started) this.#failed = true
      else this.#sawDone = true
      return
    }
    let chunk: Json
    try {
      chunk = JSON.parse(data) as Json
    } catch {
      this.#malformed()
      return
    }
    const error = chunk.error
    if (error !== null && typeof error === 'object') {
      // Before any chunk: the try failed, and the next candidate may answer instead.
      if (!this.translator.started) this.#malformed()
      else this.translator.error = error
    } else this.write(this.translator.chunk(chunk))
  }

  /** The provider failing: the stream's end is an error; before the first chunk, a miss (terminated, not ended). */
  #malformed(): void {
    this.markMalformed()
    if (!this.translator.started) this.#failed = true
  }
}
