/**
 * `sk-` key administration with an `mk-` key (spec §4.3–4.5): GET and POST /v1/api-keys, PATCH and DELETE
 * /v1/api-keys/:id. A key of another account is answered exactly like a key that does not exist (404).
 *
 * Bodies are validated strictly: a wrong type, an out-of-range value or an unknown field is a 400 that names
 * the field, never silently ignored or replaced by a default.
 */
import type { MgmtAuthenticator } from '../auth/authenticate.js'
import type { Credentials } from '../auth/credentials.js'
import { beginManagement, type ManagementStart } from '../auth/management-stage.js'
import { formatUsd, numberToDecimal, parseUsd } from '../billing/money.js'
import { RouterError } from '../errors.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendJson } from '../server/respond.js'
import { periodStartDay } from '../store/days.js'
import { RESET_PERIODS, type ApiKeyPatch, type ApiKeyRecord, type ResetPeriod, type Store } from '../store/store.js'
import { isAddress } from '../vocabulary/address.js'
import { isTrustMode, TRUST_MODES, type TrustMode } from '../vocabulary/trust.js'
import { parseJsonObject } from '../codecs/json-body.js'
import { invalidField, keyIdOf, parseKeyName } from './key-fields.js'

export interface ApiKeysDeps {
  readonly authenticate: MgmtAuthenticator
  readonly credentials: Credentials
  readonly store: Pick<Store, 'keys' | 'ledger'>
  /**
   * The key's spend in its current reset period as the billing ledger holds it (what its credit limit is
   * enforced against, charges settled a moment ago included), or null when the ledger has no book for it.
   */
  readonly used?: (key: ApiKeyRecord) => bigint | null
  readonly now?: () => number
}

type Handler = (head: RequestHead, reply: Reply) => void

export const CURRENCY = 'USD'
const MAX_LIST = 1000
const MAX_MODEL_ID = 256
/** ISO 8601 date or date-time; a date-time must say its offset (no local-time guessing). */
const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/
const FIELDS = new Set(['name', 'trust_mode', 'credit_limit', 'reset_period', 'expires_at', 'allowed_models', 'allowed_providers'])

const bad = invalidField

function parseTrustMode(value: unknown): TrustMode | null {
  if (value === null || value === '') return null
  if (!isTrustMode(value)) {
    throw new RouterError('invalid_trust_mode', `trust_mode must be one of ${TRUST_MODES.join(', ')} (or null for none)`)
  }
  return value
}

/**
 * Significant digits a JSON number may have and still be read as the amount its text wrote: a double keeps 15
 * exactly (12345678901234567890 arrives as 12345678901234567000). Past that, money must come as a string.
 */
const EXACT_NUMBER_DIGITS = 15

function significantDigits(decimal: string): number {
  let first = -1
  let last = -1
  let count = 0
  for (let i = 0; i < decimal.length; i++) {
    const c = decimal.charCodeAt(i)
    if (c === 46) continue
    if (first === -1 && c !== 48) first = count
    if (c !== 48) last = count
    count++
  }
  return first === -1 ? 0 : last - first + 1
}

function parseCreditLimit(value: unknown): bigint | null {
  if (value === null) return null
  const text = typeof value === 'number' ? numberToDecimal(value) : typeof value === 'string' ? value : null
  if (typeof value === 'number' && text !== null && significantDigits(text) > EXACT_NUMBER_DIGITS) {
    throw bad(`credit_limit as a JSON number must have at most ${EXACT_NUMBER_DIGITS} significant digits to be exact; send it as a decimal string`)
  }
  const atto = text === null ? null : parseUsd(text)
  if (atto === null) throw bad('credit_limit must be a non-negative USD amount as a decimal string (e.g. "25.50") or number, or null')
  return atto
}

function parseResetPeriod(value: unknown): ResetPeriod {
  if (typeof value !== 'string' || !(RESET_PERIODS as readonly string[]).includes(value)) {
    throw bad(`reset_period must be one of ${RESET_PERIODS.join(', ')}`)
  }
  return value as ResetPeriod
}

/**
 * Whether the timestamp's date and time exist as written: Date.parse rolls 2030-02-30 over to 2030-03-02 and
 * 24:30 into the next day, which would store a time the client never sent.
 */
