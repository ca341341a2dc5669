/**
 * Whether a client asks for its answer's TEE signature to be checked: `X-SVC-Verify-TEE: true|false` (any
 * case; blank is unset; anything else is a 400) or `"verify_tee": true|false` in a JSON body, which the
 * surface removes before forwarding. The header wins.
 */
import type { JsonBody } from '../codecs/json-body.js'
import { RouterError } from '../errors.js'
import type { RequestHead } from '../server/request-head.js'

export const VERIFY_TEE_MEMBER = 'verify_tee'

export function verifyTeeOf(json: JsonBody, head: RequestHead | undefined): boolean | RouterError {
  const header = head?.verifyTee?.trim() ?? ''
  if (header !== '') {
    const lower = header.toLowerCase()
    if (lower === 'true') return true
    if (lower === 'false') return false
    return new RouterError('invalid_request', `X-SVC-Verify-TEE must be true or false (got ${JSON.stringify(header.slice(0, 40))})`)
  }
  const v = json.value[VERIFY_TEE_MEMBER]
  if (v === undefined || v === null) return false
  if (typeof v !== 'boolean') return new RouterError('invalid_request', 'verify_tee must be a boolean')
  return v
}
