/**
 * Which network addresses a provider from the ledger may be reached at (DESIGN.md §8: public unicast only). An
 * address is refused when it is not globally routable unicast: loopback, private, link-local, unique-local,
 * CGNAT, multicast, broadcast, unspecified, reserved, documentation and benchmarking ranges (IANA's
 * special-purpose registries), and any IPv6 form that embeds such an IPv4 address (mapped, compatible,
 * translated, NAT64, 6to4). Everything outside 2000::/3 is refused too: no other IPv6 space is global unicast.
 *
 * Host names are judged by what they resolve to, at connect time (upstream/connect-guard.ts); here only the
 * names that are never public by definition (RFC 6761 `localhost`, mDNS `.local`, `.internal`, `.home.arpa`).
 */
import { isIPv4, isIPv6 } from 'node:net'

type Range4 = readonly [base: number, bits: number, reason: string]

const V4: readonly Range4[] = [
  [v4('0.0.0.0'), 8, 'unspecified'],
  [v4('10.0.0.0'), 8, 'private'],
  [v4('100.64.0.0'), 10, 'shared (CGNAT)'],
  [v4('127.0.0.0'), 8, 'loopback'],
  [v4('169.254.0.0'), 16, 'link-local'],
  [v4('172.16.0.0'), 12, 'private'],
  [v4('192.0.0.0'), 24, 'IETF protocol assignments'],
  [v4('192.0.2.0'), 24, 'documentation'],
  [v4('192.88.99.0'), 24, '6to4 relay anycast'],
  [v4('192.168.0.0'), 16, 'private'],
  [v4('198.18.0.0'), 15, 'benchmarking'],
  [v4('198.51.100.0'), 24, 'documentation'],
  [v4('203.0.113.0'), 24, 'documentation'],
  [v4('224.0.0.0'), 4, 'multicast'],
  [v4('255.255.255.255'), 32, 'broadcast'],
  [v4('240.0.0.0'), 4, 'reserved'],
]

type Range6 = readonly [base: bigint, bits: number, reason: string]

const V6: readonly Range6[] = [
  [v6('64:ff9b:1::'), 48, 'NAT64 local use'],
  [v6('100::'), 64, 'discard-only'],
  [v6('2001:db8::'), 32, 'documentation'],
  [v6('2001::'), 23, 'IETF protocol assignments (Teredo, benchmarking, ORCHID)'],
  [v6('3fff::'), 20, 'documentation'],
  [v6('5f00::'), 16, 'SRv6 SIDs'],
  [v6('fc00::'), 7, 'unique-local'],
  [v6('fe80::'), 10, 'link-local'],
  [v6('fec0::'), 10, 'site-local'],
  [v6('ff00::'), 8, 'multicast'],
]

/** Prefixes of IPv6 forms that carry an IPv4 address in their last 32 bits: judged by that address. */
const EMBEDDED_TAIL: readonly (readonly [bigint, number, string])[] = [
  [v6('::ffff:0:0'), 96, 'IPv4-mapped'],
  [v6('::ffff:0:0:0'), 96, 'IPv4-translated'],
  [v6('64:ff9b::'), 96, 'NAT64'],
  [v6('::'), 96, 'IPv4-compatible'],
]
const SIX_TO_FOUR = v6('2002::')
const GLOBAL_UNICAST = v6('2000::')

function v4(text: string): number {
  const parts = text.split('.')
  return ((Number(parts[0]) << 24) | (Number(parts[1]) << 16) | (Number(parts[2]) << 8) | Number(parts[3])) >>> 0
}

/** An IPv6 address (no brackets, no zone) as a 128-bit integer. */
function v6(text: string): bigint {
  let head = text
  let tailGroups: string[] = []
  // A dotted IPv4 tail is two groups.
  const lastColon = text.lastIndexOf(':')
  if (text.includes('.', lastColon)) {
    const n = v4(text.slice(lastColon + 1))
    head = text.slice(0, lastColon + 1) + (n >>> 16).toString(16) + ':' + (n & 0xffff).toString(16)
  }
  const gap = head.indexOf('::')
  let groups: string[]
  if (gap >= 0) {
    const left = head.slice(0, gap) === '' ? [] : head.slice(0, gap).split(':')
    tailGroups = head.slice(gap + 2) === '' ? [] : head.slice(gap + 2).split(':')
    groups = [...left, ...new Array<string>(8 - left.length - tailGroups.length).fill('0'), ...tailGroups]
  } else {
    groups = head.split(':')
  }
  let out = 0n
  for (const g of groups) out = (out << 16n) | BigInt(parseInt(g, 16))
  return out
}

function inV6(value: bigint, base: bigint, bits: number): boolean {
  const shift = BigInt(128 - bits)
  return value >> shift === base >> shift
}

function refusedV4(n: number): string | null {
  for (const [base, bits, reason] of V4) {
    const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0
    if ((n & mask) >>> 0 === base) return reason
  }
  return null
}

function refusedV6(value: bigint): string | null {
  if (value === 0n) return 'unspecified'
  if (value === 1n) return 'loopback'
  for (const [base, bits, form] of EMBEDDED_TAIL) {
    if (!inV6(value, base, bits)) continue
    const inner = refusedV4(Number(value & 0xffffffffn))
    // IPv4-compatible addresses are deprecated (RFC 4291): refused whatever they carry.
    if (form === 'IPv4-compatible') return `${form} (deprecated)`
    return inner === null ? null : `${form} ${inner}`
  }
  if (inV6(value, SIX_TO_FOUR, 16)) {
    const inner = refusedV4(Number((value >> 80n) & 0xffffffffn))
    return inner === null ? null : `6to4 ${inner}`
  }
  for (const [base, bits, reason] of V6) if (inV6(value, base, bits)) return reason
  if (!inV6(value, GLOBAL_UNICAST, 3)) return 'reserved (outside 2000::/3)'
  return null
}

/**
 * Why an IP address (IPv4 dotted, or IPv6 with or without brackets) is not public unicast; null when it is.
 * Anything that is not an IP address at all is refused as such.
 */
export function refusedAddress(address: string): string | null {
  if (isIPv4(address)) return refusedV4(v4(address))
  let bare = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address
  const zone = bare.indexOf('%')
  // A zone id names an interface: only link-local addresses have one.
  if (zone >= 0) return isIPv6(bare) ? 'scoped (zone id)' : 'not an IP address'
  if (!isIPv6(bare)) return 'not an IP address'
  bare = bare.toLowerCase()
  return refusedV6(v6(bare))
}

/** Domain suffixes that never name a public host (RFC 6761, 6762, 8375, and ICANN's private-use `.internal`). */
const PRIVATE_SUFFIXES = ['localhost', 'local', 'internal', 'home.arpa', 'localdomain']

/**
 * Why the host of a URL (as WHATWG `URL.hostname` gives it: odd IPv4 spellings already normalised to dotted
 * form, IPv6 in brackets) cannot be a public provider; null when it may be (a name is checked again, against
 * every address it resolves to, each time a connection is opened).
 */
export function refusedHost(hostname: string): string | null {
  if (hostname.startsWith('[') || isIPv4(hostname)) return refusedAddress(hostname)
  const name = (hostname.endsWith('.') ? hostname.slice(0, -1) : hostname).toLowerCase()
  if (name === '') return 'empty host'
  for (const suffix of PRIVATE_SUFFIXES) {
    if (name === suffix || name.endsWith('.' + suffix)) return `a .${suffix} name is never public`
  }
  // Dotless names are resolved through the machine's search domains: the local network's own.
  if (!name.includes('.')) return 'a single-label name resolves on the local network'
  return null
}
