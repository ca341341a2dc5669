/**
 * Billing (DESIGN.md §5, §6): charges go to the store by group commit; budgets live in the books' memory,
 * rebuilt from the store's durable totals on start (reservations of requests that died with a previous process
 * are gone), and kept in step with what other processes change.
 */
import type { Credentials } from '../auth/credentials.js'
import type { Books } from '../billing/books.js'
import { ChargeWriter } from '../billing/charge-writer.js'
import type { Config } from '../config/index.js'
import { log } from '../log.js'
import type { Store } from '../store/store.js'
import { part, type Part } from './part.js'
import { BOOKS, booksOf } from './table.js'

/** Charges per group-commit transaction at most. */
const CHARGE_BATCH = 256

export interface Billing {
  readonly writer: ChargeWriter
  readonly ledger: Books
}

export function billingPart(config: Config, store: Store): Part<Billing> {
  const writer = new ChargeWriter(store.ledger, { maxBatch: CHARGE_BATCH })
  const books = BOOKS[booksOf(store)](config, { store, writer })
  return part({ writer, ledger: books.offers }, async () => {
    // Charges settled before the close are written before the store goes; then unused leases go back.
    await writer.close()
    await books.stop?.()
  })
}

/** The books follow key revocations and limit changes made here, and whatever another process changed. */
export function followBooksPart(parts: { store: Store; credentials: Credentials; ledger: Books }): Part<null> {
  const { store, credentials, ledger } = parts
  const stopWatchingRevocations = credentials.onApiKeyRevoked((keyId) => ledger.keyRevoked(keyId))
  const stopWatchingUpdates = credentials.onApiKeyUpdated((key) => {
    ledger.keyChanged?.(key.id)
    ledger.keyLimitChanged?.(key.id, key.creditLimit)
  })
  const stopWatchingLedger = store.changes.subscribe((change) => {
    const reread = change.kind === 'funds' ? ledger.refreshAccount(change.accountId) : change.kind === 'unknown' ? ledger.refresh() : null
    reread?.catch((err: unknown) => log.error('billing: re-reading the books after an external change failed', { err: String(err) }))
    // A key another process changed may have been revoked, or its limit changed: its requests waiting for room
    // must not be sent, or must fit the new limit. A key with no book here has none waiting, and its next
    // request reads it afresh.
    if (change.kind === 'key') ledger.keyChanged?.(change.keyId)
    if (change.kind === 'key' && ledger.hasKey(change.keyId)) {
      store.keys.getApiKey(change.accountId, change.keyId).then(
        (key) => {
          if (key === null) return
          if (key.revoked) ledger.keyRevoked(key.id)
          else ledger.keyLimitChanged?.(key.id, key.creditLimit)
        },
        (err: unknown) => log.error('billing: reading a key changed by another process failed', { err: String(err) }),
      )
    }
  })
  return part(null, () => {
    stopWatchingLedger()
    stopWatchingRevocations()
    stopWatchingUpdates()
  })
}
