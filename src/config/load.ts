/**
 * Load the configuration once: the YAML file (optional), then `SVC_*` overrides from the env the caller passes,
 * validated against `ConfigSchema`, paths made absolute, deep-frozen. Every problem is reported at once.
 */

import { readFileSync } from 'node:fs'
import { dirname, isAbsolute, resolve } from 'node:path'
import { parseDocument } from 'yaml'
import { z } from 'zod'
import { ConfigSchema, PATH_KEYS, type Config, type DeepReadonly } from './schema.js'
import {
  RENAMED_CONFIG_KEYS,
  closest,
  describeIssues,
  FileProblemsError,
  formatPath,
  renamedHint,
  unwrapSchema,
  yamlErrorLine,
  type IssuePath,
} from './hints.js'

/** A config that cannot be used. */
export class ConfigError extends FileProblemsError {
  override name = 'ConfigError'
}

export interface LoadConfigOptions {
  /** YAML file; relative to process.cwd(). Without it, every key takes its default. */
  readonly file?: string
  /** Usually `process.env`; only `SVC_*` names are read. */
  readonly env?: Readonly<Record<string, string | undefined>>
}

type LeafKind = 'number' | 'boolean' | 'string' | 'list'

/** A configurable value: its dotted path, its env var name, and how to coerce an env string for it. */
export interface ConfigLeaf {
  readonly path: string
  readonly segments: readonly string[]
  readonly env: string
  readonly kind: LeafKind
}

const ENV_PREFIX = 'SVC_'

/** The env var that overrides a dotted path: `routing.latency_ewma_alpha` → `SVC_ROUTING_LATENCY_EWMA_ALPHA`. */
export function envName(path: string): string {
  return ENV_PREFIX + path.replaceAll('.', '_').toUpperCase()
}

function leavesOf(schema: z.ZodType, prefix: readonly string[]): ConfigLeaf[] {
  const inner = unwrapSchema(schema)
  if (inner instanceof z.ZodObject) {
    const shape = inner.shape as Record<string, z.ZodType>
    return Object.entries(shape).flatMap(([key, child]) => leavesOf(child, [...prefix, key]))
  }
  const path = prefix.join('.')
  let kind: LeafKind
  if (inner instanceof z.ZodNumber) kind = 'number'
  else if (inner instanceof z.ZodBoolean) kind = 'boolean'
  else if (inner instanceof z.ZodString || inner instanceof z.ZodEnum) kind = 'string'
  else if (inner instanceof z.ZodArray) kind = 'list'
  else throw new Error(`config schema: no env coercion for ${path}`)
  return [{ path, segments: prefix, env: envName(path), kind }]
}

/** Every leaf of the schema, enumerated once: env names are resolved against this, never by splitting on `_`. */
export const CONFIG_LEAVES: readonly ConfigLeaf[] = leavesOf(ConfigSchema, [])

const LEAF_BY_ENV = new Map(CONFIG_LEAVES.map((leaf) => [leaf.env, leaf]))
if (LEAF_BY_ENV.size !== CONFIG_LEAVES.length) throw new Error('config schema: two keys map to the same SVC_ name')
const LEAF_PATHS = CONFIG_LEAVES.map((leaf) => leaf.path)
const ENV_NAMES = CONFIG_LEAVES.map((leaf) => leaf.env)
const RENAMED_BY_ENV = new Map(Object.entries(RENAMED_CONFIG_KEYS).map(([path, entry]) => [envName(path), entry]))

/** Read, override, validate, resolve and freeze. Throws `ConfigError` listing every problem. */
export function loadConfig(options: LoadConfigOptions = {}): Config {
  const cwd = process.cwd()
  const problems: string[] = []
  const file = options.file === undefined ? undefined : resolve(cwd, options.file)
  // Relative paths in the file, and the defaults when there is a file, are relative to the file's directory.
  const baseDir = file === undefined ? cwd : dirname(file)

  const raw = file === undefined ? {} : readConfigFile(file, problems)
  const fromEnv = applyEnv(raw, options.env ?? {}, cwd, problems)

  const result = ConfigSchema.safeParse(raw, { reportInput: true })
  if (!result.success) {
    const label = (path: IssuePath): string => {
      const dotted = formatPath(path)
      const env = fromEnv.get(dotted)
      return env === undefined ? dotted : `${dotted} (from ${env})`
    }
    problems.push(
      ...describeIssues(result.error.issues, ConfigSchema, { renamed: RENAMED_CONFIG_KEYS, leafPaths: LEAF_PATHS, label }),
    )
  }
  if (problems.length > 0 || !result.success) {
    const where = file === undefined ? '' : ` (${file})`
    throw new ConfigError(`invalid configuration${where}`, problems)
  }

  const config = result.data
  for (const dotted of PATH_KEYS) {
    const [section, key] = dotted.split('.') as [string, string]
    const holder = (config as unknown as Record<string, Record<string, string>>)[section]!
    holder[key] = resolvePath(baseDir, holder[key]!)
  }
  return deepFreeze(config)
}

