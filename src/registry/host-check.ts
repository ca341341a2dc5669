/**
 * The catalog-time look at a ledger service's host name (the connect-time check, upstream/connect-guard.ts, is
 * the one that cannot be got around): a name that resolves to an address that is not public unicast is left out
 * of the catalog, so it is neither listed nor probed. Resolved with c-ares (dns.Resolver), not getaddrinfo: a
 * name whose DNS is slow on purpose must not hold libuv's thread pool, where the store's fsyncs run. A name that
 * does not resolve now is kept (the connect-time check judges it when it does); answers are kept a minute.
 */
import { Resolver } from 'node:dns/promises'
import { isIP } from 'node:net'
import { refusedAddress } from '../vocabulary/public-address.js'

/** Every address a name resolves to now; [] when it resolves to none or the look-up failed. */
export type ResolveHost = (hostname: string) => Promise<string[]>

const TTL_MS = 60_000
/** Names looked up at once. */
const PARALLEL = 8

function defaultResolve(timeoutMs: number): ResolveHost {
  const resolver = new Resolver({ timeout: timeoutMs, tries: 1 })
  return async function resolveBoth(hostname) {
    const [v4, v6] = await Promise.all([resolver.resolve4(hostname).catch(() => []), resolver.resolve6(hostname).catch(() => [])])
    return [...v4, ...v6]
  }
}

export class HostCheck {
  readonly #resolve: ResolveHost
  readonly #now: () => number
  /** Host → why it is refused (null: not refused), and when that was found. */
  readonly #known = new Map<string, { refused: string | null; at: number }>()

  constructor(resolve?: ResolveHost, now: () => number = Date.now) {
    this.#resolve = resolve ?? defaultResolve(2000)
    this.#now = now
  }

  /** Why each refused host of `hosts` (names; IP literals are skipped) is refused; hosts not in `hosts` are forgotten. */
  async refused(hosts: ReadonlySet<string>): Promise<Map<string, string>> {
    for (const host of this.#known.keys()) if (!hosts.has(host)) this.#known.delete(host)
    const now = this.#now()
    const due = [...hosts].filter((h) => isIP(h) === 0 && !h.startsWith('[') && (this.#known.get(h)?.at ?? -Infinity) + TTL_MS <= now)
    for (let i = 0; i < due.length; i += PARALLEL) {
      await Promise.all(
        due.slice(i, i + PARALLEL).map(async (host) => {
          const addresses = await this.#resolve(host).catch(() => [])
          let refused: string | null = null
          for (const a of addresses) {
            const reason = refusedAddress(a)
            if (reason !== null) {
              refused = `url host ${host} resolves to ${a} (${reason}), not a public unicast address; registry.chain.allow_private_urls lifts this`
              break
            }
          }
          this.#known.set(host, { refused, at: now })
        }),
      )
    }
    const out = new Map<string, string>()
    for (const host of hosts) {
      const refused = this.#known.get(host)?.refused
      if (refused != null) out.set(host, refused)
    }
    return out
  }
}
