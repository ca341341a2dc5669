/**
 * Where an answer goes (DESIGN.md §5). The failover loop writes every answer through this interface and never
 * knows what is behind it: the HTTP reply to the client is one sink (server/uws-reply.ts), an async job's record
 * another. Headers are flat lists, `[name, value, name, value…]`. Every method is safe to call once the
 * receiver is gone (it does nothing then); `aborted` tells whether it is.
 */

export type HeaderList = readonly string[]

export interface ResponseSink {
  /** The receiver is gone (client disconnected, job cancelled): nothing written now reaches anyone. */
  readonly aborted: boolean
  /** Whether a status has been written (after that, only the body can change). */
  readonly started: boolean
  /** The one handler called if the receiver goes away before the response ends. */
  onAborted(handler: () => void): void
  /** A whole response: status, headers and body at once. */
  send(status: number, headers: HeaderList, body: string | Uint8Array): void
  /** Starts a streamed response. */
  begin(status: number, headers: HeaderList): void
  /** Writes a chunk of a streamed response; false when the receiver is slow (wait for onWritable). */
  write(chunk: string | Uint8Array): boolean
  /** Calls `handler` once, when what was written has drained after write() returned false. */
  onWritable(handler: () => void): void
  /** Ends a streamed response, optionally with a last chunk. */
  end(chunk?: string | Uint8Array): void
  /** Runs `fn` so that several writes leave together. */
  cork(fn: () => void): void
}
