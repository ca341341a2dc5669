/**
 * What the failover loop asks of a surface's answer format (DESIGN.md §5, codecs). A codec is made per attempt,
 * is pure (no I/O: bytes in, bytes out through `emit`), and finds what the router needs: the provider's id for
 * the answer, the usage, the end, and where the trace goes.
 */
import type { ChatUsage, Usage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import type { HeaderList } from '../upstream/sink.js'

/** The response headers the router reads ('' when absent, or sent more than once). */
export interface ResponseHead {
  readonly contentType: string
  readonly retryAfter: string
  /** The provider's x-request-id (a media answer's id when its body has none). */
  readonly requestId: string
  /** The provider's ZG-Res-Key: the chat id a 0G broker signs its answer under. */
  readonly resKey: string
}

export type Emit = (bytes: Buffer) => void

/** `U`: the usage its answers are billed by (chat tokens, images, audio seconds). */
export interface ResponseCodec<U extends Usage = ChatUsage> {
  /** True: the answer is relayed as it arrives (`push`/`finish`); false: held whole and judged at its end (`read`). */
  readonly streaming: boolean
  /** Whether a 2xx with this Content-Type is an answer of this codec's kind; if not, the provider failed. */
  accepts(contentType: string): boolean
  /** Headers of the client's response that the codec decides (its content type). */
  readonly responseHeaders: HeaderList
  /** Streaming: a chunk of the upstream body, relayed through `emit` a whole event at a time. */
  push(chunk: Buffer, emit: Emit): void
  /** Streaming: bytes held (an event not yet complete); past a bound the provider is broken, not slow. */
  readonly pendingBytes: number
  /** Streaming: the upstream body ended; what is left is flushed. */
  finish(emit: Emit): void
  /**
   * Streaming: the provider ended its answer the way its format ends one (`[DONE]` or a finish_reason, an
   * Anthropic message_stop or stop_reason, or the provider's own error event). A body that ends cleanly
   * without it was cut short: a break, never relayed as a whole answer. Held codecs: always true.
   */
  readonly ended: boolean
  /**
   * Streaming, optional: the provider reported an error inside the stream in a format that has no error event
   * of its own (an OpenAI `{"error":…}` chunk). The stream is then not whole, whatever followed (`ended` is
   * false), and the try is listed as `stream_error` rather than `incomplete_stream`.
   */
  readonly streamError?: boolean
  /**
   * Streaming, optional: the provider sent its format's last event (`[DONE]`, an Anthropic message_stop or
   * error event). The answer is then over whether or not the provider also ends its response body: one that
   * keeps it open must not hold the client until the idle timeout and then turn a whole answer into a break.
   */
  readonly terminated?: boolean
  /** Held: the whole upstream body; false when it is not a valid answer (a provider failure, failover). */
  read(body: Buffer): boolean
  /** The provider's id for the answer ('' when it gave none): the SVC-Res-Key header. */
  readonly id: string
  /** Whether the provider produced anything the client received or could be billed for. */
  readonly produced: boolean
  /** Usage as the provider reported it, or estimated (`estimated: true`) from the prompt size and what arrived. */
  usage(promptBytes: number): U
  /** Optional: the headers of a 2xx the router reads (a codec may take the answer's id from them). */
  onHeaders?(head: ResponseHead): void
  /** The last bytes of a successful answer, carrying the trace block. */
  complete(trace: Record<string, unknown>): string | Buffer
  /** The last bytes of a streamed answer that broke after its first byte: an error event, never a fake end. */
  fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string
  /**
   * The provider's error answer (a 4xx passed through, status kept) as the JSON error envelope of the client's
   * format, sent as application/json. Absent (an Anthropic provider answering the Messages surface natively):
   * the provider's bytes go out as they are, with its Content-Type.
   */
  errorBody?(status: number, body: Buffer, requestId: string): string | Buffer
}

/** Whether a Content-Type header names `text/event-stream` (parameters and case aside). */
export function isEventStream(contentType: string): boolean {
  const n = 'text/event-stream'.length
  if (contentType.length < n) return false
  if (contentType.length > n) {
    const c = contentType.charCodeAt(n)
    // ';' or HTTP whitespace before parameters
    if (c !== 59 && c !== 32 && c !== 9) return false
  }
  return contentType.slice(0, n).toLowerCase() === 'text/event-stream'
}

/** Longest provider id the router passes on as SVC-Res-Key. */
const MAX_ID_LENGTH = 256

/**
 * Whether a provider's id can go out as the SVC-Res-Key header: 1–256 visible ASCII characters, so a provider
 * cannot break the response head or add headers of its own (a CR LF in an id would).
 */
export function isHeaderSafeId(id: unknown): id is string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH) return false
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i)
    if (c < 0x21 || c > 0x7e) return false
  }
  return true
}
