/**
 * The registry file's schema (DESIGN.md §3): parses a provider list into `RegistryProvider` records, with
 * defaults applied, addresses lower-cased, URLs normalised and prices kept as exact decimal strings.
 * Cross-record rules (unique addresses, unique model ids) live in `duplicateIssues`, on the raw input.
 */

import { z } from 'zod'
import { numberToDecimal, parseUsd, perTokenPrice } from '../billing/money.js'
import { isAddress } from '../vocabulary/address.js'
import { TRUST_MODES } from '../vocabulary/trust.js'
import type { ChatFormat, ModelPrice, ModelType, RegistryModel, RegistryProvider } from './types.js'

const DECIMAL = /^\d+(\.\d+)?$/

/** 0x + 40 hex, stored lower-case. An unquoted 0x… is a YAML hex integer, hence the special message. */
const address = z.unknown().transform((value, ctx) => {
  const problem =
    value === undefined
      ? 'required'
      : typeof value === 'number'
        ? 'must be a quoted string: YAML reads an unquoted 0x… as a number'
        : typeof value !== 'string' || !isAddress(value)
          ? `must be 0x followed by 40 hex digits (got ${JSON.stringify(value)})`
          : undefined
  if (problem !== undefined) {
    ctx.addIssue({ code: 'custom', message: problem, input: value })
    return z.NEVER
  }
  return (value as string).toLowerCase()
})

/** http(s) origin with an optional path; no trailing slash, no trailing /v1 (the route appends it). */
const providerUrl = z.string().transform((text, ctx) => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    ctx.addIssue({ code: 'custom', message: `not a URL (got ${JSON.stringify(text)})`, input: text })
    return z.NEVER
  }
  const problem =
    url.protocol !== 'http:' && url.protocol !== 'https:'
      ? 'must be an http:// or https:// URL'
      : url.username !== '' || url.password !== ''
        ? 'must not contain credentials'
        : url.search !== '' || url.hash !== ''
          ? 'must not have a query or a fragment'
          : undefined
  if (problem !== undefined) {
    ctx.addIssue({ code: 'custom', message: `${problem} (got ${JSON.stringify(text)})`, input: text })
    return z.NEVER
  }
  const path = url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '').replace(/\/+$/, '')
  return `${url.protocol}//${url.host}${path}`
})

/**
 * A price as a YAML number or string → the decimal string the user meant (`1e-9` → "0.000000001"). Which
 * prices a model needs depends on its type: checked on the model.
 */
const priceValue = z.unknown().transform((value, ctx): string => {
  if (typeof value !== 'number' && typeof value !== 'string') {
    ctx.addIssue({ code: 'custom', message: 'must be a decimal number or string, e.g. 0.10 or "0.10"', input: value })
    return z.NEVER
  }
  const text = typeof value === 'number' ? numberToDecimal(value) : value.trim()
  if (text === null || !DECIMAL.test(text)) {
    const shown = typeof value === 'number' ? String(value) : JSON.stringify(value)
    ctx.addIssue({ code: 'custom', message: `must be a non-negative decimal (got ${shown})`, input: value })
    return z.NEVER
  }
  return text
})

const PriceSchema = z.strictObject({
  prompt: priceValue.optional(),
  completion: priceValue.optional(),
  image: priceValue.optional(),
  audio_second: priceValue.optional(),
})

type PriceKey = keyof ModelPrice
const TOKEN_PRICES: ReadonlySet<PriceKey> = new Set(['prompt', 'completion'])
const PRICE_KEYS_BY_TYPE: Readonly<Record<ModelType, readonly PriceKey[]>> = {
  chatbot: ['prompt', 'completion'],
  'text-to-image': ['image'],
  'speech-to-text': ['audio_second'],
}

const positiveIntOrNull = z
  .int()
  .positive()
  .nullish()
  .transform((v) => v ?? null)

