/**
 * The trace member spliced into a JSON answer without re-serialising the provider's body (DESIGN.md §4: the
 * trace is a member of the JSON body).
 */

function isBlank(b: number | undefined): boolean {
  return b === 32 || b === 10 || b === 13 || b === 9
}

/**
 * Inserts `member` (`,"name":value`) before the closing brace of a JSON object body. Returns null when the body
 * does not end in an object.
 */
export function spliceTrace(body: Buffer, member: string): Buffer | null {
  let end = body.length - 1
  while (end >= 0 && isBlank(body[end])) end--
  if (end < 1 || body[end] !== 125 /* } */) return null
  let before = end - 1
  while (before >= 0 && isBlank(body[before])) before--
  const text = body[before] === 123 /* { : empty object */ ? member.slice(1) : member
  return Buffer.concat([body.subarray(0, end), Buffer.from(text), body.subarray(end)])
}
