/**
 * Request ids: a random per-process prefix plus a counter, so ids are unique across restarts and replicas
 * and cost one short string per request (no crypto call on the hot path).
 */
import { randomBytes } from 'node:crypto'

const PREFIX = 'req_' + randomBytes(6).toString('hex')
let counter = 0

export function nextRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER
  return PREFIX + counter.toString(36).padStart(6, '0')
}
