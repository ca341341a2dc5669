/**
 * What the two key APIs (/v1/api-keys and /v1/management-keys) read the same way: a key's name, the id in the
 * path, and the envelope of a malformed field.
 */
import { RouterError } from '../errors.js'
import type { RequestHead } from '../server/request-head.js'

const MAX_NAME = 200
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

export function invalidField(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

/** A key's name: a string, trimmed, 1 to 200 characters. */
export function parseKeyName(value: unknown): string {
  if (typeof value !== 'string') throw invalidField('name must be a string')
  const name = value.trim()
  if (name.length === 0) throw invalidField('name must not be empty')
  if (name.length > MAX_NAME) throw invalidField(`name must be at most ${MAX_NAME} characters`)
  return name
}

/**
 * The key id of a /…/:id path. One that is not a UUID cannot name a key, so it is answered as an unknown key
 * (`notFound`), not as a malformed request.
 */
export function keyIdOf(head: RequestHead, notFound: (id: string) => RouterError): string {
  const id = head.params?.[0] ?? ''
  if (!UUID.test(id)) throw notFound(id)
  return id
}
