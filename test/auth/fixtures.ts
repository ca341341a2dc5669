/**
 * Test doubles for the auth stage without HTTP: a real in-memory store whose key store counts (and can hold
 * back) the calls authentication makes, and request heads built by hand.
 */
import type { RequestHead } from '../../src/server/request-head.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import type { Credential, KeyStore, Store } from '../../src/store/store.js'
import { requestHead } from '../helpers/request-head.js'

export interface CountingStore extends Store {
  readonly calls: { findCredential: number; touchMgmtKey: number }
  /** While set, findCredential reads at once but answers only when this promise resolves (a slow network). */
  gate: Promise<void> | null
}

export async function countingStore(): Promise<CountingStore> {
  const inner = await openSqliteStore({ path: ':memory:' })
  const calls = { findCredential: 0, touchMgmtKey: 0 }
  let gate: Promise<void> | null = null
  const keys = new Proxy(inner.keys as KeyStore, {
    get(target, prop) {
      if (prop === 'findCredential') {
        return async (hash: string): Promise<Credential | null> => {
          calls.findCredential++
          const result = await target.findCredential(hash)
          if (gate !== null) await gate
          return result
        }
      }
      if (prop === 'touchMgmtKey') {
        return (...args: Parameters<KeyStore['touchMgmtKey']>) => {
          calls.touchMgmtKey++
          return target.touchMgmtKey(...args)
        }
      }
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  return {
    accounts: inner.accounts,
    keys,
    ledger: inner.ledger,
    changes: inner.changes,
    jobs: inner.jobs,
    responses: inner.responses,
    settlement: inner.settlement,
    close: () => inner.close(),
    calls,
    get gate() {
      return gate
    },
    set gate(value) {
      gate = value
    },
  }
}

export function fakeHead(authorization: string, remote = '127.0.0.1'): RequestHead {
  return requestHead({ authorization, remoteAddress: () => remote })
}

/** A promise and the function that resolves it. */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}
