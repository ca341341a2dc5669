/**
 * The API's routes (spec; DESIGN.md §5: every inference surface through the same admission), the console's
 * sign-in and files, and the drain's count of requests in flight.
 */
import type { KeyAuthenticators } from '../auth/authenticate.js'
import { ConsoleOrigins } from '../auth/console-origins.js'
import type { Credentials } from '../auth/credentials.js'
import type { RateGate } from '../auth/rate-limit.js'
import { SessionBook } from '../auth/session.js'
import type { SourceHead } from '../auth/source-ip.js'
import { createSessionAuthenticators } from '../auth/session-auth.js'
import type { Books } from '../billing/books.js'
import type { Config } from '../config/index.js'
import { createConsoleFiles } from '../console/static-files.js'
import type { JobRunner } from '../jobs/runner.js'
import { createInferenceRoute, type AdmissionDeps } from '../pipeline/admission.js'
import { createMultipartRoute, type MultipartDeps } from '../pipeline/multipart-admission.js'
import type { RoutingTable } from '../routing/table.js'
import type { Route } from '../server/app.js'
import type { Store } from '../store/store.js'
import type { SignerRecovery } from '../tee/signer-recovery.js'
import { createAccount } from '../surfaces/account.js'
import { createApiKeys } from '../surfaces/api-keys.js'
import { asyncImageEdits, asyncImageGenerations, editJobs, generationJobs } from '../surfaces/async-images.js'
import { createAuthSession } from '../surfaces/auth-session.js'
import { createCatalog, type UnroutedProviders } from '../surfaces/catalog.js'
import { chatCompletions } from '../surfaces/chat-completions.js'
import { createCountTokens } from '../surfaces/count-tokens.js'
import { imageEdits } from '../surfaces/image-edits.js'
import { imageGenerations } from '../surfaces/images.js'
import { createManagementKeys } from '../surfaces/management-keys.js'
import { messages } from '../surfaces/messages.js'
import { createResponsesSurface, createStoredResponsesRoutes } from '../surfaces/stored-responses.js'
import { transcriptions } from '../surfaces/transcriptions.js'
import { InFlight } from '../upstream/drain.js'
import type { EngineContext } from '../upstream/failover.js'
import type { UploadSpool } from '../upstream/upload-spool.js'
import { part, type Part } from './part.js'

export interface ApiParts {
  readonly store: Store
  readonly auth: KeyAuthenticators
  readonly credentials: Credentials
  readonly table: RoutingTable
  readonly engine: EngineContext
  readonly ledger: Books
  readonly limiter: RateGate
  readonly jobs: JobRunner
  readonly sourceOf: (head: SourceHead) => string
  readonly recovery: SignerRecovery
  /** Providers left out of routing and why (the payer's unpaid ones), listed by /v1/providers. */
  readonly unrouted: UnroutedProviders | null
  /** Where streamed uploads wait past their memory bound. */
  readonly uploads: UploadSpool
}

export interface Api {
  readonly routes: readonly Route[]
  /** Inference requests started and not yet answered (every inference route counts them: the drain waits for them). */
  readonly inFlight: InFlight
  /** The console's wallet sessions and sign-in nonces (in memory: auth/session.ts says why). */
  readonly sessions: SessionBook
  /** The API listens at `host:port`: the console's origin unless `server.public_origins` names it. */
  listening(host: string, port: number): void
}

