/**
 * parseRoutingHeaders: the eight X-SVC-Provider-* headers into RoutingPrefs, run on every inference request.
 * Measured as the router pays it: a fresh RoutingPrefs, then the parse.
 */
import { Bench } from 'tinybench'
import { parseUsd } from '../../src/billing/money.js'
import { parseRoutingHeaders, RoutingPrefs, SORT_PRICE, UNSET } from '../../src/routing/preferences.js'
import type { RequestHead } from '../../src/server/request-head.js'
import { batched, check, formatNs, nsPerOp, recordSummary } from './measure.js'
import { requestHead } from '../../test/helpers/request-head.js'

function head(fields: Partial<RequestHead>): RequestHead {
  return requestHead({ authorization: 'Bearer sk-bench', contentLength: '64', ...fields })
}

const NONE = head({})
const ALL = head({
  providerAddress: '0xAbCdEf0123456789abcdef0123456789ABCDEF01',
  providerSort: 'price',
  providerTrustMode: 'verified',
  providerAllowFallbacks: 'false',
  providerRequireParameters: 'True',
  maxPricePrompt: '0.25',
  maxPriceCompletion: ' 1.5 ',
  maxPriceImage: '0.004',
})

function parse(h: RequestHead): RoutingPrefs {
  const prefs = new RoutingPrefs()
  const err = parseRoutingHeaders(h, prefs)
  if (err !== null) throw err
  return prefs
}

const none = parse(NONE)
check(none.address === '' && none.sort === 0 && !none.sortSet && none.tier === UNSET && none.maxPrompt === null, 'no headers leave every field unset')
const all = parse(ALL)
check(all.address === '0xabcdef0123456789abcdef0123456789abcdef01', 'address lower-cased')
check(all.sort === SORT_PRICE && all.sortSet && all.tier === 1, 'sort and tier')
check(all.allowFallbacks === 0 && all.requireParameters === 1, 'booleans, any case')
check(all.maxPrompt === parseUsd('0.25') && all.maxCompletion === parseUsd('1.5') && all.maxImage === parseUsd('0.004'), 'ceilings, exact, trimmed')

const BATCH = 1000
const bench = new Bench({ name: 'headers', time: 500, warmupTime: 100 })
bench.add('no routing headers', batched(BATCH, () => parse(NONE)))
bench.add('all eight headers set', batched(BATCH, () => parse(ALL)))
await bench.run()
console.table(bench.table())

recordSummary(bench, [
  { label: 'no routing headers', value: formatNs(nsPerOp(bench.getTask('no routing headers'))) },
  { label: 'all eight set', value: formatNs(nsPerOp(bench.getTask('all eight headers set'))) },
])
