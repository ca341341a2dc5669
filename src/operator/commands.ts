/**
 * Operator commands on the store (DESIGN.md §2): `svc-router accounts …` and `svc-router mgmt-keys …` (and
 * `api-keys …`, in api-keys-command.ts). They
 * open the store the config names (the same `--config` as `serve`), so they work while the router runs: the
 * router learns of each change within a second (Store.changes) and drops what it cached of that key or account,
 * or re-reads that account's funds.
 *
 * A management key's secret is printed once, at creation; nothing else ever prints a secret.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { Credentials } from '../auth/credentials.js'
import { parseWallet } from '../auth/wallet.js'
import { availableFunds } from '../billing/available.js'
import { formatUsd, parseUsd } from '../billing/money.js'
import { loadConfig } from '../config/index.js'
import { describeStore, openStore } from '../store/open.js'
import { SCOPES, type MgmtKeyRecord, type Scope, type Store } from '../store/store.js'

/** A command line that cannot be run as given: printed with the usage, exit code 2. */
export class OperatorUsageError extends Error {
  override name = 'OperatorUsageError'
}

export interface OperatorIo {
  out(text: string): void
  err(text: string): void
  readonly env: Readonly<Record<string, string | undefined>>
}

export const ACCOUNTS_USAGE = `usage: svc-router accounts <command> [--config FILE]

commands:
  deposit <wallet> <usd> [--memo TEXT]   add a deposit to the account's journal (creates the account)
  credit <wallet> <usd> [--memo TEXT]    grant credit (spent before deposits)
  show <wallet>                          balances and rate limit of the account
  rate-limit <wallet> <n|default>        set the account's requests per minute (default: the config's)

<wallet> is 0x + 40 hex digits, lower-case or EIP-55 checksummed. Amounts are decimal USD.
--config FILE is the config the router runs with (npm start: config/default.yaml).
`

export const MGMT_KEYS_USAGE = `usage: svc-router mgmt-keys <command> [--config FILE]

commands:
  create <wallet> --scopes LIST --name NAME   issue an mk- key; its secret is printed this once
  list [<wallet>]                              management keys (all accounts, or one)
  update <key_id> [--name NAME] [--scopes LIST]   rename a management key or replace its scopes
  revoke <key_id>                              revoke a management key

scopes (comma-separated, or "all"): ${SCOPES.join(', ')}
--config FILE is the config the router runs with (npm start: config/default.yaml).
`

export function wallet(text: string | undefined): string {
  if (text === undefined) throw new OperatorUsageError('missing <wallet>')
  const parsed = parseWallet(text)
  if ('problem' in parsed) throw new OperatorUsageError(`invalid wallet ${JSON.stringify(text)}: ${parsed.problem}`)
  return parsed.wallet
}

export function usd(text: string | undefined): bigint {
  if (text === undefined) throw new OperatorUsageError('missing <usd> amount')
  const amount = parseUsd(text)
  if (amount === null || amount === 0n) throw new OperatorUsageError(`invalid amount ${JSON.stringify(text)}: expected a positive decimal USD amount`)
  return amount
}

export function parseScopes(text: string | undefined): Scope[] {
  if (text === undefined || text.trim() === '') throw new OperatorUsageError(`--scopes is required (any of: ${SCOPES.join(', ')}, or all)`)
  if (text.trim() === 'all') return [...SCOPES]
  const out: Scope[] = []
  for (const part of text.split(/[\s,]+/)) {
    if (part === '') continue
    if (!(SCOPES as readonly string[]).includes(part)) throw new OperatorUsageError(`unknown scope ${JSON.stringify(part)} (known: ${SCOPES.join(', ')})`)
    if (!out.includes(part as Scope)) out.push(part as Scope)
  }
  return out
}

export function iso(ms: number | null): string {
  return ms === null ? '-' : new Date(ms).toISOString()
}

