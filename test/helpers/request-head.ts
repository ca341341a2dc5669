/** A RequestHead as the front end would copy it out of uWS, for unit tests and micro benchmarks. */
import type { RequestHead } from '../../src/server/request-head.js'

/** A POST /v1/chat/completions head with no routing headers; `fields` overrides any of it. */
export function requestHead(fields: Partial<RequestHead> = {}): RequestHead {
  return {
    requestId: 'req_test',
    method: 'post',
    path: '/v1/chat/completions',
    query: '',
    startedAt: 0,
    authorization: '',
    contentType: 'application/json',
    contentLength: '',
    providerAddress: '',
    providerSort: '',
    providerTrustMode: '',
    providerAllowFallbacks: '',
    providerRequireParameters: '',
    maxPricePrompt: '',
    maxPriceCompletion: '',
    maxPriceImage: '',
    conflictingHeader: '',
    remoteAddress: () => '127.0.0.1',
    ...fields,
  }
}
