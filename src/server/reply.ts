/**
 * How surfaces answer a request without touching uWS. Headers are flat lists, `[name, value, name, value…]`,
 * so a response needs no header object. Every method is safe to call after the client went away (it does
 * nothing then); `aborted` tells whether it did.
 */
import type { RouterError } from '../errors.js'

export type HeaderList = readonly string[]

export interface Reply {
  readonly aborted: boolean
  /** Whether a status line has been written (after that, only the body can change). */
  readonly started: boolean
  /** The one handler called if the client disconnects before the response ends. */
  onAborted(handler: () => void): void
  /** Reads the whole request body, or fails with 413 request_too_large past `limit` bytes. */
  readBody(limit: number, onBody: (body: Buffer) => void, onError: (err: RouterError) => void): void
  /** A whole response: status, headers and body in one corked write. */
  send(status: number, headers: HeaderList, body: string | Uint8Array): void
  /** Starts a streamed response. */
  begin(status: number, headers: HeaderList): void
  /** Writes a chunk of a streamed response; false when the client is slow (wait for onWritable). */
  write(chunk: string | Uint8Array): boolean
  /**
   * Calls `handler` once, when the buffered output has drained after write() returned false. A client that
   * takes longer than the send timeout to drain it is closed as stalled (onAborted runs).
   */
  onWritable(handler: () => void): void
  /** Ends a streamed response, optionally with a last chunk. */
  end(chunk?: string | Uint8Array): void
  /** Runs `fn` with the socket corked: several writes leave in one syscall. */
  cork(fn: () => void): void
}
