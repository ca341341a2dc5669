/**
 * Every error code the router can answer with, its HTTP status and its envelope type, in one table
 * (spec §7 and DESIGN.md §4). Handlers throw or pass a `RouterError`; `renderError` is the only place
 * that turns one into bytes.
 */

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'payment_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'provider_error'
  | 'service_unavailable'
  | 'server_error'

const TABLE = {
  // 400
  invalid_request: [400, 'invalid_request_error'],
  invalid_provider_header: [400, 'invalid_request_error'],
  invalid_trust_mode: [400, 'invalid_request_error'],
  invalid_max_price_usd: [400, 'invalid_request_error'],
  no_provider_within_max_price: [400, 'invalid_request_error'],
  pinned_provider_exceeds_max_price: [400, 'invalid_request_error'],
  model_not_capable: [400, 'invalid_request_error'],
  no_provider_within_max_tokens: [400, 'invalid_request_error'],
  model_not_supported_on_surface: [400, 'invalid_request_error'],
  // 401
  missing_authorization: [401, 'authentication_error'],
  invalid_api_key: [401, 'authentication_error'],
  /** Console sign-in (EIP-4361): the signed message or its signature was refused. */
  invalid_siwe_message: [401, 'authentication_error'],
  /** Console: the session cookie names no live session (unknown, expired or logged out). */
  invalid_session: [401, 'authentication_error'],
  // 402
  insufficient_balance: [402, 'payment_error'],
  credit_limit_exceeded: [402, 'payment_error'],
  // 403
  insufficient_scope: [403, 'permission_error'],
  access_denied: [403, 'permission_error'],
  trust_mode_mismatch: [403, 'permission_error'],
  model_not_allowed: [403, 'permission_error'],
  provider_not_allowed: [403, 'permission_error'],
  // 404
  not_found: [404, 'not_found_error'],
  api_key_not_found: [404, 'not_found_error'],
  model_not_found: [404, 'not_found_error'],
  provider_not_found: [404, 'not_found_error'],
  job_not_found: [404, 'not_found_error'],
  /** /v1/responses: a previous_response_id or path id that is unknown, expired, deleted or another account's. */
  response_not_found: [404, 'not_found_error'],
  // 405
  method_not_allowed: [405, 'invalid_request_error'],
  // 413
  request_too_large: [413, 'invalid_request_error'],
  // 429
  rate_limit_exceeded: [429, 'rate_limit_error'],
  provider_rate_limited: [429, 'rate_limit_error'],
  // 431
  request_header_fields_too_large: [431, 'invalid_request_error'],
  // 5xx
  server_error: [500, 'server_error'],
  provider_error: [502, 'provider_error'],
  no_provider_for_trust_mode: [503, 'service_unavailable'],
  no_available_provider: [503, 'service_unavailable'],
  /** A replica cannot reach the shared store (PostgreSQL) it needs to admit or bill this request. */
  store_unavailable: [503, 'service_unavailable'],
  /** A streamed upload past its memory bound could not be written to its spool file (disk full, unwritable). */
  upload_spool_failed: [503, 'service_unavailable'],
  provider_timeout: [504, 'provider_error'],
} as const satisfies Record<string, readonly [number, ErrorType]>

export type ErrorCode = keyof typeof TABLE

/** An error with a code of the table; `status` and `type` always follow from `code`. */
export class RouterError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly type: ErrorType
  /** Extra response headers, e.g. Retry-After on a 429. */
  readonly headers: Readonly<Record<string, string>> | undefined

  constructor(code: ErrorCode, message: string, headers?: Record<string, string>) {
    super(message)
    this.name = 'RouterError'
    this.code = code
    this.status = TABLE[code][0]
    this.type = TABLE[code][1]
    this.headers = headers
  }
}

/** The reason phrase uWS needs in the status line. */
export const STATUS_LINE: Readonly<Record<number, string>> = {
  200: '200 OK',
  201: '201 Created',
  202: '202 Accepted',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  402: '402 Payment Required',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  413: '413 Payload Too Large',
  429: '429 Too Many Requests',
  431: '431 Request Header Fields Too Large',
  500: '500 Internal Server Error',
  502: '502 Bad Gateway',
  503: '503 Service Unavailable',
  504: '504 Gateway Timeout',
}

export function statusLine(status: number): string {
  return STATUS_LINE[status] ?? `${status} Unknown`
}

/**
 * The envelope of DESIGN.md §4, as a JSON string. Inference errors raised after a provider was chosen carry
 * the `x_svc_trace` block too (attempts, what was billed).
 */
export function renderError(err: RouterError, requestId: string, trace?: Record<string, unknown>): string {
  const error = { message: err.message, type: err.type, code: err.code }
  return JSON.stringify(trace === undefined ? { error, request_id: requestId } : { error, request_id: requestId, x_svc_trace: trace })
}

/** Any thrown value as a RouterError: unknown failures become a 500 without leaking internals. */
export function toRouterError(err: unknown): RouterError {
  if (err instanceof RouterError) return err
  // A networked store that is down or frozen (store.ts StoreUnavailableError; by name: errors.ts imports no store).
  if ((err as Error | null)?.name === 'StoreUnavailableError') {
    return new RouterError('store_unavailable', 'the database is unreachable; try again shortly')
  }
  return new RouterError('server_error', 'internal error')
}