function realCalendarTime(value: string): boolean {
  const year = Number(value.slice(0, 4))
  const month = Number(value.slice(5, 7))
  const day = Number(value.slice(8, 10))
  if (month < 1 || month > 12 || day < 1 || day > new Date(Date.UTC(year, month, 0)).getUTCDate()) return false
  if (value.length === 10) return true
  const hours = Number(value.slice(11, 13))
  const minutes = Number(value.slice(14, 16))
  const seconds = value[16] === ':' ? Number(value.slice(17, 19)) : 0
  if (hours > 23 || minutes > 59 || seconds > 59) return false
  const zone = value.endsWith('Z') ? '' : value.slice(-6)
  return zone === '' || (Number(zone.slice(1, 3)) <= 23 && Number(zone.slice(4, 6)) <= 59)
}

function parseExpiresAt(value: unknown, now: number): number | null {
  if (value === null) return null
  const ms = typeof value === 'string' && ISO_TIMESTAMP.test(value) && realCalendarTime(value) ? Date.parse(value) : NaN
  if (!Number.isFinite(ms)) throw bad('expires_at must be an ISO 8601 timestamp with a time zone (e.g. "2030-01-31T00:00:00Z"), or null')
  if (ms <= now) throw bad('expires_at must be in the future')
  return ms
}

function parseList(field: string, value: unknown, item: (v: unknown, i: number) => string): string[] | null {
  if (value === null) return null
  if (!Array.isArray(value)) throw bad(`${field} must be an array of strings, or null`)
  if (value.length > MAX_LIST) throw bad(`${field} must have at most ${MAX_LIST} entries`)
  const out = value.map(item)
  return out.length === 0 ? null : [...new Set(out)]
}

function parseModels(value: unknown): string[] | null {
  return parseList('allowed_models', value, (v, i) => {
    if (typeof v !== 'string' || v.length === 0 || v.length > MAX_MODEL_ID) {
      throw bad(`allowed_models[${i}] must be a non-empty model id of at most ${MAX_MODEL_ID} characters`)
    }
    return v
  })
}

function parseProviders(value: unknown): string[] | null {
  return parseList('allowed_providers', value, (v, i) => {
    if (typeof v !== 'string' || !isAddress(v)) throw bad(`allowed_providers[${i}] must be a provider address (0x followed by 40 hex digits)`)
    return v.toLowerCase()
  })
}

/** The settable fields of a create or update body; absent fields stay undefined. */
export function parseKeyFields(body: Record<string, unknown>, now: number): ApiKeyPatch {
  for (const field of Object.keys(body)) {
    if (!FIELDS.has(field)) throw bad(`unknown field ${JSON.stringify(field)}; settable fields: ${[...FIELDS].join(', ')}`)
  }
  const has = (f: string): boolean => body[f] !== undefined
  return {
    ...(has('name') && { name: parseKeyName(body.name) }),
    ...(has('trust_mode') && { trustMode: parseTrustMode(body.trust_mode) }),
    ...(has('credit_limit') && { creditLimit: parseCreditLimit(body.credit_limit) }),
    ...(has('reset_period') && { resetPeriod: parseResetPeriod(body.reset_period) }),
    ...(has('expires_at') && { expiresAt: parseExpiresAt(body.expires_at, now) }),
    ...(has('allowed_models') && { allowedModels: parseModels(body.allowed_models) }),
    ...(has('allowed_providers') && { allowedProviders: parseProviders(body.allowed_providers) }),
  }
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString()
}

/** The key object of spec §2.1 (without `key`). */
export function keyJson(key: ApiKeyRecord, used: bigint, now: number): Record<string, unknown> {
  const expired = key.expiresAt !== null && key.expiresAt <= now
  return {
    key_id: key.id,
    key_preview: key.preview,
    name: key.name,
    trust_mode: key.trustMode ?? '',
    status: key.revoked ? 'revoked' : expired ? 'expired' : 'active',
    revoked: key.revoked,
    credit_limit: key.creditLimit === null ? null : formatUsd(key.creditLimit),
    used: formatUsd(used),
    currency: CURRENCY,
    reset_period: key.resetPeriod,
    expires_at: iso(key.expiresAt),
    allowed_models: key.allowedModels,
    allowed_providers: key.allowedProviders,
    created_at: new Date(key.createdAt).toISOString(),
  }
}

