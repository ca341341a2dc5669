/**
 * Parallel tool calls of an OpenAI stream held back for a sequential format (Anthropic's blocks, the Responses
 * API's items): OpenAI may interleave the calls' chunks (index 0, 1, 0, 1 …), but those formats finish one call
 * before the next starts. The translators (anthropic-stream-translation.ts, responses-stream-translation.ts)
 * stream the first call live and hold the others here, then write each held call whole.
 */

type Json = Record<string, any>

/** A tool call held back while another one is open: its id, its name and its arguments as they came. */
export interface HeldCall {
  id: string
  name: string
  args: string
}

/** Whether `args` is a whole JSON value: a tool call whose arguments are complete can take no more of them. */
export function wholeJson(args: string): boolean {
  if (args === '') return false
  try {
    JSON.parse(args)
    return true
  } catch {
    return false
  }
}

/**
 * A chunk of call `index` (its `call` object, `fn` its function and `args` its arguments text) that came while
 * another call is open, whose arguments so far are `openArgs`. A later chunk of a held call is added to it; a new
 * call is held too, unless none is held yet and the open call's arguments are whole (then the open one is done
 * and the new one streams live). Returns the held calls (`held`, or a map made for the first) when the chunk was
 * held, null when it streams live.
 */
export function holdCall(held: Map<number, HeldCall> | null, index: number, call: Json, fn: Json, args: string, openArgs: string): Map<number, HeldCall> | null {
  const earlier = held?.get(index)
  if (earlier !== undefined) {
    // A later chunk of a held call: its id or name may come late too.
    if (earlier.id === '' && typeof call.id === 'string') earlier.id = call.id
    if (typeof fn.name === 'string') earlier.name += fn.name
    earlier.args += args
    return held
  }
  if (held === null && wholeJson(openArgs)) return null
  held ??= new Map()
  held.set(index, { id: typeof call.id === 'string' ? call.id : '', name: typeof fn.name === 'string' ? fn.name : '', args })
  return held
}

/**
 * A tool call whose first chunks came without its name (some providers send the id first). The sequential
 * formats decide a call's item or block by its name (its type, or the start event that carries it), so the
 * translators keep such a call here until the name comes, or add it as it stands when anything else comes first.
 */
export interface UnnamedCall extends HeldCall {
  readonly index: number
}

/** The call's chunk waits with it: no name yet. */
export const UNNAMED_WAITS = 0
/** The chunk brought the call's name: it can be added now. */
export const UNNAMED_NAMED = 1
/** The chunk is another call's: the waiting one is added as it stands first. */
export const UNNAMED_OTHER = 2

/**
 * A chunk of call `index` (its `call` object, `args` and `name`, '' when absent) while `unnamed` waits for its
 * name: the same call's chunk is kept in it (its id if it came late, its arguments, its name).
 */
export function feedUnnamed(unnamed: UnnamedCall, index: number, call: Json, args: string, name: string): number {
  if (unnamed.index !== index) return UNNAMED_OTHER
  if (unnamed.id === '' && typeof call.id === 'string') unnamed.id = call.id
  unnamed.args += args
  if (name === '') return UNNAMED_WAITS
  unnamed.name = name
  return UNNAMED_NAMED
}
