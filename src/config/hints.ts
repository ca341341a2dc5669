/**
 * Turning schema problems into lines a person can act on: dotted paths, "did you mean …?" by edit distance,
 * and a table of renamed keys (undici's "unsupported keepAlive, use pipelining=0 instead"). Shared by the
 * config loader and the registry file source.
 */

import { z } from 'zod'

/**
 * A file that cannot be used (the config, the registry): `problems` holds one line per problem, each naming
 * its dotted path; the message is `heading` then those lines, indented.
 */
export class FileProblemsError extends Error {
  readonly problems: readonly string[]

  constructor(heading: string, problems?: readonly string[]) {
    super(problems === undefined ? heading : `${heading}:\n` + problems.map((p) => '  ' + p).join('\n'))
    this.problems = problems ?? [heading]
  }
}

/** A key that moved or was renamed: what to write instead. Paths are dotted config paths. */
export interface RenamedKey {
  readonly use: readonly string[]
  /** Optional clause appended after the replacement, e.g. what each replacement means. */
  readonly note?: string
}

export const RENAMED_CONFIG_KEYS: Readonly<Record<string, RenamedKey>> = {
  'server.address': { use: ['server.host'] },
  'server.bind': { use: ['server.host'] },
  'server.listen': { use: ['server.host', 'server.port'] },
  'server.max_body_bytes': { use: ['server.max_json_body_bytes'] },
  'registry.file': { use: ['registry.path'] },
  'registry.type': { use: ['registry.source'] },
  'registry.hot_reload': { use: ['registry.watch'] },
  'store.type': { use: ['store.kind'] },
  'store.driver': { use: ['store.kind'] },
  'store.file': { use: ['store.path'] },
  'limits.rpm': { use: ['limits.requests_per_minute'] },
  'limits.rate_limit': { use: ['limits.requests_per_minute'] },
  'upstream.timeout_ms': {
    use: ['upstream.headers_timeout_ms', 'upstream.body_timeout_ms'],
    note: 'time to first byte, idle gap in a stream',
  },
  'upstream.max_connections': { use: ['upstream.connections_per_provider'] },
  'routing.threads': { use: ['routing.index_threads'] },
  'routing.ewma_alpha': { use: ['routing.latency_ewma_alpha'] },
  'log.log_level': { use: ['log.level'] },
  logging: { use: ['log'] },
  rate_limit: { use: ['limits.requests_per_minute'] },
}

/** "use a.b" / "use a.b or c.d (note)", with each path passed through `spell` (e.g. to an env var name). */
export function renamedHint(entry: RenamedKey, spell: (path: string) => string = (p) => p): string {
  const use = 'use ' + entry.use.map(spell).join(' or ')
  return entry.note === undefined ? use : `${use} (${entry.note})`
}

/** Optimal string alignment distance: Levenshtein plus adjacent transpositions ("prot" → "port" is 1). */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1
  const cols = b.length + 1
  const d: number[] = new Array<number>(rows * cols).fill(0)
  for (let i = 0; i < rows; i++) d[i * cols] = i
  for (let j = 0; j < cols; j++) d[j] = j
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(d[(i - 1) * cols + j]! + 1, d[i * cols + j - 1]! + 1, d[(i - 1) * cols + j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, d[(i - 2) * cols + j - 2]! + 1)
      }
      d[i * cols + j] = best
    }
  }
  return d[rows * cols - 1]!
}

