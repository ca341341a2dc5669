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
  let text: string
  if (s.key_file !== '') {
    let mode: number
    try {
      mode = statSync(s.key_file).mode & 0o777
    } catch (err) {
      throw new Error(`settlement.key_file ${s.key_file}: ${(err as NodeJS.ErrnoException).code ?? 'unreadable'}`)
    }
    if ((mode & 0o077) !== 0) {
      throw new Error(`settlement.key_file ${s.key_file} has mode ${mode.toString(8).padStart(4, '0')}: it must be readable by its owner only (chmod 600)`)
    }
    text = readFileSync(s.key_file, 'utf8')
  } else if (s.key_env !== '') {
    const value = env[s.key_env]
    if (value === undefined || value === '') throw new Error(`settlement.key_env: the variable ${s.key_env} is not set`)
    text = value
  } else {
    throw new Error('settlement: no payer key (key_file or key_env)')
  }
  const hex = text.trim().replace(/^0x/i, '')
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw new Error(`settlement: the payer key ${s.key_file !== '' ? `in ${s.key_file}` : `in ${s.key_env}`} is not 32 bytes of hex`)
  return privateKeyToAccount(`0x${hex}`)
}
