/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/) as the client sends it: `traceparent` is checked
 * character by character (no regex on the hot path) and a malformed one is ignored, never an error; a valid
 * one is passed on to the provider on every attempt, with `tracestate` when that is well formed too.
 */

const TRACEPARENT_LENGTH = 55
/** The spec lets a vendor drop tracestate past 512 characters; so do we, whole. */
const MAX_TRACESTATE = 512

function isLowerHex(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 97 && c <= 102)
}

/** Lower-case hex over [from, to), and not all zeros. */
function hexNotZero(v: string, from: number, to: number): boolean {
  let nonZero = false
  for (let i = from; i < to; i++) {
    const c = v.charCodeAt(i)
    if (!isLowerHex(c)) return false
    if (c !== 48) nonZero = true
  }
  return nonZero
}

/**
 * The traceparent to pass on: `value` when it is a valid version-00 header; a later version's first 55
 * characters as version 00 (what the spec asks of a version-00 parser); '' when absent or malformed.
 */
export function parseTraceparent(value: string): string {
  const v = value.length > TRACEPARENT_LENGTH ? value.trim() : value
  if (v.length < TRACEPARENT_LENGTH) return ''
  if (v.charCodeAt(2) !== 45 || v.charCodeAt(35) !== 45 || v.charCodeAt(52) !== 45) return ''
  const v0 = v.charCodeAt(0)
  const v1 = v.charCodeAt(1)
  if (!isLowerHex(v0) || !isLowerHex(v1) || (v0 === 102 && v1 === 102)) return ''
  if (!hexNotZero(v, 3, 35) || !hexNotZero(v, 36, 52)) return ''
  if (!isLowerHex(v.charCodeAt(53)) || !isLowerHex(v.charCodeAt(54))) return ''
  const version00 = v0 === 48 && v1 === 48
  if (version00) return v.length === TRACEPARENT_LENGTH ? v : ''
  if (v.length > TRACEPARENT_LENGTH && v.charCodeAt(TRACEPARENT_LENGTH) !== 45) return ''
  return '00' + v.slice(2, TRACEPARENT_LENGTH)
}

/** The tracestate to pass on with a valid traceparent: printable ASCII up to 512 characters, else ''. */
export function parseTracestate(value: string): string {
  if (value.length === 0 || value.length > MAX_TRACESTATE) return ''
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c < 0x20 || c > 0x7e) return ''
  }
  return value
}

/** The client's trace context as the engine carries it ('' when absent or malformed). */
export interface ClientTrace {
  readonly traceparent: string
  readonly tracestate: string
}

const NONE: ClientTrace = { traceparent: '', tracestate: '' }

/** From the request head's copied headers: one length check when the client sent none. */
export function clientTrace(traceparent: string | undefined, tracestate: string | undefined): ClientTrace {
  if (traceparent === undefined || traceparent === '') return NONE
  const parent = parseTraceparent(traceparent)
  if (parent === '') return NONE
  return { traceparent: parent, tracestate: tracestate === undefined ? '' : parseTracestate(tracestate) }
}
