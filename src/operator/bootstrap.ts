/**
 * The `npm start` demo (DESIGN.md §2): on an empty store, a dev account with a deposit and one key of each
 * kind, whose secrets are handed back once for the CLI to print. A store that already has an account is left
 * alone, so restarting the demo never mints new keys.
 */
import { SCOPES, type Store } from '../store/store.js'
import type { Credentials } from '../auth/credentials.js'
import { formatUsd, numberToDecimal, parseUsd } from '../billing/money.js'

export interface DevBootstrap {
  readonly wallet: string
  readonly depositUsd: number
}

export interface DevKeys {
  readonly wallet: string
  /** Decimal USD. */
  readonly deposit: string
  readonly apiKey: string
  readonly mgmtKey: string
}

export async function bootstrapDevAccount(store: Pick<Store, 'accounts' | 'ledger'>, credentials: Credentials, dev: DevBootstrap, now = Date.now()): Promise<DevKeys | null> {
  if ((await store.accounts.countAccounts()) > 0) return null
  const text = numberToDecimal(dev.depositUsd)
  const amount = text === null ? null : parseUsd(text)
  if (amount === null || amount <= 0n) throw new Error(`dev.deposit_usd must be a positive amount (got ${dev.depositUsd})`)
  await store.ledger.addFunds(dev.wallet, 'deposit', amount, 'dev bootstrap', now)
  const api = await credentials.issueApiKey(dev.wallet, { name: 'dev' })
  const mgmt = await credentials.issueMgmtKey(dev.wallet, 'dev', SCOPES)
  return { wallet: dev.wallet, deposit: formatUsd(amount), apiKey: api.secret, mgmtKey: mgmt.secret }
}

/** The lines `svc-router serve` prints once, after it listens on `url`. */
export function devKeysBanner(keys: DevKeys, url: string): string {
  return [
    '',
    `dev account ${keys.wallet} created with a deposit of ${keys.deposit} USD. Its keys are shown this once:`,
    `  sk- key (inference):                ${keys.apiKey}`,
    `  mk- key (account and keys, all scopes): ${keys.mgmtKey}`,
    'try:',
    `  curl -H "Authorization: Bearer ${keys.apiKey}" ${url}/v1/chat/completions \\`,
    `    -d '{"model":"qwen-2.5-7b-instruct","messages":[{"role":"user","content":"hi"}]}'`,
    `  curl -H "Authorization: Bearer ${keys.mgmtKey}" ${url}/v1/account/balance`,
    '',
  ].join('\n')
}
