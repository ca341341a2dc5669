/**
 * A request translated to OpenAI chat (from /v1/messages or /v1/responses), as each candidate gets it:
 * reasoning_effort and response_format only when the candidate advertises them. With require-parameters off a
 * candidate that does not may still be tried (spec: routing, step 4); it is not sent what it does not take, and
 * the trace's notes say so. At most four bodies per request, each serialised once, on first use.
 */
import type { Offer } from '../routing/offers.js'
import { paramBit } from '../routing/params.js'
import { BufferBody } from '../upstream/request-body.js'

const REASONING = paramBit('reasoning')
const RESPONSE_FORMAT = paramBit('response_format')

/** What a translation hands over: the chat body without the two gated members, and those apart. */
export interface GatedChat {
  /** The chat body without reasoning_effort and response_format. */
  readonly chat: Record<string, unknown>
  /** What no chat provider gets of the request, whichever candidate. */
  readonly notes: readonly string[]
  readonly reasoningEffort: string | null
  readonly responseFormat: unknown
}

export interface ChatVariant {
  readonly body: BufferBody
  readonly notes: readonly string[]
}

export class ChatVariants {
  readonly #bodies: Array<ChatVariant | undefined> = [undefined, undefined, undefined, undefined]

  /** `unsent` names what the client asked for each member, in its own surface's words, for the notes. */
  constructor(
    readonly translation: GatedChat,
    private readonly unsent: { readonly reasoning: string; readonly format: string },
  ) {}

  /** The body and trace notes `offer` gets. */
  for(offer: Offer): ChatVariant {
    const tr = this.translation
    const effort = tr.reasoningEffort !== null && (offer.paramMask & REASONING) !== 0
    const format = tr.responseFormat !== null && (offer.paramMask & RESPONSE_FORMAT) !== 0
    const key = (effort ? 1 : 0) | (format ? 2 : 0)
    const known = this.#bodies[key]
    if (known !== undefined) return known
    const notes = [...tr.notes]
    if (tr.reasoningEffort !== null && !effort) notes.push(`${this.unsent.reasoning} was not sent: the provider does not advertise reasoning_effort`)
    if (tr.responseFormat !== null && !format) notes.push(`${this.unsent.format} was not sent: the provider does not advertise response_format`)
    const variant = { body: new BufferBody(Buffer.from(JSON.stringify(this.whole(effort, format)))), notes }
    this.#bodies[key] = variant
    return variant
  }

  /** The chat body with the gated members the flags allow (both by default: what a further translation reads). */
  whole(effort = true, format = true): Record<string, unknown> {
    const tr = this.translation
    const chat: Record<string, unknown> = { ...tr.chat }
    if (effort && tr.reasoningEffort !== null) chat.reasoning_effort = tr.reasoningEffort
    if (format && tr.responseFormat !== null) chat.response_format = tr.responseFormat
    return chat
  }
}
