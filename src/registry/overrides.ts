/**
 * The operator's local overrides of a chain registry (`registry.path` with `registry.source: chain`): per
 * provider address, what the chain does not say (a model's context length, output cap, parameters, formats),
 * a tier to route it on that is at most the derived one, or `disabled: true`. A tier above the derived one is
 * never granted: trust comes from the chain (DESIGN.md §7), an override can only take it away.
 *
 * ```yaml
 * providers:
 *   - address: "0x…"
 *     trust_mode: standard          # lowers a derived verified/private tier; never raises one
 *     disabled: false
 *     models:
 *       - id: qwen-2.5-7b-instruct
 *         context_length: 32768
 *         max_completion_tokens: 4096
 *         supported_parameters: [temperature, top_p, max_tokens]
 *         formats: [openai]
 * ```
 */
import { readFile } from 'node:fs/promises'
import { parseDocument } from 'yaml'
import { z } from 'zod'
import { describeIssues, FileProblemsError, yamlErrorLine } from '../config/index.js'
import { isAddress } from '../vocabulary/address.js'
import { TRUST_MODES, type TrustMode } from '../vocabulary/trust.js'
import type { ChatFormat } from './types.js'

/** An overrides file that cannot be used. */
export class OverridesError extends FileProblemsError {
  override name = 'OverridesError'
}

const ModelOverrideSchema = z.strictObject({
  id: z.string().min(1),
  context_length: z.int().positive().optional(),
  max_completion_tokens: z.int().positive().optional(),
  supported_parameters: z.array(z.string().min(1)).optional(),
  formats: z.array(z.enum(['openai', 'anthropic'])).min(1).optional(),
})

const ProviderOverrideSchema = z.strictObject({
  address: z.string().refine((a) => isAddress(a), { message: 'must be a quoted 0x followed by 40 hex digits' }),
  trust_mode: z.enum(TRUST_MODES).optional(),
  disabled: z.boolean().default(false),
  models: z.array(ModelOverrideSchema).default([]),
})

const OverridesSchema = z.strictObject({
  providers: z.array(ProviderOverrideSchema).default([]),
})

export interface ModelOverride {
  readonly context_length?: number
  readonly max_completion_tokens?: number
  readonly supported_parameters?: readonly string[]
  readonly formats?: readonly ChatFormat[]
}

export interface ProviderOverride {
  readonly trustMode: TrustMode | null
  readonly disabled: boolean
  readonly models: ReadonlyMap<string, ModelOverride>
}

/** Overrides by lower-case provider address. */
export type Overrides = ReadonlyMap<string, ProviderOverride>

export const NO_OVERRIDES: Overrides = new Map()

export function parseOverrides(text: string, origin: string): Overrides {
  const doc = parseDocument(text)
  if (doc.errors.length > 0) throw new OverridesError(`invalid overrides file (${origin})`, doc.errors.map((e) => yamlErrorLine(e.message)))
  const raw: unknown = doc.toJS() ?? {}
  const result = OverridesSchema.safeParse(raw, { reportInput: true })
  if (!result.success) throw new OverridesError(`invalid overrides file (${origin})`, describeIssues(result.error.issues, OverridesSchema))
  const out = new Map<string, ProviderOverride>()
  for (const p of result.data.providers) {
    const models = new Map<string, ModelOverride>()
    for (const m of p.models) {
      const { id, ...rest } = m
      models.set(id, rest)
    }
    out.set(p.address.toLowerCase(), { trustMode: p.trust_mode ?? null, disabled: p.disabled, models })
  }
  return out
}

/**
 * Reads the overrides file, reusing the last result while its text is unchanged. A file that cannot be read
 * or parsed keeps the last good overrides and reports why (once per distinct text).
 */
export class OverridesFile {
  readonly #path: string
  #text: string | null = null
  #current: Overrides = NO_OVERRIDES

  constructor(path: string) {
    this.#path = path
  }

  async read(onError: (err: Error) => void): Promise<Overrides> {
    let text: string
    try {
      text = await readFile(this.#path, 'utf8')
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      // No file is no overrides (it is optional); any other failure keeps what was read last.
      if (code === 'ENOENT') {
        this.#text = null
        this.#current = NO_OVERRIDES
      } else onError(new OverridesError(`cannot read overrides file ${this.#path}: ${code ?? String(err)}`))
      return this.#current
    }
    if (text === this.#text) return this.#current
    this.#text = text
    try {
      this.#current = parseOverrides(text, this.#path)
    } catch (err) {
      onError(err as Error)
    }
    return this.#current
  }
}
