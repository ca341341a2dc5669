/**
 * The settlement part of the composition root (DESIGN.md §8): `createSettlementPart(config, parts)` returns the
 * payer (null when no payer key is configured) and how to stop it. Which funding lock is a table on the
 * store's kind, like every other choice of implementation.
 */
import type { Config } from '../config/index.js'
import type { SettlementStore } from '../store/settlement.js'
import { log } from '../log.js'
import { postgresLock, PROCESS_LOCK, type FundingLock } from './funding-lock.js'
import { loadPayer, payerConfigured } from './payer.js'
import { createSettlement, type Settlement } from './settlement.js'

const FUNDING_LOCKS: Readonly<Record<Config['store']['kind'], (store: Config['store']) => FundingLock>> = {
  sqlite: () => PROCESS_LOCK,
  postgres: (s) => postgresLock(s.url, s.connect_timeout_ms),
}

export interface SettlementParts {
  /** The registry is to be published again (the routable set changed). */
  readonly onRoutableChange: () => void
  readonly books: SettlementStore
  readonly env?: NodeJS.ProcessEnv
}

export function createSettlementPart(config: Config, parts: SettlementParts): Settlement | null {
  if (!payerConfigured(config.settlement)) {
    if (config.registry.source === 'chain') log.warn('settlement: no payer key (settlement.key_file or key_env): chain providers are sent requests unpaid')
    return null
  }
  if (config.registry.source !== 'chain') throw new Error('settlement: a payer key is set but registry.source is not chain (only chain providers are paid)')
  const payer = loadPayer(config.settlement, parts.env)
  log.info('settlement: paying the providers of the chain registry', { payer: payer.address })
  return createSettlement(config.settlement, {
    payer,
    rpcUrl: config.registry.chain.rpc_url,
    serving: config.registry.chain.contract as `0x${string}`,
    lock: FUNDING_LOCKS[config.store.kind](config.store),
    onRoutableChange: parts.onRoutableChange,
    books: parts.books,
  })
}

export type { Settlement } from './settlement.js'
