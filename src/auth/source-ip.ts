/**
 * The source address as the management-key audit records it: IPv6 in its canonical compressed form (RFC 5952),
 * and an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, or spelled out in full hex, as some stacks report
 * it) as the plain IPv4 address it is, so one client is one value whichever socket family accepted it.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net'

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

/** What the source of a request is read from: its socket peer and the proxy chain's header. */
export interface SourceHead {
  readonly forwardedFor?: string
  remoteAddress(): string
}

/** Why a `server.trusted_proxies` entry (an address or a CIDR block) is not usable; null when it is. */
export function proxyEntryProblem(entry: string): string | null {
  const slash = entry.indexOf('/')
  const ip = slash < 0 ? entry : entry.slice(0, slash)
  const family = isIPv4(ip) ? 4 : isIPv6(ip) ? 6 : 0
  if (family === 0) return 'must be an IP address or a CIDR block (10.0.0.0/8, fd00::/8)'
  if (slash < 0) return null
  const bits = entry.slice(slash + 1)
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > (family === 4 ? 32 : 128)) return `the prefix length must be 0 to ${family === 4 ? 32 : 128}`
  return null
}

/**
 * The client's address as the router judges it for throttles (auth/source-limit.ts): the socket peer, unless the
 * peer is one of `trustedProxies`; then X-Forwarded-For read from the right, each hop appended by a trusted proxy
 * skipped, and the first address that is not one is the client (what a client writes itself is left of it, and
 * never believed). A chain of trusted proxies only, or a header that is not a list of addresses, leaves the last
 * trusted hop as the source. With no trusted proxies the header is never read.
 */
export function createSourceResolver(trustedProxies: readonly string[]): (head: SourceHead) => string {
  const peerOf = (head: SourceHead): string => {
    try {
      return normalizeSourceIp(head.remoteAddress())
    } catch {
      return ''
    }
  }
  if (trustedProxies.length === 0) return peerOf
  const trusted = new BlockList()
  for (const entry of trustedProxies) {
    const slash = entry.indexOf('/')
    const ip = normalizeSourceIp(slash < 0 ? entry : entry.slice(0, slash))
    const family = isIPv4(ip) ? 'ipv4' : 'ipv6'
    if (slash < 0) trusted.addAddress(ip, family)
    else trusted.addSubnet(ip, Number(entry.slice(slash + 1)), family)
  }
  const isTrusted = (ip: string): boolean => trusted.check(ip, isIPv4(ip) ? 'ipv4' : 'ipv6')
  return function sourceOf(head) {
    let source = peerOf(head)
    const header = head.forwardedFor ?? ''
    if (source === '' || header === '' || !isTrusted(source)) return source
    const hops = header.split(',')
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = normalizeSourceIp(hops[i]!)
      if (!isIPv4(hop) && !isIPv6(hop)) return source
      source = hop
      if (!isTrusted(hop)) return source
    }
    return source
  }
}
