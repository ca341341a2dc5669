/**
 * `mk-` key administration from a signed-in console session (spec §2.2, §4.1, §5): GET and POST
 * /v1/management-keys, PATCH and DELETE /v1/management-keys/:id, shaped like /v1/api-keys. Only a wallet
 * session may call these (auth/session-auth.ts `sessionOnly`): a bearer key of either kind gets 403
 * access_denied, so an mk- key never makes or manages mk- keys. A key of another account is answered
 * exactly like one that does not exist (404). The secret is in the create response only.
 */
import type { MgmtAuthenticator } from '../auth/authenticate.js'
import type { Credentials } from '../auth/credentials.js'
import { beginManagement, type ManagementStart } from '../auth/management-stage.js'
import { normalizeSourceIp } from '../auth/source-ip.js'
import { parseJsonObject } from '../codecs/json-body.js'
import { RouterError } from '../errors.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendJson } from '../server/respond.js'
import { SCOPES, type MgmtKeyPatch, type MgmtKeyRecord, type Scope, type Store } from '../store/store.js'
import { invalidField, keyIdOf, parseKeyName } from './key-fields.js'

export interface ManagementKeysDeps {
  /** The session-only authenticator. */
  readonly authenticate: MgmtAuthenticator
  readonly credentials: Credentials
  readonly store: Pick<Store, 'keys'>
}

type Handler = (head: RequestHead, reply: Reply) => void

const FIELDS = new Set(['name', 'scopes'])

const bad = invalidField

function parseScopes(value: unknown): Scope[] {
  if (!Array.isArray(value)) throw bad(`scopes must be an array of ${SCOPES.join(', ')}`)
  const out = value.map((v, i) => {
    if (typeof v !== 'string' || !(SCOPES as readonly string[]).includes(v)) throw bad(`scopes[${i}] must be one of ${SCOPES.join(', ')}`)
    return v as Scope
  })
  if (out.length === 0) throw bad('scopes must name at least one scope')
  return [...new Set(out)]
}

/** The settable fields of a create or update body; absent fields stay undefined. */
export function parseMgmtKeyFields(body: Record<string, unknown>): MgmtKeyPatch {
  for (const field of Object.keys(body)) {
    if (!FIELDS.has(field)) throw bad(`unknown field ${JSON.stringify(field)}; settable fields: ${[...FIELDS].join(', ')}`)
  }
  return {
    ...(body.name !== undefined && { name: parseKeyName(body.name) }),
    ...(body.scopes !== undefined && { scopes: parseScopes(body.scopes) }),
  }
}

/** A management key as the console shows it: never its secret or hash. */
export function mgmtKeyJson(key: MgmtKeyRecord): Record<string, unknown> {
  return {
    key_id: key.id,
    key_preview: key.preview,
    name: key.name,
    scopes: key.scopes,
    status: key.revoked ? 'revoked' : 'active',
    revoked: key.revoked,
    created_at: new Date(key.createdAt).toISOString(),
    last_used_at: key.lastUsedAt === null ? null : new Date(key.lastUsedAt).toISOString(),
    // Written normalized since the audit began; normalized again for records of older writers.
    last_source_ip: key.lastSourceIp === null || key.lastSourceIp === '' ? null : normalizeSourceIp(key.lastSourceIp),
  }
}

function notFound(id: string): RouterError {
  return new RouterError('api_key_not_found', `no management key ${JSON.stringify(id)} in this account`)
}

function body(start: ManagementStart): Record<string, unknown> {
  const parsed = parseJsonObject(start.body ?? Buffer.alloc(0))
  if (parsed instanceof RouterError) throw parsed
  return parsed
}

export interface ManagementKeysSurface {
  readonly list: Handler
  readonly create: Handler
  readonly update: Handler
  readonly revoke: Handler
}

export function createManagementKeys(deps: ManagementKeysDeps): ManagementKeysSurface {
  async function list({ reply, principal, headers }: ManagementStart): Promise<void> {
    const keys = await deps.store.keys.listMgmtKeys(principal.accountId)
    sendJson(reply, 200, JSON.stringify({ object: 'list', data: keys.map(mgmtKeyJson) }), headers)
  }

  async function create(start: ManagementStart): Promise<void> {
    const fields = parseMgmtKeyFields(body(start))
    if (fields.name === undefined) throw bad('name is required')
    if (fields.scopes === undefined) throw bad(`scopes is required: one or more of ${SCOPES.join(', ')}`)
    const { record, secret } = await deps.credentials.issueMgmtKey(start.principal.accountId, fields.name, fields.scopes)
    const json = mgmtKeyJson(record)
    sendJson(start.reply, 201, JSON.stringify({ key_id: json.key_id, key: secret, ...json }), start.headers)
  }

  async function update(start: ManagementStart): Promise<void> {
    const id = keyIdOf(start.head, notFound)
    const fields = parseMgmtKeyFields(body(start))
    if (Object.keys(fields).length === 0) throw bad(`nothing to update: send at least one of ${[...FIELDS].join(', ')}`)
    const record = await deps.credentials.updateMgmtKey(start.principal.accountId, id, fields)
    if (record === null) throw notFound(id)
    sendJson(start.reply, 200, JSON.stringify(mgmtKeyJson(record)), start.headers)
  }

  async function revoke(start: ManagementStart): Promise<void> {
    const id = keyIdOf(start.head, notFound)
    const before = await deps.store.keys.getMgmtKey(start.principal.accountId, id)
    if (before === null) throw notFound(id)
    const record = await deps.credentials.revokeMgmtKey(id)
    if (record === null) throw notFound(id)
    const message = before.revoked ? 'management key was already revoked' : 'management key revoked'
    sendJson(start.reply, 200, JSON.stringify({ message, key_id: record.id }), start.headers)
  }

  // Every route needs only the session (it acts with all scopes); the scope argument is not consulted.
  return {
    list: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:read', false, list),
    create: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:create', true, create),
    update: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:manage', true, update),
    revoke: (head, reply) => beginManagement(deps.authenticate, head, reply, 'keys:manage', false, revoke),
  }
}
