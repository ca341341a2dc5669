/**
 * A JSON request body judged before anything trusts it, and parsed once. One byte scan finds what a hostile
 * body would use against the router or against the provider that reads the same bytes:
 * - bytes that are not UTF-8 (the router would read U+FFFD where the provider reads something else);
 * - nesting deeper than MAX_DEPTH (recursive code anywhere on the way, ours or the provider's, can run out of
 *   stack; legitimate tool schemas nest a few dozen levels at most);
 * - a key that appears twice in one object (JSON.parse keeps the last, many providers keep the first: the router
 *   would route and bill one request while the provider serves another);
 * - a `__proto__` key (a prototype-pollution probe; no API field has that name).
 * The same scan records where each top-level member lies, so a surface can drop or replace a member by splicing
 * bytes instead of re-serialising the client's body.
 *
 * The scan assumes nothing about validity: on malformed input it stops or runs off harmlessly and JSON.parse,
 * which runs next, names the syntax error.
 */
import { isUtf8 } from 'node:buffer'
import { RouterError } from '../errors.js'

/** Deepest nesting of objects and arrays accepted in a request body. */
export const MAX_DEPTH = 128

/** Objects with more keys than this are checked for duplicates through a Set instead of pairwise. */
const PAIRWISE_KEYS = 16

const QUOTE = 34
const BACKSLASH = 92
const OPEN_OBJECT = 123
const CLOSE_OBJECT = 125
const OPEN_ARRAY = 91
const CLOSE_ARRAY = 93
const COMMA = 44
const COLON = 58

/** Where one top-level member lies: `"key": value`, from the key's opening quote to the value's last byte. */
export interface MemberSpan {
  readonly start: number
  /** One past the key's closing quote. */
  readonly keyEnd: number
  /** One past the value's last byte. */
  readonly end: number
}

/** A request body that passed the guard: its parsed object and its top-level members' positions. */
export interface JsonBody {
  readonly raw: Buffer
  readonly value: Record<string, unknown>
  readonly members: readonly MemberSpan[]
}

