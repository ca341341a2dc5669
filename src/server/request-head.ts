/**
 * What the front end copies out of a uWS request before its callback returns (the uWS request object dies
 * then). Plain data: everything past `src/server/` reads requests through this and never sees uWS.
 * Absent headers are empty strings, as uWS reports them.
 */
export interface RequestHead {
  readonly requestId: string
  readonly method: string
  readonly path: string
  readonly query: string
  /** performance.now() at arrival. */
  readonly startedAt: number
  readonly authorization: string
  /** `x-api-key`, as the Anthropic SDK sends its key; read only when Authorization is absent. Absent on heads built by hand. */
  readonly xApiKey?: string
  readonly contentType: string
  readonly contentLength: string
  readonly providerAddress: string
  readonly providerSort: string
  readonly providerTrustMode: string
  readonly providerAllowFallbacks: string
  readonly providerRequireParameters: string
  readonly maxPricePrompt: string
  readonly maxPriceCompletion: string
  readonly maxPriceImage: string
  /**
   * The lower-case name of one of the twelve headers of HEADER (authorization, x-api-key, content-type,
   * content-length and the eight X-SVC-Provider-* headers) that was sent more than once with values that differ once
   * leading and trailing SP and HTAB are trimmed; '' when none was. Identical repeats are not a conflict.
   * The fields above hold the first occurrence (what uWS's getHeader returns): a proxy in front may have
   * acted on another one, so such a request is refused rather than served on a guess.
   */
  readonly conflictingHeader: string
  /**
   * Headers of the console's wallet session (auth/session-auth.ts): the session cookie and what a browser
   * says about where a request comes from (CSRF checks). First occurrence; repeats are not judged. Optional
   * so that heads built by hand need not spell them out; the front end always sets them ('' when absent).
   */
  readonly cookie?: string
  readonly origin?: string
  readonly host?: string
  readonly secFetchSite?: string
  /** W3C trace context (telemetry/trace-context.ts validates it); first occurrence, '' when absent. Optional like cookie. */
  readonly traceparent?: string
  readonly tracestate?: string
  /** `anthropic-version` and `anthropic-beta` ('' when absent); absent on heads built by hand. */
  readonly anthropicVersion?: string
  readonly anthropicBeta?: string
  /** `X-SVC-Verify-TEE` ('' when absent); absent on heads built by hand. */
  readonly verifyTee?: string
  /** Path parameters of the route pattern (`/v1/api-keys/:id`), in order; absent on heads built by hand. */
  readonly params?: readonly string[]
  /**
   * `X-Forwarded-For`, repeats comma-joined ('' when absent); believed only from server.trusted_proxies
   * (auth/source-ip.ts). Absent on heads built by hand.
   */
  readonly forwardedFor?: string
  /** The socket's peer address. Resolved lazily: only the auth audit and throttles need it. */
  remoteAddress(): string
}

/** Lower-case header names, as uWS wants them for getHeader(). */
export const HEADER = {
  authorization: 'authorization',
  contentType: 'content-type',
  contentLength: 'content-length',
  providerAddress: 'x-svc-provider-address',
  providerSort: 'x-svc-provider-sort',
  providerTrustMode: 'x-svc-provider-trust-mode',
  providerAllowFallbacks: 'x-svc-provider-allow-fallbacks',
  providerRequireParameters: 'x-svc-provider-require-parameters',
  maxPricePrompt: 'x-svc-provider-max-price-usd-prompt',
  maxPriceCompletion: 'x-svc-provider-max-price-usd-completion',
  maxPriceImage: 'x-svc-provider-max-price-usd-image',
  xApiKey: 'x-api-key',
} as const

/**
 * Lower-case names of the headers the console's session reads (auth/session-auth.ts). Copied like HEADER's,
 * but a repeat is never judged a conflict: only HEADER's names are.
 */
export const SESSION_HEADER = {
  cookie: 'cookie',
  origin: 'origin',
  host: 'host',
  secFetchSite: 'sec-fetch-site',
} as const

/** Lower-case names of the W3C trace context headers: copied like SESSION_HEADER's, never judged a conflict. */
export const TRACE_HEADER = {
  traceparent: 'traceparent',
  tracestate: 'tracestate',
} as const

/**
 * Lower-case names of the Anthropic headers a native /v1/messages candidate gets as the client sent them
 * (surfaces/messages.ts). Copied like SESSION_HEADER's; repeats of anthropic-beta are joined with a comma.
 */
export const ANTHROPIC_HEADER = {
  anthropicVersion: 'anthropic-version',
  anthropicBeta: 'anthropic-beta',
} as const

/** The header that asks for an answer's TEE signature to be checked (src/tee/). Copied like SESSION_HEADER's. */
export const TEE_HEADER = {
  verifyTee: 'x-svc-verify-tee',
} as const

/** The proxy chain's header (auth/source-ip.ts). Copied like SESSION_HEADER's; repeats are joined with a comma. */
export const FORWARD_HEADER = {
  forwardedFor: 'x-forwarded-for',
} as const
