/**
 * Checks the signature a TEE provider puts on an answer (DESIGN.md §7). After the provider's last byte the
 * router fetches `GET {url}{api_path}/signature/{chatID}?model={model}` (`{url}/v1/proxy/signature/…` for a
 * service on chain), which answers `{text, signature, signing_address, signing_algo}`; the answer is verified
 * when `text` is hex(sha256(the exact request bytes sent)) + ":" + hex(sha256(the exact response bytes
 * received)) and the EIP-191 personal-sign signature over `text` recovers to the provider's acknowledged
 * signer (registry/types.ts tee_signer), whatever `signing_address` claims.
 *
 * Cost: nothing for a request that does not ask (no hashing, no wait). A request that asks pays a sha256 of its
 * bytes as they pass and, before its trace, one GET to the provider and one signature recovery, bounded by
 * `tee.verify_timeout_ms`. Sampled answers are checked the same way after they were delivered.
 */
import { createHash, type Hash } from 'node:crypto'
import type { RegistryProvider } from '../registry/types.js'
import { teeVerify } from '../telemetry/events.js'
import type { UpstreamPools } from '../upstream/pools.js'
import { basePath } from '../upstream/pools.js'
import type { RecoverInput } from './recover-worker.js'
import { SignerRecovery } from './signer-recovery.js'
import type { TeeStanding } from './standing.js'

/** Why an answer was not verified. */
export type TeeReason =
  | 'not_a_tee_provider'
  | 'no_chat_id'
  | 'no_signature'
  | 'malformed_signature'
  | 'bad_signature'
  | 'wrong_signer'
  | 'hash_mismatch'
  | 'timeout'
  | 'unsupported'

export interface TeeOutcome {
  readonly verified: boolean
  readonly reason?: TeeReason
}

/** Outcomes that say nothing about the provider (it was never asked to sign, or the router could not ask). */
const NOT_A_CHECK: ReadonlySet<TeeReason> = new Set(['not_a_tee_provider', 'no_chat_id', 'unsupported'])

/** A signature answer larger than this is not one. */
const MAX_SIGNATURE_BODY = 16 * 1024

/** The bytes of one attempt, hashed as they pass: what the provider's signed text must match. */
export class TeeRecorder {
  readonly sampled: boolean
  readonly #request: Buffer
  readonly #response: Hash = createHash('sha256')

  constructor(requestBytes: Buffer, sampled: boolean) {
    this.#request = requestBytes
    this.sampled = sampled
  }

  /** A chunk of the provider's response body, exactly as received. */
  received(chunk: Uint8Array): void {
    this.#response.update(chunk)
  }

  /** hex(sha256(request)) + ":" + hex(sha256(response)); call once, after the last byte. */
  text(): string {
    return createHash('sha256').update(this.#request).digest('hex') + ':' + this.#response.digest('hex')
  }
}

export interface TeeSettings {
  readonly verifyTimeoutMs: number
  /** Share (0..1) of TEE providers' answers checked in the background. */
  readonly sampleRate: number
}

export class TeeVerifier {
  readonly #pools: UpstreamPools
  readonly #standing: TeeStanding
  readonly #settings: TeeSettings
  /** Background checks under way: at most one per provider (a sample needs no company). */
  readonly #sampling = new Set<string>()
  /** Its pool starts on the first check: a router whose clients never ask, and that samples nothing, never starts it. */
  readonly #recovery: SignerRecovery
  readonly #ownsRecovery: boolean

  /** `recovery`: the pool shared with the console's sign-in; one of its own when absent. */
  constructor(pools: UpstreamPools, standing: TeeStanding, settings: TeeSettings, recovery?: SignerRecovery) {
    this.#pools = pools
    this.#standing = standing
    this.#settings = settings
    this.#recovery = recovery ?? new SignerRecovery()
    this.#ownsRecovery = recovery === undefined
  }

  get timeoutMs(): number {
    return this.#settings.verifyTimeoutMs
  }

  /** Whether to record this attempt for a background check (a TEE provider, the sample's odds, none running). */
  sample(provider: RegistryProvider): boolean {
    const rate = this.#settings.sampleRate
    return rate > 0 && provider.tee_signer !== '' && !this.#sampling.has(provider.address) && Math.random() < rate
  }

