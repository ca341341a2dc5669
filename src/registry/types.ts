/**
 * The registry as data: providers are records, not classes (STYLE.md). A registry source (the YAML file now,
 * the ledger later) produces a frozen `RegistrySnapshot`; routing turns it into live offers.
 */
import type { TrustMode } from '../vocabulary/trust.js'

export type ModelType = 'chatbot' | 'text-to-image' | 'speech-to-text'
/** openai: /v1/chat/completions; anthropic: /v1/messages; responses: /v1/responses (besides one of the others). */
export type ChatFormat = 'openai' | 'anthropic' | 'responses'
export type Verifiability = 'TeeML' | 'TeeTLS' | ''

/** Prices exactly as written in the registry, as decimal strings (never floats). */
export interface ModelPrice {
  /** USD per 1M prompt tokens. */
  readonly prompt?: string
  /** USD per 1M completion tokens. */
  readonly completion?: string
  /** USD per generated image. */
  readonly image?: string
  /** USD per second of audio. */
  readonly audio_second?: string
}

export interface RegistryModel {
  readonly id: string
  readonly type: ModelType
  /** Chat surfaces that accept the model; empty for non-chat models. */
  readonly formats: readonly ChatFormat[]
  readonly context_length: number | null
  /** Advertised output capacity; null when the provider never reported one. */
  readonly max_completion_tokens: number | null
  readonly supported_parameters: readonly string[]
  readonly price: ModelPrice
  /** A chain service's own prices, neuron per unit (bigint decimal strings): what the router owes it (src/settlement/). */
  readonly neuron_price?: { readonly input: string; readonly output: string }
}

/** Settings for a simulated provider the server boots itself on `url` (demo and tests). */
export interface SimulateSettings {
  readonly ttft_ms: number
  readonly tokens_per_s: number
}

export interface RegistryProvider {
  /** Lower-case 0x-prefixed 40-hex address; the pin header's value. */
  readonly address: string
  /** OpenAI-compatible base URL without the /v1 suffix, e.g. http://127.0.0.1:9001 */
  readonly url: string
  /**
   * Where, below `url`, the routes the router calls `/v1/…` live: '/v1' for a registry file's provider,
   * '/v1/proxy' for a service read from the chain (0G's broker serves `{url}/v1/proxy/chat/completions`).
   */
  readonly api_path: string
  readonly trust_mode: TrustMode
  readonly verifiability: Verifiability
  readonly tee_type: string
  readonly tee_verifier: string
  /**
   * Lower-case address whose EIP-191 signatures on answers are checked (src/tee/), '' for none: on chain, the
   * service's teeSignerAddress once the contract's owner acknowledged it.
   */
  readonly tee_signer: string
  readonly models: readonly RegistryModel[]
  readonly simulate: SimulateSettings | null
}

export interface RegistrySnapshot {
  readonly providers: readonly RegistryProvider[]
  /** Monotonic version, bumped on every successful (re)load. */
  readonly version: number
}

/** What a registry source reports after its first snapshot. */
export interface RegistrySourceHandlers {
  /** A new snapshot, swapped in whole; its version is higher than any before. */
  onChange(snapshot: RegistrySnapshot): void
  /** A read failed or was rejected; the previous snapshot stays in force. */
  onError(err: Error): void
}

/**
 * A registry source (DESIGN.md §7): the YAML file or the InferenceServing contract. `start` resolves with the
 * first snapshot (a source that cannot read one yet may resolve with an empty one and say so in `ready`);
 * later snapshots go to the handlers.
 */
export interface RegistrySource {
  start(handlers: RegistrySourceHandlers): Promise<RegistrySnapshot>
  /** Why the source has no usable snapshot yet (/readyz), or null once it has one. */
  notReadyReason(): string | null
  close(): void
}
