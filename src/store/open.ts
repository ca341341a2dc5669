/** Opens the store the configuration names (DESIGN.md §3 `store:`). */
import type { Config } from '../config/index.js'
import { openSqliteStore } from './sqlite/sqlite-store.js'
import type { Store } from './store.js'

export async function openStore(config: Config['store']): Promise<Store> {
  switch (config.kind) {
    case 'sqlite':
      return openSqliteStore({ path: config.path, synchronous: config.synchronous })
  }
}