/** The candidate nearest to `word`, if it is near enough to be a plausible typo. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  const lower = word.toLowerCase()
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of candidates) {
    const distance = editDistance(lower, candidate.toLowerCase())
    if (distance < bestDistance) {
      best = candidate
      bestDistance = distance
    }
  }
  if (best === undefined) return undefined
  // A third of the word, at least 2: catches typos and case slips without suggesting unrelated keys.
  const allowed = Math.max(2, Math.floor(Math.max(word.length, best.length) / 3))
  if (bestDistance <= allowed && bestDistance < best.length) return best
  // A shortened or lengthened key ("trust" for "trust_mode"), when only one candidate fits.
  if (lower.length < 3) return undefined
  const related = [...candidates].filter((c) => {
    const other = c.toLowerCase()
    return other.startsWith(lower) || (other.length >= 3 && lower.startsWith(other))
  })
  return related.length === 1 ? related[0] : undefined
}

export type IssuePath = readonly PropertyKey[]

/** `providers[1].models[0].price.prompt`; config paths have no indices, so they come out dotted. */
export function formatPath(path: IssuePath): string {
  let out = ''
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`
    else out += out.length === 0 ? String(segment) : `.${String(segment)}`
  }
  return out
}

/** Strip wrappers (default, optional, transform, …) down to the schema that does the checking. */
export function unwrapSchema(schema: z.ZodType): z.ZodType {
  let current: z.ZodType = schema
  for (;;) {
    if (
      current instanceof z.ZodDefault ||
      current instanceof z.ZodPrefault ||
      current instanceof z.ZodOptional ||
      current instanceof z.ZodNullable
    ) {
      current = current.unwrap() as z.ZodType
    } else if (current instanceof z.ZodPipe) {
      current = current.in as z.ZodType
    } else {
      return current
    }
  }
}

/** The known keys of the object schema found at `path` (array indices step into elements), if any. */
export function objectKeysAt(root: z.ZodType, path: IssuePath): string[] | undefined {
  let current = unwrapSchema(root)
  for (const segment of path) {
    if (typeof segment === 'number' && current instanceof z.ZodArray) {
      current = unwrapSchema(current.element as z.ZodType)
    } else if (typeof segment === 'string' && current instanceof z.ZodObject) {
      const next = (current.shape as Record<string, z.ZodType | undefined>)[segment]
      if (next === undefined) return undefined
      current = unwrapSchema(next)
    } else {
      return undefined
    }
  }
  return current instanceof z.ZodObject ? Object.keys(current.shape as object) : undefined
}

/** Options for `describeIssues`. */
export interface DescribeOptions {
  /** Renamed keys by dotted path (config only). */
  readonly renamed?: Readonly<Record<string, RenamedKey>>
  /** Every leaf path of the schema: a key unknown here but known in another section gets pointed there. */
  readonly leafPaths?: readonly string[]
  /** Adds where a value came from, e.g. "server.port (from SVC_SERVER_PORT)". */
  readonly label?: (path: IssuePath) => string
}

/** One line per problem, each starting with the path it is about. */
export function describeIssues(
  issues: readonly z.core.$ZodIssue[],
  root: z.ZodType,
  options: DescribeOptions = {},
): string[] {
  const label = options.label ?? formatPath
  const lines: string[] = []
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      const known = objectKeysAt(root, issue.path) ?? []
      for (const key of issue.keys) lines.push(unknownKeyLine([...issue.path, key], known, options))
      continue
    }
    const where = label(issue.path)
    lines.push(`${where === '' ? 'top level' : where}: ${describeProblem(issue)}`)
  }
  return lines
}

function unknownKeyLine(path: IssuePath, siblings: readonly string[], options: DescribeOptions): string {
  const dotted = formatPath(path)
  const key = String(path[path.length - 1])
  const parent = path.slice(0, -1)
  const prefix = parent.length === 0 ? '' : formatPath(parent) + '.'
  const renamed = options.renamed?.[dotted]
  if (renamed !== undefined) return `unknown key ${dotted}; ${renamedHint(renamed)}`
  const near = closest(key, siblings)
  if (near !== undefined) return `unknown key ${dotted}; did you mean ${prefix}${near}?`
  const elsewhere = options.leafPaths?.find((leaf) => leaf.endsWith('.' + key))
  if (elsewhere !== undefined) return `unknown key ${dotted}; did you mean ${elsewhere}?`
  return siblings.length > 0
    ? `unknown key ${dotted} (known keys${prefix.length > 0 ? ' of ' + formatPath(parent) : ''}: ${siblings.join(', ')})`
    : `unknown key ${dotted}`
}

function describeProblem(issue: z.core.$ZodIssue): string {
  const got = 'input' in issue && issue.input !== undefined ? ` (got ${show(issue.input)})` : ''
  switch (issue.code) {
    case 'invalid_type': {
      if (issue.input === undefined) return 'required'
      const expected = EXPECTED_NAMES[issue.expected] ?? article(issue.expected)
      return `expected ${expected}${got}`
    }
    case 'too_big':
      if (issue.origin === 'array' || issue.origin === 'string') {
        return `must have at most ${String(issue.maximum)} ${issue.origin === 'array' ? 'items' : 'characters'}`
      }
      return `must be ${issue.inclusive ? '<=' : '<'} ${String(issue.maximum)}${got}`
    case 'too_small':
      if (issue.origin === 'array' || issue.origin === 'string') {
        return Number(issue.minimum) === 1
          ? 'must not be empty'
          : `must have at least ${String(issue.minimum)} ${issue.origin === 'array' ? 'items' : 'characters'}`
      }
      return `must be ${issue.inclusive ? '>=' : '>'} ${String(issue.minimum)}${got}`
    case 'invalid_value':
      return `must be one of ${issue.values.map((v) => show(v)).join(' | ')}${got}`
    default:
      return issue.message
  }
}

// Names a YAML author knows.
const EXPECTED_NAMES: Readonly<Record<string, string>> = { int: 'an integer', object: 'a mapping', array: 'a list' }

function article(word: string): string {
  return /^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`
}

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value)
  if (typeof value === 'bigint') return `${value}n`
  if (Array.isArray(value)) return 'a list'
  if (typeof value === 'object') return 'a mapping'
  return typeof value
}

/** yaml's error messages end in a code frame after a colon; keep the first line ("… at line 3, column 5"). */
export function yamlErrorLine(message: string): string {
  return (message.split('\n')[0] ?? message).replace(/:\s*$/, '')
}