const ModelSchema = z
  .strictObject({
    id: z.string().min(1),
    type: z.enum(['chatbot', 'text-to-image', 'speech-to-text']).default('chatbot'),
    formats: z.array(z.enum(['openai', 'anthropic', 'responses'])).optional(),
    context_length: positiveIntOrNull,
    max_completion_tokens: positiveIntOrNull,
    supported_parameters: z.array(z.string().min(1)).default([]),
    price: PriceSchema,
  })
  .superRefine((model, ctx) => {
    const wanted = PRICE_KEYS_BY_TYPE[model.type]
    for (const key of wanted) {
      if (model.price[key] === undefined) {
        ctx.addIssue({ code: 'custom', path: ['price', key], message: `required for a ${model.type} model` })
      }
    }
    for (const [key, value] of Object.entries(model.price) as [PriceKey, string | undefined][]) {
      if (value === undefined) continue
      if (!wanted.includes(key)) {
        ctx.addIssue({
          code: 'custom',
          path: ['price', key],
          message: `not a price of a ${model.type} model (it takes ${wanted.join(' and ')})`,
        })
      } else if (TOKEN_PRICES.has(key) ? perTokenPrice(value) === null : parseUsd(value) === null) {
        const most = TOKEN_PRICES.has(key) ? '12 for a price per 1M tokens' : '18'
        ctx.addIssue({ code: 'custom', path: ['price', key], message: `too many decimals: at most ${most} (got ${value})` })
      }
    }
    if (model.formats !== undefined) {
      if (model.type !== 'chatbot' && model.formats.length > 0) {
        ctx.addIssue({ code: 'custom', path: ['formats'], message: `only chatbot models have formats (this is ${model.type})` })
      } else if (model.type === 'chatbot' && !model.formats.includes('openai') && !model.formats.includes('anthropic')) {
        // responses is spoken besides one of them: chat and messages requests reach the model through those.
        ctx.addIssue({ code: 'custom', path: ['formats'], message: 'a chatbot needs at least one of openai, anthropic (responses is in addition to them)' })
      }
      const seen = new Set<string>()
      for (const [i, format] of model.formats.entries()) {
        if (seen.has(format)) ctx.addIssue({ code: 'custom', path: ['formats', i], message: `duplicate format ${format}` })
        seen.add(format)
      }
    }
    const params = new Set<string>()
    for (const [i, param] of model.supported_parameters.entries()) {
      if (params.has(param)) {
        ctx.addIssue({ code: 'custom', path: ['supported_parameters', i], message: `duplicate parameter ${param}` })
      }
      params.add(param)
    }
  })
  .transform((model): RegistryModel => {
    const price: { -readonly [K in PriceKey]?: string } = {}
    for (const key of PRICE_KEYS_BY_TYPE[model.type]) price[key] = model.price[key]
    const formats: readonly ChatFormat[] = model.formats ?? (model.type === 'chatbot' ? ['openai'] : [])
    return {
      id: model.id,
      type: model.type,
      formats,
      context_length: model.context_length,
      max_completion_tokens: model.max_completion_tokens,
      supported_parameters: model.supported_parameters,
      price,
    }
  })

const SimulateSchema = z.strictObject({
  ttft_ms: z.int().min(0).default(20),
  tokens_per_s: z.number().positive().default(200),
})

const ProviderSchema = z
  .strictObject({
    address,
    url: providerUrl,
    trust_mode: z.enum(TRUST_MODES).default('standard'),
    verifiability: z.enum(['TeeML', 'TeeTLS', '']).default(''),
    tee_type: z.string().default(''),
    tee_verifier: z.string().default(''),
    /** The address that signs this provider's answers (src/tee/), when it signs them. */
    tee_signer: address.optional(),
    models: z.array(ModelSchema).min(1),
    simulate: SimulateSchema.nullish().transform((s) => s ?? null),
  })
  .transform(
    (p): RegistryProvider => ({
      address: p.address,
      url: p.url,
      api_path: '/v1',
      trust_mode: p.trust_mode,
      verifiability: p.verifiability,
      tee_type: p.tee_type,
      tee_verifier: p.tee_verifier,
      tee_signer: p.tee_signer ?? '',
      models: p.models,
      simulate: p.simulate,
    }),
  )

export const RegistryFileSchema = z.strictObject({
  providers: z.array(ProviderSchema),
})

/** A problem found outside the schema, in the same shape as a zod issue's path and message. */
export interface RawIssue {
  readonly path: readonly (string | number)[]
  readonly message: string
}

/**
 * Duplicate provider addresses (case-insensitive) and duplicate model ids within a provider. Checked on the
 * raw input so they are reported even when other parts of the file are broken.
 */
export function duplicateIssues(raw: unknown): RawIssue[] {
  const issues: RawIssue[] = []
  const providers = isRecord(raw) && Array.isArray(raw.providers) ? (raw.providers as unknown[]) : []
  const addresses = new Map<string, number>()
  for (const [i, provider] of providers.entries()) {
    if (!isRecord(provider)) continue
    if (typeof provider.address === 'string' && isAddress(provider.address)) {
      const key = provider.address.toLowerCase()
      const first = addresses.get(key)
      if (first === undefined) addresses.set(key, i)
      else issues.push({ path: ['providers', i, 'address'], message: `duplicate address, also providers[${first}]` })
    }
    if (!Array.isArray(provider.models)) continue
    const ids = new Map<string, number>()
    for (const [j, model] of (provider.models as unknown[]).entries()) {
      if (!isRecord(model) || typeof model.id !== 'string') continue
      const first = ids.get(model.id)
      if (first === undefined) ids.set(model.id, j)
      else issues.push({ path: ['providers', i, 'models', j, 'id'], message: `duplicate model id ${model.id}, also models[${first}]` })
    }
  }
  return issues
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