/** Rows as a plain text table with a header line, columns padded to their widest cell. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  return [header, ...rows].map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd()).join('\n') + '\n'
}

function mgmtKeyLines(keys: readonly MgmtKeyRecord[]): string {
  return table(
    ['key_id', 'account', 'name', 'scopes', 'status', 'preview', 'created_at', 'last_used_at', 'last_source_ip'],
    keys.map((k) => [
      k.id,
      k.accountId,
      k.name,
      k.scopes.join(','),
      k.revoked ? 'revoked' : 'active',
      k.preview,
      iso(k.createdAt),
      iso(k.lastUsedAt),
      k.lastSourceIp ?? '-',
    ]),
  )
}

export async function withStore<T>(configFile: string | undefined, io: OperatorIo, fn: (store: Store) => Promise<T>): Promise<T> {
  const config = loadConfig({ file: configFile, env: io.env })
  // On stderr, so stdout stays the command's answer: which store was used is the first thing to check.
  io.err(`store: ${describeStore(config.store)}\n`)
  // Beside the server: a key it revokes is in force by the time the command answers (store/sqlite/changes.ts).
  const store = await openStore(config.store, { besideServer: true })
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}

/** Options of a command: what parseArgs takes. */
type OptionsConfig = NonNullable<ParseArgsConfig['options']>

const COMMON = { config: { type: 'string', short: 'c' }, help: { type: 'boolean', short: 'h' } } as const

type Parsed<O extends OptionsConfig> = ReturnType<
  typeof parseArgs<{ args: string[]; options: typeof COMMON & O; allowPositionals: true; strict: true }>
>

/**
 * A command's argv with its own options plus --config/--help. `--help` prints `usage` (exit 0), no
 * subcommand prints it as an error (exit 2): both come back as the exit code to return.
 */
export function parseCommand<O extends OptionsConfig>(
  argv: string[],
  options: O,
  usage: string,
  io: OperatorIo,
): { values: Parsed<O>['values']; command: string; args: string[] } | number {
  const { values, positionals } = parseArgs({ args: argv, options: { ...COMMON, ...options }, allowPositionals: true, strict: true })
  const [command, ...args] = positionals
  // COMMON's --help is in every command's options; TypeScript cannot see it through the generic O.
  if ((values as { help?: boolean }).help === true) {
    io.out(usage)
    return 0
  }
  if (command === undefined) {
    io.err(usage)
    return 2
  }
  return { values, command, args }
}

/** `svc-router accounts …`; resolves to the exit code. */
export async function accountsCommand(argv: string[], io: OperatorIo): Promise<number> {
  const parsed = parseCommand(argv, { memo: { type: 'string' } }, ACCOUNTS_USAGE, io)
  if (typeof parsed === 'number') return parsed
  const { values, command, args } = parsed
  switch (command) {
    case 'deposit':
    case 'credit': {
      const account = wallet(args[0])
      const amount = usd(args[1])
      if (args.length > 2) throw new OperatorUsageError(`unexpected argument ${JSON.stringify(args[2])}`)
      return withStore(values.config, io, async (store) => {
        const entry = await store.ledger.addFunds(account, command, amount, values.memo ?? '', Date.now())
        const totals = await store.ledger.totals(account)
        io.out(
          `${command} of ${formatUsd(entry.amount)} USD recorded for ${account} (journal #${entry.seq}); ` +
            `deposited ${formatUsd(totals.deposited)}, credited ${formatUsd(totals.credited)}, spent ${formatUsd(totals.spent)}\n`,
        )
        return 0
      })
    }
    case 'show': {
      const account = wallet(args[0])
      return withStore(values.config, io, async (store) => {
        const record = await store.accounts.getAccount(account)
        if (record === null) {
          io.err(`svc-router: no account ${account}\n`)
          return 1
        }
        const t = await store.ledger.totals(account)
        io.out(
          [
            `account      ${record.id}`,
            `created_at   ${iso(record.createdAt)}`,
            `rate_limit   ${record.rateLimit === null ? 'default' : `${record.rateLimit}/min`}`,
            `deposited    ${formatUsd(t.deposited)} USD`,
            `credited     ${formatUsd(t.credited)} USD`,
            `spent        ${formatUsd(t.spent)} USD`,
            `available    ${formatUsd(availableFunds(t))} USD`,
            '',
          ].join('\n'),
        )
        return 0
      })
    }
    case 'rate-limit': {
      const account = wallet(args[0])
      const text = args[1]
      let limit: number | null
      if (text === 'default') limit = null
      else if (text !== undefined && /^[1-9]\d{0,8}$/.test(text)) limit = Number(text)
      else throw new OperatorUsageError(`rate limit must be a positive integer or "default" (got ${JSON.stringify(text ?? '')})`)
      return withStore(values.config, io, async (store) => {
        const record = await new Credentials(store, null).setRateLimit(account, limit)
        if (record === null) {
          io.err(`svc-router: no account ${account}\n`)
          return 1
        }
        io.out(`rate limit of ${account}: ${limit === null ? 'default' : `${limit} requests per minute`}\n`)
        return 0
      })
    }
    default:
      throw new OperatorUsageError(`unknown accounts command ${JSON.stringify(command)}`)
  }
}

