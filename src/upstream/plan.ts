/**
 * One attempt as the surface plans it for one candidate (DESIGN.md §5): a messages request to an openai-only
 * candidate plans a translation, the same request to a native candidate plans a pass-through.
 */
import type { ChatUsage, Usage } from '../billing/cost.js'
import type { ResponseCodec } from '../codecs/codec.js'
import type { RouterError } from '../errors.js'
import type { RequestBody } from './request-body.js'
import type { HeaderList } from './sink.js'

export interface AttemptPlan<U extends Usage = ChatUsage> {
  /** Below the provider's base URL, e.g. /v1/chat/completions. */
  readonly path: string
  /** Upstream request headers (flat list); the request id is added by the loop. */
  readonly headers: HeaderList
  readonly body: RequestBody
  readonly codec: ResponseCodec<U>
  /**
   * What the request asked that this candidate does not get (a translation dropped a built-in tool, a parameter
   * it does not advertise): shown as `notes` in the trace of the answer it serves. Absent when nothing was.
   */
  readonly notes?: readonly string[]
  /**
   * Set when this candidate cannot serve the request at all (it was asked for a tool the translation cannot
   * give it): it is not sent, the next candidate is tried, and when no candidate could serve, this is the answer.
   */
  readonly refusal?: RouterError
}
