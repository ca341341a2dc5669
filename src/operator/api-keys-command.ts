/**
 * `svc-router api-keys …`: sk- keys of an account from the operator's shell (DESIGN.md §2), the same
 * operations as the /v1/api-keys endpoints without needing an mk- key. The secret is printed once, at creation.
 */
import { Credentials } from '../auth/credentials.js'
import { formatUsd } from '../billing/money.js'
import { RESET_PERIODS, type ApiKeyRecord, type ResetPeriod } from '../store/store.js'
import { TRUST_MODES, type TrustMode } from '../vocabulary/trust.js'
import { iso, OperatorUsageError, parseCommand, table, usd, wallet, withStore, type OperatorIo } from './commands.js'

export const API_KEYS_USAGE = `usage: svc-router api-keys <command> [--config FILE]

commands:
  create <wallet> --name NAME [--trust-mode T] [--credit-limit USD] [--reset-period P]
                                    issue an sk- key; its secret is printed this once
  list <wallet>                     the account's sk- keys (revoked ones too)
  revoke <wallet> <key_id>          revoke an sk- key, effective on its next request

--trust-mode: ${TRUST_MODES.join(' | ')}; --reset-period: ${RESET_PERIODS.join(' | ')} (default never)
--config FILE is the config the router runs with (npm start: config/default.yaml).
`

function oneOf<T extends string>(flag: string, value: string | undefined, allowed: readonly T[]): T | undefined {
  if (value === undefined) return undefined
  if (!(allowed as readonly string[]).includes(value)) {
    throw new OperatorUsageError(`${flag} must be one of ${allowed.join(', ')} (got ${JSON.stringify(value)})`)
  }
  return value as T
}

function apiKeyLines(keys: readonly ApiKeyRecord[]): string {
  return table(
    ['key_id', 'name', 'status', 'preview', 'trust_mode', 'credit_limit', 'reset_period', 'expires_at', 'created_at'],
    keys.map((k) => [
      k.id,
      k.name,
      k.revoked ? 'revoked' : 'active',
      k.preview,
      k.trustMode ?? '-',
      k.creditLimit === null ? '-' : formatUsd(k.creditLimit),
      k.resetPeriod,
      iso(k.expiresAt),
      iso(k.createdAt),
    ]),
  )
}

/** `svc-router api-keys …`; resolves to the exit code. */
export async function apiKeysCommand(argv: string[], io: OperatorIo): Promise<number> {
  const options = {
    name: { type: 'string' },
    'trust-mode': { type: 'string' },
    'credit-limit': { type: 'string' },
    'reset-period': { type: 'string' },
  } as const
  const parsed = parseCommand(argv, options, API_KEYS_USAGE, io)
  if (typeof parsed === 'number') return parsed
  const { values, command, args } = parsed
  switch (command) {
    case 'create': {
      const account = wallet(args[0])
      const name = values.name?.trim() ?? ''
      if (name === '') throw new OperatorUsageError('--name is required (name the key after where it runs)')
      const trustMode = oneOf<TrustMode>('--trust-mode', values['trust-mode'], TRUST_MODES)
      const resetPeriod = oneOf<ResetPeriod>('--reset-period', values['reset-period'], RESET_PERIODS)
      const creditLimit = values['credit-limit'] === undefined ? null : usd(values['credit-limit'])
      return withStore(values.config, io, async (store) => {
        const { record, secret } = await new Credentials(store, null).issueApiKey(account, {
          name,
          trustMode: trustMode ?? null,
          creditLimit,
          ...(resetPeriod === undefined ? {} : { resetPeriod }),
        })
        io.out(`API key ${record.id} created for ${account}\nsecret (shown this once; store it now):\n${secret}\n`)
        return 0
      })
    }
    case 'list': {
      const account = wallet(args[0])
      return withStore(values.config, io, async (store) => {
        io.out(apiKeyLines(await store.keys.listApiKeys(account)))
        return 0
      })
    }
    case 'revoke': {
      const account = wallet(args[0])
      const id = args[1]
      if (id === undefined) throw new OperatorUsageError('missing <key_id>')
      return withStore(values.config, io, async (store) => {
        const record = await new Credentials(store, null).revokeApiKey(account, id)
        if (record === null) {
          io.err(`svc-router: no API key ${id} on account ${account}\n`)
          return 1
        }
        io.out(`API key ${record.id} revoked\n`)
        return 0
      })
    }
    default:
      throw new OperatorUsageError(`unknown api-keys command ${JSON.stringify(command)}`)
  }
}