/** `svc-router mgmt-keys …`; resolves to the exit code. */
export async function mgmtKeysCommand(argv: string[], io: OperatorIo): Promise<number> {
  const parsed = parseCommand(argv, { scopes: { type: 'string' }, name: { type: 'string' } }, MGMT_KEYS_USAGE, io)
  if (typeof parsed === 'number') return parsed
  const { values, command, args } = parsed
  switch (command) {
    case 'create': {
      const account = wallet(args[0])
      const scopes = parseScopes(values.scopes)
      const name = values.name?.trim() ?? ''
      if (name === '') throw new OperatorUsageError('--name is required (name the key after where it runs)')
      return withStore(values.config, io, async (store) => {
        const { record, secret } = await new Credentials(store, null).issueMgmtKey(account, name, scopes)
        io.out(
          [
            `management key ${record.id} created for ${account}`,
            `  name:   ${record.name}`,
            `  scopes: ${record.scopes.join(', ')}`,
            'secret (shown this once; store it now):',
            secret,
            '',
          ].join('\n'),
        )
        return 0
      })
    }
    case 'list': {
      const account = args[0] === undefined ? undefined : wallet(args[0])
      return withStore(values.config, io, async (store) => {
        io.out(mgmtKeyLines(await store.keys.listMgmtKeys(account)))
        return 0
      })
    }
    case 'update': {
      const id = args[0]
      if (id === undefined) throw new OperatorUsageError('missing <key_id>')
      const name = values.name?.trim()
      if (name === '') throw new OperatorUsageError('--name must not be empty')
      const scopes = values.scopes === undefined ? undefined : parseScopes(values.scopes)
      if (name === undefined && scopes === undefined) throw new OperatorUsageError('nothing to update: give --name, --scopes or both')
      return withStore(values.config, io, async (store) => {
        // The console's update is scoped to its account; the operator names only the key.
        const key = (await store.keys.listMgmtKeys()).find((k) => k.id === id)
        const record = key === undefined ? null : await new Credentials(store, null).updateMgmtKey(key.accountId, id, {
          ...(name !== undefined && { name }),
          ...(scopes !== undefined && { scopes }),
        })
        if (record === null) {
          io.err(`svc-router: no management key ${id}\n`)
          return 1
        }
        io.out(`management key ${record.id} updated\n  name:   ${record.name}\n  scopes: ${record.scopes.join(', ')}\n`)
        return 0
      })
    }
    case 'revoke': {
      const id = args[0]
      if (id === undefined) throw new OperatorUsageError('missing <key_id>')
      return withStore(values.config, io, async (store) => {
        const record = await new Credentials(store, null).revokeMgmtKey(id)
        if (record === null) {
          io.err(`svc-router: no management key ${id}\n`)
          return 1
        }
        io.out(`management key ${record.id} revoked\n`)
        return 0
      })
    }
    default:
      throw new OperatorUsageError(`unknown mgmt-keys command ${JSON.stringify(command)}`)
  }
}
