/**
 * The connect-time half of "a provider from the ledger is reached at public unicast addresses only" (DESIGN.md
 * §8; the catalog-time half is in registry/chain-source.ts). Every connection a pool opens asks this first: an IP
 * literal is judged as it is, and a name is resolved here, through a lookup that refuses the whole name when any
 * address it resolves to is not public unicast, so the socket connects to an address that was checked, never to
 * one a second resolution returned (DNS rebinding gets no window between check and use).
 */
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOneOptions } from 'node:dns'
import { isIP } from 'node:net'
import { refusedAddress } from '../vocabulary/public-address.js'

/** dns.lookup's shape, as net.connect calls it (options always given, `all` when it tries several families). */
export type Lookup = (
  hostname: string,
  options: LookupOneOptions | LookupAllOptions,
  callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
) => void

/** A connection the guard would not open; undici passes it to the request as its connect error. */
export class AddressRefusedError extends Error {
  readonly code = 'SVC_ADDRESS_REFUSED'
  constructor(
    readonly host: string,
    readonly address: string,
    readonly reason: string,
  ) {
    super(`${host} is not reached: ${address === host ? '' : `it resolves to ${address}, `}${reason}, not a public unicast address`)
    this.name = 'AddressRefusedError'
  }
}

export interface ConnectGuard {
  /** The refusal for an IP-literal host (net.connect does not look those up); null for a name or a public address. */
  literal(hostname: string): AddressRefusedError | null
  /** The lookup net.connect uses for names. */
  readonly lookup: Lookup
}

/**
 * The guard for providers from the ledger. `resolve` is the resolver it filters (dns.lookup; a test maps names of
 * its own with another).
 */
export function publicOnlyGuard(resolve: Lookup = dnsLookup as unknown as Lookup): ConnectGuard {
  return {
    literal(hostname) {
      if (isIP(hostname) === 0) return null
      const reason = refusedAddress(hostname)
      return reason === null ? null : new AddressRefusedError(hostname, hostname, reason)
    },
    lookup: function lookupPublic(hostname, options, callback) {
      resolve(hostname, { ...options, all: true }, (err, found) => {
        if (err !== null) return callback(err, '')
        const addresses = found as LookupAddress[]
        if (addresses.length === 0) return callback(Object.assign(new Error(`${hostname} resolves to no address`), { code: 'ENOTFOUND' }), '')
        // Every address, not only the first: with several, net.connect may try each (happy eyeballs).
        for (const a of addresses) {
          const reason = refusedAddress(a.address)
          if (reason !== null) return callback(new AddressRefusedError(hostname, a.address, reason) as NodeJS.ErrnoException, '')
        }
        if ((options as LookupAllOptions).all === true) return callback(null, addresses)
        callback(null, addresses[0]!.address, addresses[0]!.family)
      })
    },
  }
}