  /** Verifies an answer; never rejects. `sampled`: a background check (published as such). */
  async verify(provider: RegistryProvider, model: string, chatId: string, recorder: TeeRecorder): Promise<TeeOutcome> {
    const sampled = recorder.sampled
    if (sampled) this.#sampling.add(provider.address)
    let outcome: TeeOutcome
    try {
      outcome = await this.#check(provider, model, chatId, recorder)
    } catch {
      outcome = { verified: false, reason: 'no_signature' }
    } finally {
      if (sampled) this.#sampling.delete(provider.address)
    }
    if (outcome.verified) this.#standing.record(provider.address, true)
    else if (!NOT_A_CHECK.has(outcome.reason!)) this.#standing.record(provider.address, false)
    if (teeVerify.hasSubscribers) teeVerify.publish({ provider: provider.address, outcome: outcome.verified ? 'verified' : outcome.reason!, sampled })
    return outcome
  }

  /**
   * Resolves once the recovery worker is up (started now if it was not). Its start (a thread, and viem's
   * modules loaded in it: seconds on a busy machine, more under Node 24's module loading than under 20's) is the
   * router's, not the provider's: `tee.verify_timeout_ms` bounds a check from when the worker can run it, so the
   * first verified request after a start is judged as every other.
   */
  ready(): Promise<void> {
    return this.#recovery.ready()
  }

  #recover(input: RecoverInput): Promise<string> {
    return this.#recovery.recover(input)
  }

  async close(): Promise<void> {
    if (this.#ownsRecovery) await this.#recovery.close()
  }

  async #check(provider: RegistryProvider, model: string, chatId: string, recorder: TeeRecorder): Promise<TeeOutcome> {
    if (provider.tee_signer === '') return { verified: false, reason: 'not_a_tee_provider' }
    if (chatId === '') return { verified: false, reason: 'no_chat_id' }
    const expected = recorder.text()
    const timeoutMs = this.#settings.verifyTimeoutMs
    const signal = AbortSignal.timeout(timeoutMs)
    let body: string
    try {
      const res = await this.#pools.get(provider.url).request({
        path: `${basePath(provider.url)}${provider.api_path}/signature/${encodeURIComponent(chatId)}?model=${encodeURIComponent(model)}`,
        method: 'GET',
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        signal,
      })
      if (res.statusCode !== 200) {
        await res.body.dump()
        return { verified: false, reason: 'no_signature' }
      }
      body = await readLimited(res.body, MAX_SIGNATURE_BODY)
    } catch (err) {
      return { verified: false, reason: signal.aborted || isTimeout(err) ? 'timeout' : 'no_signature' }
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(body)
    } catch {
      return { verified: false, reason: 'malformed_signature' }
    }
    const { text, signature } = (parsed ?? {}) as { text?: unknown; signature?: unknown }
    if (typeof text !== 'string' || typeof signature !== 'string' || !/^(0x)?[0-9a-fA-F]{130}$/.test(signature)) {
      return { verified: false, reason: 'malformed_signature' }
    }
    const signer = await this.#recover({ text, signature: (signature.startsWith('0x') ? signature : `0x${signature}`) as `0x${string}` })
    if (signer === '') return { verified: false, reason: 'bad_signature' }
    if (signer !== provider.tee_signer) return { verified: false, reason: 'wrong_signer' }
    if (text !== expected) return { verified: false, reason: 'hash_mismatch' }
    return { verified: true }
  }
}

/** Waits for `p`, at most `ms`: then resolves with `fallback` (the promise itself is left to settle on its own). */
export function within<T>(p: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(fallback), ms)
  })
  return Promise.race([p, late]).finally(() => clearTimeout(timer))
}

async function readLimited(body: AsyncIterable<Buffer>, limit: number): Promise<string> {
  const parts: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    size += chunk.length
    if (size > limit) throw new Error('signature answer too large')
    parts.push(chunk)
  }
  return Buffer.concat(parts).toString('utf8')
}

function isTimeout(err: unknown): boolean {
  const code = (err as { code?: unknown; name?: unknown })?.code
  const name = (err as { name?: unknown })?.name
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || name === 'TimeoutError' || name === 'AbortError'
}
