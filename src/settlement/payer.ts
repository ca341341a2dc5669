/**
 * The payer's key (DESIGN.md §8): from `settlement.key_file` (refused unless only its owner may read it: mode
 * 0600 or 0400) or the variable named by `settlement.key_env`. The key itself is never logged, never put in an
 * error message, and lives only in the viem account made from it.
 */
import { readFileSync, statSync } from 'node:fs'
import { privateKeyToAccount } from 'viem/accounts'
import type { LocalAccount } from 'viem'

export interface PayerKeySettings {
  readonly key_file: string
  readonly key_env: string
}

/** Whether settlement is configured at all (a key is named). */
export function payerConfigured(s: PayerKeySettings): boolean {
  return s.key_file !== '' || s.key_env !== ''
}

/** The payer account; throws a message that names where the key was looked for, never the key. */
export function loadPayer(s: PayerKeySettings, env: NodeJS.ProcessEnv = process.env): LocalAccount {
  if (!payerConfigured(s)) throw new Error('settlement: no payer key (key_file or key_env)')
  return loadAccountKey(s.key_file, s.key_env, { file: 'settlement.key_file', env: 'settlement.key_env', key: 'settlement: the payer key' }, env)
}

/**
 * An account's private key from `file` (owner-only: mode 0600 or 0400) or else the variable `envName`; `names`
 * are what the messages call the two settings and the key (config keys, or a command's flags).
 */
export function loadAccountKey(file: string, envName: string, names: { file: string; env: string; key: string }, env: NodeJS.ProcessEnv = process.env): LocalAccount {
  let text: string
  if (file !== '') {
    let mode: number
    try {
      mode = statSync(file).mode & 0o777
    } catch (err) {
      throw new Error(`${names.file} ${file}: ${(err as NodeJS.ErrnoException).code ?? 'unreadable'}`)
    }
    if ((mode & 0o077) !== 0) {
      throw new Error(`${names.file} ${file} has mode ${mode.toString(8).padStart(4, '0')}: it must be readable by its owner only (chmod 600)`)
    }
    text = readFileSync(file, 'utf8')
  } else {
    const value = env[envName]
    if (value === undefined || value === '') throw new Error(`${names.env}: the variable ${envName} is not set`)
    text = value
  }
  const hex = text.trim().replace(/^0x/i, '')
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw new Error(`${names.key} ${file !== '' ? `in ${file}` : `in ${envName}`} is not 32 bytes of hex`)
  return privateKeyToAccount(`0x${hex}`)
}
