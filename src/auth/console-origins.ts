/**
 * Where the operator console is reached: a wallet sign-in's message must name one of these origins, its domain
 * the authority and its URI on the origin (EIP-4361's domain binding). Never the request's Host: a sender
 * writes what it likes there, so a page on another site could have a wallet sign a message for that site's
 * own domain (the wallet sees no mismatch) and relay it here with that Host.
 */

/** Characters an authority (host[:port]) never holds, which URL would read as the start of a path or a user. */
function isAuthority(s: string): boolean {
  if (s.length === 0 || s.length > 300) return false
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    // '/', '?', '#', '@', '\\', controls, space, DEL and beyond ASCII
    if (c <= 0x20 || c >= 0x7f || c === 0x2f || c === 0x3f || c === 0x23 || c === 0x40 || c === 0x5c) return false
  }
  return true
}

/** `scheme://authority` as URL normalises an origin (lower-case host, default port left out), or null. */
function normalised(scheme: string, authority: string): string | null {
  if (!isAuthority(authority)) return null
  try {
    return new URL(`${scheme}://${authority}`).origin
  } catch {
    return null
  }
}

/** A configured origin (`server.public_origins`): http(s)://host[:port] and nothing else, or why not. */
export function originProblem(value: string): string | null {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return 'not a URL'
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'must be http:// or https://'
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '' || (url.pathname !== '/' && url.pathname !== '')) {
    return 'must be an origin (scheme://host[:port]) with no path, query, fragment or user'
  }
  return null
}

/** Not [::1]: an EIP-4361 domain cannot be an IPv6 literal (viem's parser refuses it), so no sign-in names it. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1']

function isLoopbackOrWildcard(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '0.0.0.0' || host === '::' || host.startsWith('127.')
}

export class ConsoleOrigins {
  readonly #origins: ReadonlySet<string>

  private constructor(origins: Iterable<string>) {
    this.#origins = new Set(origins)
  }

  /** The configured origins (each checked by originProblem). */
  static of(list: readonly string[]): ConsoleOrigins {
    return new ConsoleOrigins(list.map((o) => new URL(o).origin))
  }

  /**
   * With none configured: the router's own listening address, over http or https (TLS terminated in front of
   * it); a loopback or wildcard address as localhost and 127.0.0.1 at the same port. A console reached under
   * any other name needs `server.public_origins`.
   */
  static listening(host: string, port: number): ConsoleOrigins {
    const names = isLoopbackOrWildcard(host) ? LOOPBACK_NAMES : [host.includes(':') ? `[${host}]` : host]
    const origins: string[] = []
    for (const name of names) {
      for (const scheme of ['http', 'https']) {
        const o = normalised(scheme, `${name}:${port}`)
        if (o !== null) origins.push(o)
      }
    }
    return new ConsoleOrigins(origins)
  }

  /** The origin `scheme://authority`, normalised, when the console is reached there; null when it is not. */
  origin(scheme: string, authority: string): string | null {
    const o = normalised(scheme, authority)
    return o !== null && this.#origins.has(o) ? o : null
  }

  /** Whether the console is reached at `authority` (host[:port]) over some scheme. */
  hasAuthority(authority: string): boolean {
    return this.origin('http', authority) !== null || this.origin('https', authority) !== null
  }

  /** For refusals: where the console is reached. */
  toString(): string {
    return [...this.#origins].join(', ')
  }
}
