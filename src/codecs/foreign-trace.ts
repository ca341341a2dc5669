/**
 * A provider's own `x_svc_trace` taken out of what it sends (DESIGN.md §8: a provider never supplies the trace).
 * The trace in an answer is the router's alone: a member of that name anywhere in a provider's JSON (an answer
 * body, a stream event's data, an error body) is removed before the client, a stored response or a job sees it,
 * so first-wins and last-wins JSON readers find one trace, the router's.
 *
 * Relays stay byte for byte in the common case: mayHoldTrace() is a byte search, and only a payload it flags is
 * parsed (and re-serialised only when it really held such a member). The search must see every spelling a JSON
 * reader decodes to the name: the plain bytes, and any key with `\u` escapes in it (`"x_svc\u005ftrace"`). Each
 * character of the name is in U+005F..U+0078, so an escape of one of them is `\u00` then 5, 6 or 7; `\x` is
 * flagged too for readers that take JavaScript escapes (strict JSON refuses it, so such a payload then fails to
 * parse and is dropped as malformed). Content escapes of other characters (`\n`, `\"`, `\u00e9`, `\u003c`) do not
 * flag a payload; an escaped backslash before a `u` may, harmlessly (a parse that finds nothing).
 */

export const TRACE_MEMBER = 'x_svc_trace'
const NAME = Buffer.from(TRACE_MEMBER)
const BACKSLASH = 92

/**
 * The first place at or after `from` in `src` where a member named x_svc_trace may start: the name's bytes, or a
 * backslash that starts `\u005`, `\u006`, `\u007` or `\x`; -1 for none. Searched to the end of `src`.
 */
function firstSuspect(src: Buffer, from: number): number {
  const named = src.indexOf(NAME, from)
  const end = named === -1 ? src.length : named
  for (let i = src.indexOf(BACKSLASH, from); i !== -1 && i < end; i = src.indexOf(BACKSLASH, i + 1)) {
    const next = src[i + 1]
    if (next === 120 /* x */) return i
    if (next === 117 /* u */ && src[i + 2] === 48 && src[i + 3] === 48) {
      const d = src[i + 4]
      if (d === 53 || d === 54 || d === 55) return i
    }
  }
  return named
}

/** Whether [from, to) of `src` may hold a member named x_svc_trace in some spelling: then parse it to know. */
export function mayHoldTrace(src: Buffer, from = 0, to = src.length): boolean {
  if (to < src.length) return firstSuspect(src.subarray(from, to), 0) !== -1
  const at = firstSuspect(src, from)
  return at !== -1
}

/**
 * mayHoldTrace over ascending ranges of one Buffer (the events of a pushed chunk) with one search per suspect
 * place, not one per range: a search to the Buffer's end repeated per event would make a chunk of many events
 * quadratic.
 */
export class TraceFinder {
  #src: Buffer | null = null
  #from = 0
  /** The first suspect place at or after #from in #src, -1 for none. */
  #at = -1

  /** Forgets the last Buffer: a caller may be handed the same Buffer again with other bytes in it. */
  reset(): void {
    this.#src = null
  }

  /** mayHoldTrace(src, from, to); `cache` false for a Buffer rewritten between calls (the framer's scratch). */
  test(src: Buffer, from: number, to: number, cache: boolean): boolean {
    if (!cache) return mayHoldTrace(src, from, to)
    if (src !== this.#src || from < this.#from || (this.#at !== -1 && this.#at < from)) {
      this.#src = src
      this.#from = from
      this.#at = firstSuspect(src, from)
    }
    return this.#at !== -1 && this.#at < to
  }
}

/**
 * Removes every member named x_svc_trace from `value`, at any depth (iteratively: a provider's deep nesting costs
 * no stack). Returns whether one was removed. Tool-call arguments are strings and are left as they are.
 */
export function stripTraces(value: unknown): boolean {
  let removed = false
  const stack: unknown[] = [value]
  while (stack.length > 0) {
    const v = stack.pop()
    if (v === null || typeof v !== 'object') continue
    if (Array.isArray(v)) {
      for (const item of v) if (item !== null && typeof item === 'object') stack.push(item)
      continue
    }
    const o = v as Record<string, unknown>
    if (Object.hasOwn(o, TRACE_MEMBER)) {
      delete o[TRACE_MEMBER]
      removed = true
    }
    for (const key in o) {
      const item = o[key]
      if (item !== null && typeof item === 'object') stack.push(item)
    }
  }
  return removed
}

/** What cleanJson made of a provider's JSON text. */
export type Cleaned =
  /** Nothing to remove: relay the bytes as they are. */
  | { readonly kind: 'same' }
  /** Members removed: `value` is what is left, `text` its JSON. */
  | { readonly kind: 'changed'; readonly value: unknown; readonly text: string }
  /** Flagged but not JSON (or too deep to write back): not to be relayed. */
  | { readonly kind: 'invalid' }

const SAME: Cleaned = { kind: 'same' }
const INVALID: Cleaned = { kind: 'invalid' }

/** The JSON text [from, to) of `src` with a provider's x_svc_trace members taken out (see Cleaned). */
export function cleanJson(src: Buffer, from = 0, to = src.length): Cleaned {
  if (!mayHoldTrace(src, from, to)) return SAME
  let value: unknown
  try {
    value = JSON.parse(src.toString('utf8', from, to))
  } catch {
    return INVALID
  }
  if (!stripTraces(value)) return SAME
  try {
    return { kind: 'changed', value, text: JSON.stringify(value) }
  } catch {
    return INVALID
  }
}

/** Whether a parsed event or answer has nothing left: an object with no members. */
export function isEmptyObject(value: unknown): boolean {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false
  for (const _ in value as object) return false
  return true
}

/**
 * A held body (a JSON answer the codec parsed as `parsed`) without a provider's trace: the same Buffer when it had
 * none, else `parsed` (its members removed in place) written again. Null when it cannot be written back.
 */
export function cleanHeld(body: Buffer, parsed: unknown): Buffer | null {
  if (!mayHoldTrace(body) || !stripTraces(parsed)) return body
  try {
    return Buffer.from(JSON.stringify(parsed))
  } catch {
    return null
  }
}
