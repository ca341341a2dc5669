/**
 * undici's error codes, translated once into what the router reports in `attempts` and decides on. Every
 * failure here happened before a byte reached the client, so each one allows a failover.
 */

export interface UpstreamFailure {
  /** Short machine-readable reason for the trace's `attempts[].error`. */
  readonly reason: string
  /** True when the provider was too slow (the last such failure makes the answer a 504). */
  readonly timeout: boolean
}

const BY_CODE: Readonly<Record<string, UpstreamFailure>> = {
  UND_ERR_CONNECT_TIMEOUT: { reason: 'connect_timeout', timeout: true },
  UND_ERR_HEADERS_TIMEOUT: { reason: 'headers_timeout', timeout: true },
  UND_ERR_BODY_TIMEOUT: { reason: 'body_timeout', timeout: true },
  /** Set by attempt.ts when the request's upstream.total_timeout_ms runs out. */
  SVC_TOTAL_TIMEOUT: { reason: 'total_timeout', timeout: true },
  /** Set by pools.ts at the drain's deadline. */
  SVC_SHUTTING_DOWN: { reason: 'shutting_down', timeout: false },
  /** Set by connect-guard.ts: a provider from the ledger at an address that is not public unicast. */
  SVC_ADDRESS_REFUSED: { reason: 'address_refused', timeout: false },
  UND_ERR_SOCKET: { reason: 'connection_reset', timeout: false },
  UND_ERR_CLOSED: { reason: 'connection_closed', timeout: false },
  UND_ERR_DESTROYED: { reason: 'connection_closed', timeout: false },
  UND_ERR_RESPONSE_STATUS_CODE: { reason: 'bad_status', timeout: false },
  UND_ERR_RES_EXCEEDED_MAX_SIZE: { reason: 'response_too_large', timeout: false },
  UND_ERR_INVALID_RETURN_VALUE: { reason: 'protocol_error', timeout: false },
  HPE_INVALID_CONSTANT: { reason: 'protocol_error', timeout: false },
  ECONNREFUSED: { reason: 'connection_refused', timeout: false },
  ECONNRESET: { reason: 'connection_reset', timeout: false },
  EPIPE: { reason: 'connection_reset', timeout: false },
  ETIMEDOUT: { reason: 'connect_timeout', timeout: true },
  EHOSTUNREACH: { reason: 'host_unreachable', timeout: false },
  ENOTFOUND: { reason: 'dns_failure', timeout: false },
}

const UNKNOWN: UpstreamFailure = { reason: 'upstream_error', timeout: false }

/** A stream whose body ended cleanly before the provider's end marker (ResponseCodec.ended). */
export const INCOMPLETE_STREAM: UpstreamFailure = { reason: 'incomplete_stream', timeout: false }

/** A stream in which the provider reported an error (ResponseCodec.streamError). */
export const STREAM_ERROR: UpstreamFailure = { reason: 'stream_error', timeout: false }

export function classifyUpstreamError(err: unknown): UpstreamFailure {
  const code = (err as { code?: unknown } | null)?.code
  return (typeof code === 'string' && BY_CODE[code]) || UNKNOWN
}

/**
 * Provider answers that make the router try the next candidate (DESIGN.md §4: 5xx and 429), and redirects: the
 * router never follows one (it would send the client's request to an address that is not on the ledger) and a
 * 3xx is no answer a client can use, so it counts as the provider failing, like a 5xx. So do the 4xx that judge
 * the router's own standing with the provider, not the client's request: 401 and 403 (the router's credentials
 * there), 402 (its account there), 407 (a proxy's credentials). Passed on, they told the client's SDK that its
 * own key was bad (an AuthenticationError for a key that works).
 */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 429 || (status >= 300 && status < 400) || status === 401 || status === 402 || status === 403 || status === 407
}

/** Provider answers that count against its health: all the retryable ones except 429 (it is only busy). */
export function isProviderFault(status: number): boolean {
  return status !== 429 && isRetryableStatus(status)
}
