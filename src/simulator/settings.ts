/**
 * The simulator's options: their types, defaults and validation, resolved once per `setOptions` into the
 * `Settings` the request path reads.
 */
import type { OutgoingHttpHeaders } from 'node:http'
import type { BrokerOptions } from './broker.js'

/** A failure injected into `/v1/chat/completions`; `refuse` takes the whole listener down. */
export type SimulatorFault =
  | 'none'
  | 'refuse' // stop listening: connections are refused (re-listen on the SAME port when cleared via setOptions)
  | 'reset-before-headers' // read the request, then destroy the socket without writing anything
  | 'status-500' // answer 500 with an OpenAI-style error body
  | 'status-429' // answer 429 with Retry-After: 1 and an OpenAI-style error body
  | 'status-400' // answer 400 with an OpenAI-style error body (a client error the router must pass through)
  | 'slow-headers' // wait `slowHeadersMs` before writing the status line, then behave normally
  | 'reset-mid-stream' // stream: headers and `faultAfterChunks` content chunks, then destroy; JSON: half the body
  | 'no-usage' // behave normally but never include `usage`

const FAULTS: Record<SimulatorFault, true> = {
  none: true,
  refuse: true,
  'reset-before-headers': true,
  'status-500': true,
  'status-429': true,
  'status-400': true,
  'slow-headers': true,
  'reset-mid-stream': true,
  'no-usage': true,
}

/** How a TEE-mode simulator signs its chat answers (src/tee/ checks them). */
export type TeeFault =
  | 'none' // sign hex(sha256(request)):hex(sha256(response)) with the given key
  | 'wrong-signer' // sign the right text with another key
  | 'hash-mismatch' // sign, with the right key, a text whose response hash is not the answer's
  | 'forged-signature' // claim the right signer, with signature bytes that are not its signature
  | 'no-signature' // answer the signature request 404
  | 'slow-signature' // answer the signature request only after `slowHeadersMs`

export const TEE_FAULTS: readonly TeeFault[] = ['none', 'wrong-signer', 'hash-mismatch', 'forged-signature', 'no-signature', 'slow-signature']

/** Every `SimulatorFault`, for validating user input. */
export const SIMULATOR_FAULTS = Object.keys(FAULTS) as readonly SimulatorFault[]

/** How the simulator listens and behaves; every field has a default. */
export interface SimulatorOptions {
  host?: string // default '127.0.0.1'
  port?: number // default 0 (ephemeral)
  name?: string // default 'sim'; echoed in `x-simulator-name` and `system_fingerprint`
  ttftMs?: number // default 0: delay before the first content token (stream) / the whole response (JSON)
  tokensPerS?: number // default 0 = no pacing; otherwise tokens are spaced 1000/tokensPerS ms apart
  completionTokens?: number // default 16; capped by the request's max_tokens / max_completion_tokens
  fault?: SimulatorFault // default 'none'
  faultCount?: number // default Infinity: the fault applies to the first N requests after it was set
  faultAfterChunks?: number // default 2
  slowHeadersMs?: number // default 1000
  models?: readonly string[] // if set, any other model gets 404 model_not_found
  /**
   * TEE mode (a 0G broker): routes are also served under /v1/proxy, chat answers carry ZG-Res-Key and are signed
   * (EIP-191) with this private key, fetched at GET /v1/proxy/signature/{chatID}.
   */
  teeKey?: `0x${string}`
  teeFault?: TeeFault // default 'none'
  /** As a 0G provider (with teeKey): session tokens checked, fees settled on chain (broker.ts). Set at start only. */
  broker?: BrokerOptions
}

/** The options `setOptions` may change. */
export type Tunables = Omit<SimulatorOptions, 'host' | 'port' | 'broker'>

/** Options with defaults applied, plus the strings every response reuses. */
export interface Settings {
  name: string
  nameJson: string
  ttftMs: number
  tokensPerS: number
  completionTokens: number
  fault: SimulatorFault
  faultCount: number
  faultAfterChunks: number
  slowHeadersMs: number
  models: ReadonlySet<string> | undefined
  modelsBody: string
  sseHeaders: OutgoingHttpHeaders
  teeKey: `0x${string}` | undefined
  teeFault: TeeFault
}

const STARTED = Math.floor(Date.now() / 1000)

/** Applies defaults and validates; throws a TypeError or RangeError naming the bad field. */
export function resolveSettings(o: Tunables): Settings {
  const name = o.name ?? 'sim'
  if (typeof name !== 'string' || !/^[\x21-\x7e]+$/.test(name)) {
    throw new TypeError(`simulator: name must be printable ASCII without spaces, got ${JSON.stringify(name)}`)
  }
  const fault = o.fault ?? 'none'
  if (!Object.hasOwn(FAULTS, fault)) {
    throw new TypeError(`simulator: unknown fault ${JSON.stringify(fault)} (one of ${SIMULATOR_FAULTS.join(', ')})`)
  }
  if (o.models !== undefined && !(Array.isArray(o.models) && o.models.every((m) => typeof m === 'string' && m !== ''))) {
    throw new TypeError('simulator: models must be an array of non-empty strings')
  }
  const models = o.models === undefined ? undefined : new Set(o.models)
  const modelList = [...(models ?? [])].map((id) => ({ id, object: 'model', created: STARTED, owned_by: 'sim' }))
  return {
    name,
    nameJson: JSON.stringify(name),
    ttftMs: checkNumber('ttftMs', o.ttftMs ?? 0, false),
    tokensPerS: checkNumber('tokensPerS', o.tokensPerS ?? 0, false),
    completionTokens: checkNumber('completionTokens', o.completionTokens ?? 16, true),
    fault,
    faultCount: o.faultCount === undefined || o.faultCount === Infinity ? Infinity : checkNumber('faultCount', o.faultCount, true),
    faultAfterChunks: checkNumber('faultAfterChunks', o.faultAfterChunks ?? 2, true),
    slowHeadersMs: checkNumber('slowHeadersMs', o.slowHeadersMs ?? 1000, false),
    models,
    modelsBody: JSON.stringify({ object: 'list', data: modelList }),
    sseHeaders: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-simulator-name': name },
    teeKey: teeKeyOf(o.teeKey),
    teeFault: teeFaultOf(o.teeFault),
  }
}

function checkNumber(field: string, value: unknown, integer: boolean): number {
  const ok = typeof value === 'number' && Number.isFinite(value) && value >= 0 && (!integer || Number.isInteger(value))
  if (!ok) throw new RangeError(`simulator: ${field} must be ${integer ? 'an integer' : 'a number'} >= 0, got ${String(value)}`)
  return value as number
}

function teeKeyOf(key: unknown): `0x${string}` | undefined {
  if (key === undefined) return undefined
  if (typeof key !== 'string' || !/^0x[0-9a-fA-F]{64}$/.test(key)) throw new TypeError('simulator: teeKey must be a 0x-prefixed 32-byte hex private key')
  return key as `0x${string}`
}

function teeFaultOf(fault: unknown): TeeFault {
  if (fault === undefined) return 'none'
  if (!TEE_FAULTS.includes(fault as TeeFault)) throw new TypeError(`simulator: unknown teeFault ${JSON.stringify(fault)} (one of ${TEE_FAULTS.join(', ')})`)
  return fault as TeeFault
}
