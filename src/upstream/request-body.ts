/**
 * A request body as the failover loop sends it (DESIGN.md §5): each attempt takes the body anew, and a body that
 * cannot be sent again (a streamed upload past its replay buffer, as undici's `isDisturbed` turns retry off)
 * says so, which turns failover off for the request.
 */
import type { Readable } from 'node:stream'

export interface RequestBody {
  /** The body for the next attempt, or null when it can no longer be sent (failover is then off). */
  take(): Buffer | Readable | null
}

/** A body held whole in memory (JSON surfaces): every attempt sends the same bytes. */
export class BufferBody implements RequestBody {
  readonly bytes: Buffer

  constructor(bytes: Buffer) {
    this.bytes = bytes
  }

  take(): Buffer {
    return this.bytes
  }
}
