/** Opens the store the configuration names (DESIGN.md §3 `store:`). */
import type { Config } from '../config/index.js'
import { openSqliteStore } from './sqlite/sqlite-store.js'
import type { Store } from './store.js'

/** `billing`: the router, which commits charges (on a thread of their own); the operator CLI never does. */
export function openStore(config: Config['store'], use: 'billing' | 'operator'): Store {
  switch (config.kind) {
    case 'sqlite':
      return openSqliteStore({ path: config.path, synchronous: config.synchronous, chargeThread: use === 'billing' })
  }
}