function invalid(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

/** One object being scanned: where its keys start in the shared key list. */
interface Frame {
  isObject: boolean
  firstKey: number
  /** Built once the object passes PAIRWISE_KEYS keys. */
  seen: Set<string> | null
}

/**
 * Key positions of every open object, shared across frames (a stack of runs, `keyTop` long); reused between
 * calls, so a body costs no allocation for its keys.
 */
const keyStarts: number[] = []
const keyEnds: number[] = []
const keyEscaped: boolean[] = []
let keyTop = 0
const frames: Frame[] = []
for (let i = 0; i <= MAX_DEPTH; i++) frames.push({ isObject: false, firstKey: 0, seen: null })

/** The key's text: bytes are latin1-decoded when there is no escape (only compared, never shown), else JSON-decoded. */
function keyText(raw: Buffer, start: number, end: number): string {
  const inner = raw.toString('latin1', start + 1, end - 1)
  if (inner.indexOf('\\') === -1) return inner
  try {
    return JSON.parse(raw.toString('utf8', start, end)) as string
  } catch {
    return inner
  }
}

/** Whether two keys are the same text; `escaped` tells whether each holds a backslash escape. */
function sameKey(raw: Buffer, aStart: number, aEnd: number, aEscaped: boolean, bStart: number, bEnd: number, bEscaped: boolean): boolean {
  // Escapes can spell one key two ways ("a" and "\u0061"): compare the decoded text when either has one.
  if (aEscaped || bEscaped) return keyText(raw, aStart, aEnd) === keyText(raw, bStart, bEnd)
  const n = aEnd - aStart
  if (n !== bEnd - bStart) return false
  for (let k = 0; k < n; k++) if (raw[aStart + k] !== raw[bStart + k]) return false
  return true
}

/** Short strings are scanned by hand: a native indexOf call costs more than reading a key's few bytes. */
const SHORT_STRING = 48

/** Index one past the closing quote of the string opening at `open`, or -1 when it never closes. */
function stringEnd(raw: Buffer, open: number): number {
  const n = raw.length
  const short = Math.min(n, open + SHORT_STRING)
  let i = open + 1
  for (; i < short; i++) {
    const c = raw[i]
    if (c === QUOTE) return i + 1
    if (c === BACKSLASH) i++
  }
  if (i >= n) return -1
  // A long string (message content): find quotes natively and check each for an odd run of backslashes.
  let at = i
  for (;;) {
    const q = raw.indexOf(QUOTE, at)
    if (q === -1) return -1
    let slashes = 0
    for (let k = q - 1; k > open && raw[k] === BACKSLASH; k--) slashes++
    if ((slashes & 1) === 0) return q + 1
    at = q + 1
  }
}

/**
 * Checks `raw` and parses it; the body must be a JSON object. Returns the RouterError (400 invalid_request) that
 * says what is wrong otherwise.
 */
export function readJsonBody(raw: Buffer): JsonBody | RouterError {
  if (!isUtf8(raw)) return invalid('request body is not valid UTF-8')
  const members: MemberSpan[] = []
  const problem = scan(raw, members)
  if (problem !== null) return problem
  let value: unknown
  try {
    value = JSON.parse(raw.toString('utf8'))
  } catch (err) {
    return invalid(`request body is not valid JSON: ${(err as Error).message}`)
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return invalid('request body must be a JSON object')
  return { raw, value: value as Record<string, unknown>, members }
}

function scan(raw: Buffer, members: MemberSpan[]): RouterError | null {
  keyTop = 0
  let depth = 0
  /** A string at this position would be a key (just after `{` or after `,` inside an object). */
  let expectKey = false
  /** The top-level member under way: its key's start (or -1) and end. */
  let memberStart = -1
  let memberKeyEnd = 0
  const n = raw.length
  for (let i = 0; i < n; i++) {
    const c = raw[i]!
    if (c === QUOTE) {
      const end = stringEnd(raw, i)
      if (end === -1) return null
      if (expectKey) {
        expectKey = false
        const frame = frames[depth]!
        const problem = addKey(raw, frame, i, end)
        if (problem !== null) return problem
        if (depth === 1) {
          memberStart = i
          memberKeyEnd = end
        }
      }
      i = end - 1
      continue
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (depth === MAX_DEPTH) return invalid(`request body nests objects and arrays deeper than ${MAX_DEPTH} levels`)
      depth++
      const frame = frames[depth]!
      frame.isObject = c === OPEN_OBJECT
      frame.firstKey = keyTop
      frame.seen = null
      expectKey = frame.isObject
      continue
    }
    if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth === 0) return null
      if (depth === 1 && memberStart !== -1) {
        members.push({ start: memberStart, keyEnd: memberKeyEnd, end: valueEnd(raw, i) })
        memberStart = -1
      }
      const frame = frames[depth]!
      keyTop = frame.firstKey
      frame.seen = null
      depth--
      expectKey = false
      if (depth === 0) return null
      continue
    }
    if (c === COMMA) {
      if (depth === 1 && memberStart !== -1) {
        members.push({ start: memberStart, keyEnd: memberKeyEnd, end: valueEnd(raw, i) })
        memberStart = -1
      }
      expectKey = depth > 0 && frames[depth]!.isObject
      continue
    }
    if (c === COLON) expectKey = false
  }
  return null
}

/** One past the last non-blank byte before `stop` (the `,` or `}` that ends a member). */
function valueEnd(raw: Buffer, stop: number): number {
  let e = stop
  while (e > 0 && (raw[e - 1] === 32 || raw[e - 1] === 10 || raw[e - 1] === 13 || raw[e - 1] === 9)) e--
  return e
}