export function apiPart(config: Pick<Config, 'server' | 'upstream' | 'responses' | 'limits'>, parts: ApiParts): Part<Api> {
  const { store, auth, credentials, table, engine, ledger, limiter, jobs, sourceOf, recovery, uploads } = parts
  const deps: AdmissionDeps = { table, engine, ledger, limiter, authenticate: auth.inference, maxJsonBodyBytes: config.server.max_json_body_bytes }
  const multipartDeps: MultipartDeps = {
    ...deps,
    maxMultipartBodyBytes: config.server.max_multipart_body_bytes,
    replayBufferBytes: config.upstream.replay_buffer_bytes,
    uploadSpool: uploads,
  }
  const asyncGenerations = jobs.kind(generationJobs)
  const asyncEdits = jobs.kind(editJobs)
  const inFlight = new InFlight()
  const catalog = createCatalog(table, parts.unrouted)
  const countTokens = createCountTokens({
    authenticate: auth.inference,
    limiter,
    table,
    pools: engine.pools,
    maxBodyBytes: config.server.max_json_body_bytes,
    timeoutMs: Math.min(config.upstream.headers_timeout_ms, 10_000),
  })
  const sessions = new SessionBook({ maxSessions: config.limits.max_console_sessions })
  // The account and key endpoints take an mk- key or a console session; /v1/management-keys only a session.
  const consoleAuth = createSessionAuthenticators(sessions, auth)
  const apiKeys = createApiKeys({ authenticate: consoleAuth.management, credentials, store, used: (key) => ledger.used(key.id, key.resetPeriod) })
  const account = createAccount({ authenticate: consoleAuth.management, store, reserved: (accountId) => ledger.reserved(accountId) })
  const mgmtKeys = createManagementKeys({ authenticate: consoleAuth.sessionOnly, credentials, store })
  // Where the console is reached: configured, or the listening address once it is known.
  let consoleOrigins = config.server.public_origins.length > 0 ? ConsoleOrigins.of(config.server.public_origins) : null
  const signIn = createAuthSession({
    sessions,
    recover: (input) => recovery.recover(input),
    sourceOf,
    perSourcePerMinute: config.limits.sign_in_per_source_per_minute,
    perMinute: config.limits.sign_in_per_minute,
    origins: () => consoleOrigins!,
  })
  const consoleFiles = createConsoleFiles()
  // POST /v1/responses and its stored state (GET/DELETE), in the store beside everything else.
  const responsesState = { store: store.responses, retentionMs: config.responses.retention_ms, maxInputBytes: config.server.max_json_body_bytes }
  const responses = createResponsesSurface(responsesState)
  const storedResponses = createStoredResponsesRoutes({ ...responsesState, authenticate: auth.inference, limiter, sweepIntervalMs: config.responses.sweep_interval_ms })
  const routes: Route[] = [
    { method: 'post', pattern: '/v1/chat/completions', handler: inFlight.track(createInferenceRoute(deps, chatCompletions), chatCompletions.name) },
    {
      method: 'post',
      pattern: '/v1/messages',
      handler: inFlight.track(createInferenceRoute(deps, messages), messages.name),
      renderError: messages.renderError,
    },
    { method: 'post', pattern: '/v1/messages/count_tokens', handler: countTokens, renderError: messages.renderError },
    { method: 'post', pattern: '/v1/responses', handler: inFlight.track(createInferenceRoute(deps, responses), responses.name) },
    { method: 'get', pattern: '/v1/responses/:id', handler: storedResponses.get },
    { method: 'del', pattern: '/v1/responses/:id', handler: storedResponses.remove },
    { method: 'post', pattern: '/v1/images/generations', handler: inFlight.track(createInferenceRoute(deps, imageGenerations), imageGenerations.name) },
    { method: 'post', pattern: '/v1/images/edits', handler: inFlight.track(createMultipartRoute(multipartDeps, imageEdits), imageEdits.name) },
    { method: 'post', pattern: '/v1/audio/transcriptions', handler: inFlight.track(createMultipartRoute(multipartDeps, transcriptions), transcriptions.name) },
    {
      method: 'post',
      pattern: '/v1/async/images/generations',
      handler: inFlight.track(createInferenceRoute(deps, asyncImageGenerations, jobs.launcher(asyncGenerations)), asyncImageGenerations.name),
    },
    {
      method: 'post',
      pattern: '/v1/async/images/edits',
      handler: inFlight.track(createMultipartRoute(multipartDeps, asyncImageEdits, jobs.spooled(asyncEdits)), asyncImageEdits.name),
    },
    { method: 'get', pattern: '/v1/async/jobs/:jobId', handler: jobs.poll },
    { method: 'get', pattern: '/v1/models', handler: catalog.listModels },
    { method: 'get', pattern: '/v1/models/*', handler: catalog.getModel },
    { method: 'get', pattern: '/v1/providers', handler: catalog.listProviders },
    { method: 'get', pattern: '/v1/api-keys', handler: apiKeys.list },
    { method: 'post', pattern: '/v1/api-keys', handler: apiKeys.create },
    { method: 'patch', pattern: '/v1/api-keys/:id', handler: apiKeys.update },
    { method: 'del', pattern: '/v1/api-keys/:id', handler: apiKeys.revoke },
    { method: 'get', pattern: '/v1/account/balance', handler: account.balance },
    { method: 'get', pattern: '/v1/account/funds', handler: account.funds },
    { method: 'get', pattern: '/v1/account/usage/stats', handler: account.usageStats },
    { method: 'get', pattern: '/v1/management-keys', handler: mgmtKeys.list },
    { method: 'post', pattern: '/v1/management-keys', handler: mgmtKeys.create },
    { method: 'patch', pattern: '/v1/management-keys/:id', handler: mgmtKeys.update },
    { method: 'del', pattern: '/v1/management-keys/:id', handler: mgmtKeys.revoke },
    { method: 'get', pattern: '/v1/auth/nonce', handler: signIn.nonce },
    { method: 'post', pattern: '/v1/auth/verify', handler: signIn.verify },
    { method: 'get', pattern: '/v1/auth/session', handler: signIn.session },
    { method: 'post', pattern: '/v1/auth/logout', handler: signIn.logout },
    { method: 'get', pattern: '/console', handler: consoleFiles },
    { method: 'get', pattern: '/console/*', handler: consoleFiles },
  ]
  const listening = (host: string, port: number): void => {
    consoleOrigins ??= ConsoleOrigins.listening(host, port)
  }
  return part({ routes, inFlight, sessions, listening }, () => storedResponses.close())
}