/**
 * What each key has spent in its current reset period (00:00 UTC; weeks from Monday, months from the 1st):
 * the billing ledger's figure when it holds the key, else the store's daily roll-up from the period's first day.
 */
async function usedByKey(deps: ApiKeysDeps, accountId: string, keys: readonly ApiKeyRecord[], now: number): Promise<Map<string, bigint>> {
  const store = deps.store
  const used = new Map<string, bigint>()
  const bySince = new Map<string | null, ApiKeyRecord[]>()
  for (const key of keys) {
    const live = deps.used?.(key) ?? null
    if (live !== null) {
      used.set(key.id, live)
      continue
    }
    const since = periodStartDay(key.resetPeriod, now)
    bySince.set(since, [...(bySince.get(since) ?? []), key])
  }
  for (const [since, group] of bySince) {
    const spend = await store.ledger.spendByKey(accountId, since)
    for (const key of group) used.set(key.id, spend.get(key.id) ?? 0n)
  }
  return used
}

function notFound(id: string): RouterError {
  return new RouterError('api_key_not_found', `no API key ${JSON.stringify(id)} in this account`)
}

export interface ApiKeysSurface {
  readonly list: Handler
  readonly create: Handler
  readonly update: Handler
  readonly revoke: Handler
}

export function createApiKeys(deps: ApiKeysDeps): ApiKeysSurface {
  const now = deps.now ?? Date.now

  function body(start: ManagementStart): Record<string, unknown> {
    const parsed = parseJsonObject(start.body ?? Buffer.alloc(0))
    if (parsed instanceof RouterError) throw parsed
    return parsed
  }

  async function one(key: ApiKeyRecord, at: number): Promise<Record<string, unknown>> {
    const used = await usedByKey(deps, key.accountId, [key], at)
    return keyJson(key, used.get(key.id) ?? 0n, at)
  }

  async function list({ reply, principal, headers }: ManagementStart): Promise<void> {
    const at = now()
    const keys = await deps.store.keys.listApiKeys(principal.accountId)
    const used = await usedByKey(deps, principal.accountId, keys, at)
    const data = keys.map((k) => keyJson(k, used.get(k.id) ?? 0n, at))
    sendJson(reply, 200, JSON.stringify({ object: 'list', data }), headers)
  }

  async function create(start: ManagementStart): Promise<void> {
    const fields = parseKeyFields(body(start), now())
    if (fields.name === undefined) throw bad('name is required')
    const { record, secret } = await deps.credentials.issueApiKey(start.principal.accountId, { ...fields, name: fields.name })
    const json = keyJson(record, 0n, now())
    // `key` right after `key_id`: the secret, shown this once.
    sendJson(start.reply, 201, JSON.stringify({ key_id: json.key_id, key: secret, ...json }), start.headers)
  }

  async function update(start: ManagementStart): Promise<void> {
    const id = keyIdOf(start.head, notFound)
    const fields = parseKeyFields(body(start), now())
    if (Object.keys(fields).length === 0) throw bad(`nothing to update: send at least one of ${[...FIELDS].join(', ')}`)
    const record = await deps.credentials.updateApiKey(start.principal.accountId, id, fields)
    if (record === null) throw notFound(id)
    sendJson(start.reply, 200, JSON.stringify(await one(record, now())), start.headers)
  }

  async function revoke(start: ManagementStart): Promise<void> {
    const id = keyIdOf(start.head, notFound)
    const before = await deps.store.keys.getApiKey(start.principal.accountId, id)
    if (before === null) throw notFound(id)
    const record = await deps.credentials.revokeApiKey(start.principal.accountId, id)
    if (record === null) throw notFound(id)
    const message = before.revoked ? 'API key was already revoked' : 'API key revoked'
    sendJson(start.reply, 200, JSON.stringify({ message, key_id: record.id }), start.headers)
  }

  return {
    list: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:read', false, list),
    create: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:create', true, create),
    update: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:manage', true, update),
    revoke: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:manage', false, revoke),
  }
}