function addKey(raw: Buffer, frame: Frame, start: number, end: number): RouterError | null {
  let escaped = false
  for (let k = start + 1; k < end - 1; k++) {
    if (raw[k] === BACKSLASH) {
      escaped = true
      break
    }
  }
  // "__proto__" is 11 bytes with its quotes; escapes can only make it longer.
  if (end - start === 11 ? raw[start + 1] === 95 && keyText(raw, start, end) === '__proto__' : escaped && keyText(raw, start, end) === '__proto__') {
    return invalid('request body has a "__proto__" key')
  }
  const count = keyTop - frame.firstKey
  if (frame.seen !== null) {
    const text = keyText(raw, start, end)
    if (frame.seen.has(text)) return duplicate(text)
    frame.seen.add(text)
    return null
  }
  for (let k = frame.firstKey; k < keyTop; k++) {
    if (sameKey(raw, keyStarts[k]!, keyEnds[k]!, keyEscaped[k]!, start, end, escaped)) return duplicate(keyText(raw, start, end))
  }
  keyStarts[keyTop] = start
  keyEnds[keyTop] = end
  keyEscaped[keyTop] = escaped
  keyTop++
  if (count + 1 > PAIRWISE_KEYS) {
    // Past a handful of keys, pairwise comparison would be quadratic: the object's keys go into a Set instead.
    const seen = new Set<string>()
    for (let k = frame.firstKey; k < keyTop; k++) seen.add(keyText(raw, keyStarts[k]!, keyEnds[k]!))
    frame.seen = seen
  }
  return null
}

function duplicate(key: string): RouterError {
  const shown = key.length > 64 ? key.slice(0, 64) + '…' : key
  return invalid(`request body has the key ${JSON.stringify(shown)} twice in one object`)
}

/**
 * `raw` with its top-level members rewritten: `drop` members removed, `set` members replaced (or added at the
 * front when absent) by the given JSON text. The rest of the client's bytes are kept as sent.
 */
export function spliceMembers(body: JsonBody, drop: readonly string[], set: Readonly<Record<string, string>>): Buffer {
  // Which members the body has, from the parsed object: the guard refused a key twice in one object (and
  // `__proto__`), so the object has an own property for each top-level key and for nothing else. No key is
  // decoded from the bytes unless members are dropped or replaced.
  const value = body.value
  const added: string[] = []
  let replaces = false
  for (const key in set) {
    if (Object.hasOwn(value, key)) replaces = true
    else added.push(JSON.stringify(key) + ':' + set[key])
  }
  if (!replaces && !drop.some((k) => Object.hasOwn(value, k))) {
    // The common case (a stream asking for usage): new members in front, the client's bytes untouched behind.
    return prependMember(body, Buffer.from(added.join(',')))
  }
  const raw = body.raw
  const keys = body.members.map((m) => keyText(raw, m.start, m.keyEnd))
  const parts: Buffer[] = []
  let out = '{' + added.join(',')
  let first = added.length === 0
  // Members are rebuilt from their own spans; the bytes between them (commas, blanks) are not needed.
  for (let i = 0; i < body.members.length; i++) {
    const m = body.members[i]!
    const key = keys[i]!
    if (drop.includes(key)) continue
    const text = set[key]
    if (!first) out += ','
    first = false
    if (text === undefined) {
      parts.push(Buffer.from(out), raw.subarray(m.start, m.end))
      out = ''
    } else {
      out += JSON.stringify(key) + ':' + text
    }
  }
  parts.push(Buffer.from(out + '}'))
  return Buffer.concat(parts)
}

/**
 * `member` (`"key":value` bytes, or several joined by commas, each key absent from the body) in front of the
 * body's members, the client's bytes untouched behind it; the body as it is when `member` is empty.
 */
function prependMember(body: JsonBody, member: Buffer): Buffer {
  const raw = body.raw
  if (member.length === 0) return raw
  const open = raw.indexOf(OPEN_OBJECT)
  const rest = raw.length - open - 1
  const out = Buffer.allocUnsafe(member.length + 2 + rest)
  out[0] = OPEN_OBJECT
  member.copy(out, 1)
  let at = member.length + 1
  if (body.members.length > 0) out[at++] = COMMA
  raw.copy(out, at, open + 1)
  return at + rest === out.length ? out : out.subarray(0, at + rest)
}

/** The guarded body's parsed object alone (endpoints that never forward their body). */
export function parseJsonObject(raw: Buffer): Record<string, unknown> | RouterError {
  const body = readJsonBody(raw)
  return body instanceof RouterError ? body : body.value
}
