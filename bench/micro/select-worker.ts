/**
 * Piscina worker for select.bench.ts: the design DESIGN.md §1 rejects, selection per request in a worker.
 * It receives the request's facts, selects over its own copy of the offers (built once per registry size from
 * the same deterministic fixture as the main thread) and returns the chosen provider's address.
 */
import { RouterError } from '../../src/errors.js'
import { RoutingPrefs } from '../../src/routing/preferences.js'
import { DIMENSION_CHAT, select } from '../../src/routing/select.js'
import type { ModelIndex } from '../../src/routing/table.js'
import { standaloneIndex } from './registry-fixture.js'

/** What crosses the thread boundary: plain values, as the routing headers would produce them. */
export interface SelectTask {
  readonly providers: number
  readonly sort: number
  readonly tier: number
  /** atto-USD per 1M prompt tokens, or null for none. */
  readonly maxPrompt: bigint | null
  readonly maxOutput: number
  readonly paramMask: number
}

const indexes = new Map<number, ModelIndex>()

export default function selectInWorker(task: SelectTask): string {
  let index = indexes.get(task.providers)
  if (index === undefined) {
    index = standaloneIndex(task.providers)
    indexes.set(task.providers, index)
  }
  const prefs = new RoutingPrefs()
  prefs.sort = task.sort
  prefs.tier = task.tier
  prefs.maxPrompt = task.maxPrompt
  const selection = select(
    index,
    prefs,
    { dimension: DIMENSION_CHAT, paramMask: task.paramMask, maxOutput: task.maxOutput, allowedProviders: null, now: performance.now() },
    null,
  )
  if (selection instanceof RouterError) throw selection
  const offer = selection.next()
  if (offer === null) throw new Error('no candidate')
  return offer.provider.address
}
