/**
 * A value that satisfies a JSON schema, as the simulated model's tool arguments and structured answers: every
 * property present (required or not), each of its type, enums and consts taken as given, nested objects and
 * arrays filled, `$ref`s into `$defs`/`definitions` followed. Deterministic, so tests can compare it.
 */

type Schema = Record<string, unknown>

// A recursive schema (a tree of nodes) is cut here: past it an optional branch is left out, a required one is null.
const MAX_DEPTH = 8

/** The sample value of `schema` (an empty schema gives an empty object, as the tool-arguments default). */
export function sampleSchema(schema: unknown): unknown {
  const root = isSchema(schema) ? schema : {}
  return sample(root, root, 0) ?? {}
}

function isSchema(value: unknown): value is Schema {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}

function resolveRef(root: Schema, ref: string): Schema | undefined {
  if (!ref.startsWith('#')) return undefined
  let node: unknown = root
  for (const raw of ref.slice(1).split('/')) {
    if (raw === '') continue
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~')
    node = isSchema(node) ? node[key] : undefined
  }
  return isSchema(node) ? node : undefined
}

function sample(schema: Schema, root: Schema, depth: number): unknown {
  if (depth > MAX_DEPTH) return null
  if (typeof schema.$ref === 'string') {
    const target = resolveRef(root, schema.$ref)
    return target === undefined ? null : sample(target, root, depth + 1)
  }
  if (Object.hasOwn(schema, 'const')) return schema.const
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  if (schema.default !== undefined) return schema.default
  for (const key of ['anyOf', 'oneOf'] as const) {
    const options = schema[key]
    if (Array.isArray(options) && options.length > 0) {
      // The first branch that is not null-only: an optional field in OpenAI's strict form is `anyOf [T, null]`.
      const pick = options.find((o) => isSchema(o) && o.type !== 'null') ?? options[0]
      return isSchema(pick) ? sample({ ...withoutKey(schema, key), ...pick }, root, depth + 1) : null
    }
  }
  if (Array.isArray(schema.allOf)) {
    let merged: Schema = withoutKey(schema, 'allOf')
    for (const part of schema.allOf) {
      if (!isSchema(part)) continue
      const resolved = typeof part.$ref === 'string' ? (resolveRef(root, part.$ref) ?? {}) : part
      merged = mergeSchemas(merged, resolved)
    }
    return sample(merged, root, depth + 1)
  }
  let type = schema.type
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? 'null'
  if (type === undefined) type = isSchema(schema.properties) ? 'object' : isSchema(schema.items) ? 'array' : undefined
  switch (type) {
    case 'string':
      return sampleString(schema)
    case 'integer':
      return sampleNumber(schema, true)
    case 'number':
      return sampleNumber(schema, false)
    case 'boolean':
      // false: an agent's tool flags (run in background, skip the sandbox, …) are safest off.
      return false
    case 'null':
      return null
    case 'object':
      return sampleObject(schema, root, depth)
    case 'array':
      return sampleArray(schema, root, depth)
  }
  return null
}

function withoutKey(schema: Schema, key: string): Schema {
  const { [key]: _, ...rest } = schema
  return rest
}

function mergeSchemas(a: Schema, b: Schema): Schema {
  const properties = isSchema(a.properties) || isSchema(b.properties) ? { ...(a.properties as Schema), ...(b.properties as Schema) } : undefined
  const required = [...(Array.isArray(a.required) ? a.required : []), ...(Array.isArray(b.required) ? b.required : [])]
  return { ...a, ...b, ...(properties === undefined ? {} : { properties }), ...(required.length > 0 ? { required } : {}) }
}

function sampleObject(schema: Schema, root: Schema, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  const properties = isSchema(schema.properties) ? schema.properties : {}
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((k): k is string => typeof k === 'string') : [])
  for (const key of Object.keys(properties)) {
    const property = properties[key]
    const value = isSchema(property) ? sample(property, root, depth + 1) : null
    // Too deep to fill: an optional property is left out rather than given a null its type may not allow.
    if (value === null && depth + 1 > MAX_DEPTH && !required.has(key)) continue
    out[key] = value
  }
  for (const key of required) if (!Object.hasOwn(out, key)) out[key] = null
  return out
}

function sampleArray(schema: Schema, root: Schema, depth: number): unknown[] {
  const min = typeof schema.minItems === 'number' && schema.minItems > 1 ? Math.min(schema.minItems, 16) : 1
  if (Array.isArray(schema.prefixItems)) {
    return schema.prefixItems.map((item) => (isSchema(item) ? sample(item, root, depth + 1) : null))
  }
  if (schema.maxItems === 0 || !isSchema(schema.items) || depth + 1 > MAX_DEPTH) return []
  const item = sample(schema.items, root, depth + 1)
  return Array.from({ length: min }, () => item)
}

const FORMATS: Record<string, string> = {
  'date-time': '2025-01-01T00:00:00Z',
  date: '2025-01-01',
  time: '00:00:00Z',
  email: 'sample@example.com',
  uri: 'https://example.com/sample',
  url: 'https://example.com/sample',
  uuid: '00000000-0000-4000-8000-000000000000',
  hostname: 'example.com',
  ipv4: '127.0.0.1',
  ipv6: '::1',
}

function sampleString(schema: Schema): string {
  const formatted = typeof schema.format === 'string' ? FORMATS[schema.format] : undefined
  if (formatted !== undefined) return formatted
  let text = 'sample'
  const min = typeof schema.minLength === 'number' ? schema.minLength : 0
  const max = typeof schema.maxLength === 'number' ? schema.maxLength : Infinity
  while (text.length < min) text += ' sample'
  return text.length > max ? text.slice(0, Math.max(min, max)) : text
}

function sampleNumber(schema: Schema, integer: boolean): number {
  let value = 1
  const low = typeof schema.minimum === 'number' ? schema.minimum : typeof schema.exclusiveMinimum === 'number' ? schema.exclusiveMinimum + (integer ? 1 : 0.5) : undefined
  const high = typeof schema.maximum === 'number' ? schema.maximum : typeof schema.exclusiveMaximum === 'number' ? schema.exclusiveMaximum - (integer ? 1 : 0.5) : undefined
  if (low !== undefined && value < low) value = low
  if (high !== undefined && value > high) value = high
  return integer ? Math.ceil(value) : value
}
