/**
 * The source address as the management-key audit records it: IPv6 in its canonical compressed form (RFC 5952),
 * and an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, or spelled out in full hex, as some stacks report
 * it) as the plain IPv4 address it is, so one client is one value whichever socket family accepted it.
 */
import { isIPv4, isIPv6 } from 'node:net'

export function normalizeSourceIp(address: string): string {
  const text = address.trim()
  if (isIPv4(text)) return text
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text
  if (!isIPv6(bare)) return text
  // The WHATWG URL parser canonicalises IPv6 (lower case, longest zero run compressed, mapped IPv4 in hex).
  const canonical = new URL(`http://[${bare}]/`).hostname.slice(1, -1)
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canonical)
  if (mapped === null) return canonical
  const hi = parseInt(mapped[1]!, 16)
  const lo = parseInt(mapped[2]!, 16)
  return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`
}
