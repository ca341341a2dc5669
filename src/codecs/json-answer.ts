/**
 * A provider's JSON answer, held whole and read once (spec §4.2, DESIGN.md §4): what every non-streaming codec
 * shares, whichever format the answer is in and whichever the client gets. Nothing is relayed before read() has
 * judged the whole body.
 */
import type { ChatUsage } from '../billing/cost.js'
import type { RouterError } from '../errors.js'
import type { HeaderList } from '../upstream/sink.js'
import type { ResponseCodec } from './codec.js'

type Json = Record<string, any>

export const JSON_HEADERS = ['Content-Type', 'application/json']

/** A codec of a JSON answer: no stream, so nothing pending and ended once read. */
export abstract class JsonAnswerCodec implements ResponseCodec {
  readonly streaming = false
  readonly responseHeaders: HeaderList = JSON_HEADERS
  readonly pendingBytes = 0
  readonly ended = true

  accepts(): boolean {
    // Judged by parsing: a body that is not an answer object fails in read().
    return true
  }

  push(): void {}

  finish(): void {}

  abstract read(body: Buffer): boolean
  abstract readonly id: string
  abstract readonly produced: boolean
  abstract usage(promptBytes: number): ChatUsage
  abstract complete(trace: Record<string, unknown>): string | Buffer
  abstract fail(err: RouterError, requestId: string, trace: Record<string, unknown>): string
}

/**
 * The body as a JSON object with an array at `key` (`choices`, `content`, `output`), or null: without it the body
 * is not an answer (an error object sent with a 200, say), so there is nothing to relay and bill.
 */
export function answerObject(body: Buffer, key: string): Json | null {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'))
    if (value === null || typeof value !== 'object' || Array.isArray(value) || !Array.isArray((value as Json)[key])) return null
    return value as Json
  } catch {
    return null
  }
}

/** The output tokens of a chat completion estimated, about four bytes each, over its first message's text and tool calls. */
export function firstMessageEstimate(completion: Json | null): number {
  const message = completion?.choices?.[0]?.message
  const bytes = (typeof message?.content === 'string' ? message.content.length : 0) + (message?.tool_calls ? JSON.stringify(message.tool_calls).length : 0)
  return Math.ceil(bytes / 4)
}
