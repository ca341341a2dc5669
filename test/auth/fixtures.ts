/**
 * Test doubles for the auth stage without HTTP: a real in-memory store that counts (and can hold back) the
 * calls authentication makes, and request heads built by hand.
 */
import type { RequestHead } from '../../src/server/request-head.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import type { Credential, Store } from '../../src/store/store.js'
import { requestHead } from '../helpers/request-head.js'

export interface CountingStore extends Store {
  readonly calls: { findCredential: number; touchMgmtKey: number }
  /** While set, findCredential reads at once but answers only when this promise resolves (a slow network). */
  gate: Promise<void> | null
}

export function countingStore(): CountingStore {
  const inner = openSqliteStore({ path: ':memory:' })
  const calls = { findCredential: 0, touchMgmtKey: 0 }
  const state = { gate: null as Promise<void> | null }
  return new Proxy(inner as unknown as CountingStore, {
    get(target, prop) {
      if (prop === 'calls') return calls
      if (prop === 'gate') return state.gate
      if (prop === 'findCredential') {
        return async (hash: string): Promise<Credential | null> => {
          calls.findCredential++
          const result = await inner.findCredential(hash)
          if (state.gate !== null) await state.gate
          return result
        }
      }
      if (prop === 'touchMgmtKey') {
        return (...args: Parameters<Store['touchMgmtKey']>) => {
          calls.touchMgmtKey++
          return inner.touchMgmtKey(...args)
        }
      }
      const value = Reflect.get(inner, prop, inner) as unknown
      return typeof value === 'function' ? value.bind(inner) : value
    },
    set(_target, prop, value) {
      if (prop === 'gate') {
        state.gate = value as Promise<void> | null
        return true
      }
      return false
    },
  })
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