/**
 * A configured path made absolute against `base`; '' (unset) and ':memory:' (SQLite's name for an in-memory
 * database, no file at all) stay as they are.
 */
function resolvePath(base: string, value: string): string {
  return value === '' || value === ':memory:' || isAbsolute(value) ? value : resolve(base, value)
}

/** Object.freeze, recursively: the returned value cannot be changed at any depth. */
export function deepFreeze<T>(value: T): DeepReadonly<T> {
  if (typeof value === 'object' && value !== null) {
    for (const key of Reflect.ownKeys(value)) deepFreeze((value as Record<PropertyKey, unknown>)[key])
    Object.freeze(value)
  }
  return value as DeepReadonly<T>
}

function readConfigFile(file: string, problems: string[]): Record<string, unknown> {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    problems.push(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`)
    return {}
  }
  const doc = parseDocument(text)
  if (doc.errors.length > 0) {
    // yaml's messages end in a code frame; the first line names the problem and its line and column.
    for (const err of doc.errors) problems.push(`${file}: ${yamlErrorLine(err.message)}`)
    return {}
  }
  const value: unknown = doc.toJS()
  if (value === null || value === undefined) return {}
  if (typeof value !== 'object' || Array.isArray(value)) {
    problems.push(`${file}: expected a mapping of sections at the top level`)
    return {}
  }
  const raw = value as Record<string, unknown>
  // A section written with nothing under it (`server:`) reads as null: treat it as absent, i.e. all defaults.
  for (const [key, section] of Object.entries(raw)) if (section === null && key in ConfigSchema.shape) delete raw[key]
  return raw
}

/** Write `SVC_*` values into `raw` (env wins). Returns dotted path → env var name, for error messages. */
function applyEnv(
  raw: Record<string, unknown>,
  env: Readonly<Record<string, string | undefined>>,
  cwd: string,
  problems: string[],
): Map<string, string> {
  const applied = new Map<string, string>()
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith(ENV_PREFIX) || value === undefined) continue
    const leaf = LEAF_BY_ENV.get(name)
    if (leaf === undefined) {
      problems.push(unknownEnvLine(name))
      continue
    }
    const coerced = coerce(leaf, value, cwd)
    if (coerced.problem !== undefined) {
      problems.push(`${name}: ${coerced.problem}`)
      continue
    }
    if (setIn(raw, leaf.segments, coerced.value)) applied.set(leaf.path, name)
  }
  return applied
}

function unknownEnvLine(name: string): string {
  const renamed = RENAMED_BY_ENV.get(name)
  if (renamed !== undefined) return `unknown environment variable ${name}; ${renamedHint(renamed, envName)}`
  const near = closest(name, ENV_NAMES)
  return near === undefined
    ? `unknown environment variable ${name} (SVC_* names are config paths, e.g. SVC_SERVER_PORT)`
    : `unknown environment variable ${name}; did you mean ${near}?`
}

const NUMBER_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/

function coerce(leaf: ConfigLeaf, value: string, cwd: string): { value?: unknown; problem?: string } {
  const text = value.trim()
  switch (leaf.kind) {
    case 'number':
      return NUMBER_TEXT.test(text) ? { value: Number(text) } : { problem: `expected a number (got ${JSON.stringify(value)})` }
    case 'boolean':
      if (text === 'true' || text === '1') return { value: true }
      if (text === 'false' || text === '0') return { value: false }
      return { problem: `expected true or false (got ${JSON.stringify(value)})` }
    case 'string':
      // A relative path given in the environment is relative to where the process was started.
      if (PATH_KEYS.includes(leaf.path)) return { value: resolvePath(cwd, value) }
      return { value }
    case 'list':
      // Comma-separated; blank: an empty list.
      return { value: text === '' ? [] : text.split(',').map((item) => item.trim()) }
  }
}

/** Set a nested value, creating missing sections. A section the file gave as a non-mapping is left for the schema to report. */
function setIn(target: Record<string, unknown>, segments: readonly string[], value: unknown): boolean {
  let node = target
  for (const segment of segments.slice(0, -1)) {
    const next = node[segment]
    if (next === undefined || next === null) node = node[segment] = {}
    else if (typeof next === 'object' && !Array.isArray(next)) node = next as Record<string, unknown>
    else return false
  }
  node[segments[segments.length - 1]!] = value
  return true
}
