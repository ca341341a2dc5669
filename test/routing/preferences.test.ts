/**
 * Unit tests of the routing preferences (spec §4.7): the header parser, the deprecated body `provider`
 * object merged field by field (header wins), and the decimal parser behind the three price ceilings.
 */
import t from 'tap'
import { RouterError } from '../../src/errors.js'
import {
  mergeBodyPreferences,
  parseCeiling,
  parseRoutingHeaders,
  RoutingPrefs,
  SORT_DEFAULT,
  SORT_LATENCY,
  SORT_PRICE,
  UNSET,
} from '../../src/routing/preferences.js'
import type { RequestHead } from '../../src/server/request-head.js'
import { requestHead } from '../helpers/request-head.js'
import { usd } from './usd.js'

type RoutingHeaders = Partial<
  Pick<
    RequestHead,
    | 'providerAddress'
    | 'providerSort'
    | 'providerTrustMode'
    | 'providerAllowFallbacks'
    | 'providerRequireParameters'
    | 'maxPricePrompt'
    | 'maxPriceCompletion'
    | 'maxPriceImage'
  >
>

/** A request head as the front end copies it out: absent headers are empty strings, as uWS reports them. */
function head(headers: RoutingHeaders = {}): RequestHead {
  return requestHead(headers)
}

function parse(headers: RoutingHeaders): { prefs: RoutingPrefs; err: RouterError | null } {
  const prefs = new RoutingPrefs()
  const err = parseRoutingHeaders(head(headers), prefs)
  return { prefs, err }
}

/** Like parse(), for a head whose front end saw `name` twice with different values. */
function parseConflicting(name: string, headers: RoutingHeaders = {}): { prefs: RoutingPrefs; err: RouterError | null } {
  const prefs = new RoutingPrefs()
  const err = parseRoutingHeaders(requestHead({ ...headers, conflictingHeader: name }), prefs)
  return { prefs, err }
}

/** The error code `mergeBodyPreferences` throws, or null when it accepts the object. */
function bodyError(provider: unknown, prefs = new RoutingPrefs()): string | null {
  try {
    mergeBodyPreferences(provider, prefs)
    return null
  } catch (err) {
    if (!(err instanceof RouterError)) throw err
    return err.code
  }
}

const ADDRESS = '0x' + 'ab'.repeat(20)

t.test('absent headers leave every preference unset', async (t) => {
  const { prefs, err } = parse({})
  t.equal(err, null)
  t.equal(prefs.address, '')
  t.equal(prefs.sort, SORT_DEFAULT)
  t.equal(prefs.sortSet, false)
  t.equal(prefs.tier, UNSET)
  t.equal(prefs.allowFallbacks, UNSET)
  t.equal(prefs.requireParameters, UNSET)
  t.equal(prefs.maxPrompt, null)
  t.equal(prefs.maxCompletion, null)
  t.equal(prefs.maxImage, null)
  t.equal(prefs.fallbacksAllowed(), true, 'fallbacks default on')
  t.equal(prefs.requiresParameters(), false, 'require-parameters defaults off')
})

t.test('blank and whitespace-only headers count as unset, never as malformed', async (t) => {
  for (const blank of ['', ' ', '   ', '\t', ' \t ']) {
    const { prefs, err } = parse({
      providerAddress: blank,
      providerSort: blank,
      providerTrustMode: blank,
      providerAllowFallbacks: blank,
      providerRequireParameters: blank,
      maxPricePrompt: blank,
      maxPriceCompletion: blank,
      maxPriceImage: blank,
    })
    t.equal(err, null, `${JSON.stringify(blank)} is accepted`)
    t.equal(prefs.address, '')
    t.equal(prefs.sortSet, false)
    t.equal(prefs.tier, UNSET)
    t.equal(prefs.allowFallbacks, UNSET)
    t.equal(prefs.requireParameters, UNSET)
    t.equal(prefs.maxPrompt, null)
    t.equal(prefs.maxCompletion, null)
    t.equal(prefs.maxImage, null)
  }
})

t.test('values are trimmed before they are checked', async (t) => {
  const { prefs, err } = parse({
    providerSort: ' price ',
    providerTrustMode: '\tverified ',
    providerAllowFallbacks: ' false',
    providerRequireParameters: 'true ',
    maxPricePrompt: ' 0.5 ',
  })
  t.equal(err, null)
  t.equal(prefs.sort, SORT_PRICE)
  t.equal(prefs.tier, 1)
  t.equal(prefs.allowFallbacks, 0)
  t.equal(prefs.requireParameters, 1)
  t.equal(prefs.maxPrompt, usd('0.5'))
})

/** Whitespace that String#trim strips but HTTP does not: none of it is optional whitespace (RFC 9110 §5.6.3). */
const NOT_OWS = ['\u00a0', '\u2003', '\u3000', '\ufeff', '\u000b', '\u000c', '\n', '\r', '\u2028']

/** A value as \u escapes where it is not printable ASCII (a raw U+2028 would break the TAP output's lines). */
function shown(value: string): string {
  return '"' + value.replace(/[^\x20-\x7e]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')) + '"'
}

t.test('only SP and HTAB are trimmed: other whitespace makes a header malformed, with its own code', async (t) => {
  const cases: [keyof RoutingHeaders, string, string][] = [
    ['providerSort', 'price', 'invalid_provider_header'],
    ['providerTrustMode', 'verified', 'invalid_trust_mode'],
    ['providerAllowFallbacks', 'true', 'invalid_provider_header'],
    ['providerRequireParameters', 'false', 'invalid_provider_header'],
    ['maxPricePrompt', '0.5', 'invalid_max_price_usd'],
    ['maxPriceCompletion', '0.5', 'invalid_max_price_usd'],
    ['maxPriceImage', '0.5', 'invalid_max_price_usd'],
  ]
  for (const ws of NOT_OWS) {
    for (const [field, valid, code] of cases) {
      for (const value of [ws + valid, valid + ws, ` ${ws}${valid}\t`, ws]) {
        const { err } = parse({ [field]: value })
        t.equal(err?.code, code, `${field}=${shown(value)} is malformed`)
        t.equal(err?.status, 400)
      }
    }
    // The pin is only normalised here; the registry finds no provider under an address with a stray character.
    const { prefs, err } = parse({ providerAddress: ws + ADDRESS })
    t.equal(err, null)
    t.equal(prefs.address, ws + ADDRESS, `pin ${shown(ws)}+address keeps the character`)
  }
})

t.test('body fields are trimmed like their headers: SP and HTAB only', async (t) => {
  t.equal(bodyError({ sort: ' \tprice\t ' }), null)
  t.equal(bodyError({ trust_mode: ' private ' }), null)
  for (const ws of NOT_OWS) {
    t.equal(bodyError({ sort: ws + 'price' }), 'invalid_provider_header', `sort ${shown(ws + 'price')}`)
    t.equal(bodyError({ trust_mode: 'private' + ws }), 'invalid_trust_mode', `trust_mode ${shown('private' + ws)}`)
    t.equal(bodyError({ allow_fallbacks: ws + 'true' }), 'invalid_provider_header', `allow_fallbacks ${shown(ws + 'true')}`)
    t.equal(bodyError({ require_parameters: 'false' + ws }), 'invalid_provider_header', `require_parameters ${shown('false' + ws)}`)
    t.equal(bodyError({ max_price: { prompt: ws + '1' } }), 'invalid_max_price_usd', `max_price.prompt ${shown(ws + '1')}`)
    const prefs = new RoutingPrefs()
    mergeBodyPreferences({ address: ws }, prefs)
    t.equal(prefs.address, ws, `address ${shown(ws)} is not blank`)
  }
})

t.test('pin header is trimmed and lower-cased, and turns fallbacks off by default', async (t) => {
  const { prefs, err } = parse({ providerAddress: ` ${ADDRESS.toUpperCase().replace('0X', '0x')} ` })
  t.equal(err, null)
  t.equal(prefs.address, ADDRESS)
  t.equal(prefs.fallbacksAllowed(), false, 'pinned: fallbacks default off')
  const withFallbacks = parse({ providerAddress: ADDRESS, providerAllowFallbacks: 'true' })
  t.equal(withFallbacks.prefs.fallbacksAllowed(), true, 'Allow-Fallbacks true re-enables them')
  const unpinnedOff = parse({ providerAllowFallbacks: 'false' })
  t.equal(unpinnedOff.prefs.fallbacksAllowed(), false, 'Allow-Fallbacks false holds without a pin')
})

t.test('sort accepts exactly latency and price', async (t) => {
  t.equal(parse({ providerSort: 'latency' }).prefs.sort, SORT_LATENCY)
  t.equal(parse({ providerSort: 'latency' }).prefs.sortSet, true)
  t.equal(parse({ providerSort: 'price' }).prefs.sort, SORT_PRICE)
  for (const bad of ['Latency', 'PRICE', 'Price', 'fastest', 'cheapest', 'latency,price', 'pric']) {
    const { err } = parse({ providerSort: bad })
    t.equal(err?.code, 'invalid_provider_header', `sort ${JSON.stringify(bad)} is rejected`)
    t.equal(err?.status, 400)
  }
})

t.test('trust mode accepts exactly standard, verified and private as ranks 0..2', async (t) => {
  t.equal(parse({ providerTrustMode: 'standard' }).prefs.tier, 0)
  t.equal(parse({ providerTrustMode: 'verified' }).prefs.tier, 1)
  t.equal(parse({ providerTrustMode: 'private' }).prefs.tier, 2)
  for (const bad of ['Private', 'VERIFIED', 'Standard', 'high', 'none', 'tee']) {
    const { err } = parse({ providerTrustMode: bad })
    t.equal(err?.code, 'invalid_trust_mode', `trust mode ${JSON.stringify(bad)} is rejected`)
    t.equal(err?.status, 400)
  }
})

t.test('boolean headers accept true/false in any case and nothing else', async (t) => {
  for (const field of ['providerAllowFallbacks', 'providerRequireParameters'] as const) {
    const key = field === 'providerAllowFallbacks' ? 'allowFallbacks' : 'requireParameters'
    for (const [value, want] of [['true', 1], ['false', 0], ['TRUE', 1], ['False', 0], ['tRuE', 1], ['FALSE', 0]] as const) {
      const { prefs, err } = parse({ [field]: value })
      t.equal(err, null, `${field}=${value} accepted`)
      t.equal(prefs[key], want, `${field}=${value} is ${want}`)
    }
    for (const bad of ['1', '0', 'yes', 'no', 'on', 'off', 't', 'f', 'truee', 'fals', 'true1']) {
      const { err } = parse({ [field]: bad })
      t.equal(err?.code, 'invalid_provider_header', `${field}=${JSON.stringify(bad)} rejected`)
      t.equal(err?.status, 400)
    }
  }
})

t.test('each price header takes a finite non-negative decimal and rejects anything else', async (t) => {
  for (const field of ['maxPricePrompt', 'maxPriceCompletion', 'maxPriceImage'] as const) {
    const key = field === 'maxPricePrompt' ? 'maxPrompt' : field === 'maxPriceCompletion' ? 'maxCompletion' : 'maxImage'
    for (const [value, want] of [['0', '0'], ['0.5', '0.5'], ['10', '10'], ['007.250', '7.25']] as const) {
      const { prefs, err } = parse({ [field]: value })
      t.equal(err, null, `${field}=${value} accepted`)
      t.equal(prefs[key], usd(want))
    }
    for (const bad of ['NaN', 'Inf', 'Infinity', '-1', '-0', '+1', '1e3', 'abc', '0x10', '1.', '.5', '1.2.3', '1,5', '1 5', '$1']) {
      const { err } = parse({ [field]: bad })
      t.equal(err?.code, 'invalid_max_price_usd', `${field}=${JSON.stringify(bad)} rejected`)
      t.equal(err?.status, 400)
    }
  }
})

t.test('the first malformed header is reported, naming the header', async (t) => {
  const { err } = parse({ providerSort: 'fastest', providerTrustMode: 'high' })
  t.equal(err?.code, 'invalid_provider_header')
  t.match(err?.message, /X-SVC-Provider-Sort/)
  t.match(parse({ maxPriceCompletion: 'NaN' }).err?.message, /X-SVC-Provider-Max-Price-Usd-Completion/)
  t.match(parse({ providerRequireParameters: 'yes' }).err?.message, /X-SVC-Provider-Require-Parameters/)
})

t.test('a routing header sent twice with different values is 400 with that header\'s own code', async (t) => {
  const cases: [string, string, string, RoutingHeaders][] = [
    ['x-svc-provider-address', 'X-SVC-Provider-Address', 'invalid_provider_header', { providerAddress: ADDRESS }],
    ['x-svc-provider-sort', 'X-SVC-Provider-Sort', 'invalid_provider_header', { providerSort: 'price' }],
    ['x-svc-provider-trust-mode', 'X-SVC-Provider-Trust-Mode', 'invalid_trust_mode', { providerTrustMode: 'private' }],
    ['x-svc-provider-allow-fallbacks', 'X-SVC-Provider-Allow-Fallbacks', 'invalid_provider_header', { providerAllowFallbacks: 'true' }],
    ['x-svc-provider-require-parameters', 'X-SVC-Provider-Require-Parameters', 'invalid_provider_header', { providerRequireParameters: 'false' }],
    ['x-svc-provider-max-price-usd-prompt', 'X-SVC-Provider-Max-Price-Usd-Prompt', 'invalid_max_price_usd', { maxPricePrompt: '1' }],
    ['x-svc-provider-max-price-usd-completion', 'X-SVC-Provider-Max-Price-Usd-Completion', 'invalid_max_price_usd', { maxPriceCompletion: '1' }],
    ['x-svc-provider-max-price-usd-image', 'X-SVC-Provider-Max-Price-Usd-Image', 'invalid_max_price_usd', { maxPriceImage: '1' }],
  ]
  for (const [lower, name, code, headers] of cases) {
    // The copy the head holds is valid: the conflict alone is the error.
    t.equal(parse(headers).err, null, `${name} once is accepted`)
    const { err } = parseConflicting(lower, headers)
    t.equal(err?.code, code, `${name} twice: ${code}`)
    t.equal(err?.status, 400)
    t.equal(err?.message, `${name} was sent twice with different values`)
  }
  t.equal(parseConflicting('x-svc-provider-sort', { providerTrustMode: 'high' }).err?.code, 'invalid_provider_header', 'the conflict is reported before a malformed header')
})

t.test('a conflicting header that is not a routing header is not the router\'s to judge', async (t) => {
  for (const name of ['', 'authorization', 'content-type', 'x-svc-provider-order', 'x-request-id']) {
    const { prefs, err } = parseConflicting(name, { providerSort: 'price' })
    t.equal(err, null, `conflicting ${JSON.stringify(name)}`)
    t.equal(prefs.sort, SORT_PRICE)
  }
})

t.test('a price header of 0.49999999999999999 is that exact decimal, below 0.5, not the double 0.5', async (t) => {
  for (const field of ['maxPricePrompt', 'maxPriceCompletion', 'maxPriceImage'] as const) {
    const key = field === 'maxPricePrompt' ? 'maxPrompt' : field === 'maxPriceCompletion' ? 'maxCompletion' : 'maxImage'
    const { prefs, err } = parse({ [field]: '0.49999999999999999' })
    t.equal(err, null)
    t.equal(prefs[key], usd('0.49999999999999999'), `${field}: exact`)
    t.ok(prefs[key]! < usd('0.5'), `${field}: below 0.5`)
  }
})

t.test('a ceiling with more than 18 decimals is accepted and truncated toward zero', async (t) => {
  const cases: [string, string][] = [
    ['0.49999999999999999999', '0.499999999999999999'],
    ['0.0000000000000000009', '0'],
    ['1.0000000000000000001', '1'],
    ['0.' + '9'.repeat(300), '0.' + '9'.repeat(18)],
    ['0'.repeat(100) + '1.5', '1.5'],
    ['123456789012345678901234567890.123456789012345678', '123456789012345678901234567890.123456789012345678'],
  ]
  for (const [text, want] of cases) {
    t.equal(parseCeiling(text), usd(want), `${text.length > 40 ? text.slice(0, 37) + '...' : text} reads as ${want.length > 40 ? want.slice(0, 37) + '...' : want}`)
    t.equal(parse({ maxPricePrompt: text }).prefs.maxPrompt, usd(want), 'as a header')
    const prefs = new RoutingPrefs()
    mergeBodyPreferences({ max_price: { image: text } }, prefs)
    t.equal(prefs.maxImage, usd(want), 'as a body string')
  }
})

t.test('a body ceiling given as a JSON number is the decimal it prints as', async (t) => {
  const cases: [number, string][] = [
    [0.1, '0.1'],
    [0.49999999999999994, '0.49999999999999994'],
    [1e-7, '0.0000001'],
    [1.5e21, '1500000000000000000000'],
    [5e-324, '0'],
    [0, '0'],
    [-0, '0'],
  ]
  for (const [value, want] of cases) {
    const prefs = new RoutingPrefs()
    mergeBodyPreferences({ max_price: { prompt: value } }, prefs)
    t.equal(prefs.maxPrompt, usd(want), `${value} is ${want}`)
  }
  const huge = new RoutingPrefs()
  mergeBodyPreferences({ max_price: { completion: 1e300 } }, huge)
  t.equal(huge.maxCompletion, usd('1' + '0'.repeat(300)), 'a number has no digit bound: 1e300 is a (very high) ceiling')
  for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, -1, -5e-324]) {
    t.equal(bodyError({ max_price: { prompt: bad } }), 'invalid_max_price_usd', `${bad} is not a ceiling`)
  }
})

t.test('parseCeiling accepts plain decimals only', async (t) => {
  t.equal(parseCeiling('0'), usd('0'))
  t.equal(parseCeiling('12'), usd('12'))
  t.equal(parseCeiling('0.25'), usd('0.25'))
  t.equal(parseCeiling('10.0'), usd('10'))
  t.equal(parseCeiling('1'.repeat(64)), usd('1'.repeat(64)), '64 digits before the point is the most accepted')
  for (const bad of ['', '1'.repeat(65), 'NaN', 'Infinity', '-Infinity', 'Inf', '-1', '+1', '1e3', '1E3', '0x10', '0b1', '1.', '.5', '.', '1..2', ' 1', '1 ', 'abc', '١']) {
    t.equal(parseCeiling(bad), null, `${JSON.stringify(bad)} is not a decimal`)
  }
})

t.test('body provider object applies each field when no header set it', async (t) => {
  const prefs = new RoutingPrefs()
  mergeBodyPreferences(
    {
      address: ` ${ADDRESS.toUpperCase().replace('0X', '0x')} `,
      sort: 'latency',
      trust_mode: 'verified',
      allow_fallbacks: true,
      require_parameters: 'TRUE',
      max_price: { prompt: 1.5, completion: '2', image: 0 },
    },
    prefs,
  )
  t.equal(prefs.address, ADDRESS)
  t.equal(prefs.sort, SORT_LATENCY)
  t.equal(prefs.sortSet, true)
  t.equal(prefs.tier, 1)
  t.equal(prefs.allowFallbacks, 1)
  t.equal(prefs.requireParameters, 1)
  t.equal(prefs.maxPrompt, usd('1.5'))
  t.equal(prefs.maxCompletion, usd('2'))
  t.equal(prefs.maxImage, usd('0'))
})

t.test('header wins over the body field by field', async (t) => {
  const { prefs, err } = parse({
    providerSort: 'latency',
    providerTrustMode: 'private',
    providerAllowFallbacks: 'false',
    providerRequireParameters: 'false',
    maxPricePrompt: '3',
  })
  t.equal(err, null)
  mergeBodyPreferences(
    {
      sort: 'price',
      trust_mode: 'standard',
      allow_fallbacks: true,
      require_parameters: true,
      max_price: { prompt: 0.1, completion: 0.2 },
    },
    prefs,
  )
  t.equal(prefs.sort, SORT_LATENCY, 'header sort kept')
  t.equal(prefs.tier, 2, 'header trust mode kept')
  t.equal(prefs.allowFallbacks, 0, 'header allow-fallbacks kept')
  t.equal(prefs.requireParameters, 0, 'header require-parameters kept')
  t.equal(prefs.maxPrompt, usd('3'), 'header prompt ceiling kept')
  t.equal(prefs.maxCompletion, usd('0.2'), 'body completion ceiling applies: the header left it unset')
  t.equal(prefs.maxImage, null)
})

t.test('body max_price applies while the header sets only trust mode', async (t) => {
  const { prefs } = parse({ providerTrustMode: 'standard' })
  mergeBodyPreferences({ max_price: { prompt: 0.5 } }, prefs)
  t.equal(prefs.tier, 0)
  t.equal(prefs.maxPrompt, usd('0.5'))
})

t.test('body pin does not replace a header pin', async (t) => {
  const { prefs } = parse({ providerAddress: ADDRESS })
  mergeBodyPreferences({ address: '0x' + '1'.repeat(40) }, prefs)
  t.equal(prefs.address, ADDRESS)
})

t.test('absent, null and empty body provider objects change nothing', async (t) => {
  for (const provider of [undefined, null, {}, { sort: null, trust_mode: undefined, max_price: null }, { max_price: { prompt: null } }, { address: '  ' }]) {
    const prefs = new RoutingPrefs()
    t.equal(bodyError(provider, prefs), null, `${JSON.stringify(provider)} accepted`)
    t.equal(prefs.address, '')
    t.equal(prefs.sortSet, false)
    t.equal(prefs.tier, UNSET)
    t.equal(prefs.maxPrompt, null)
  }
})

t.test('malformed body fields give the same code as their header', async (t) => {
  t.equal(bodyError({ sort: 'fastest' }), 'invalid_provider_header')
  t.equal(bodyError({ sort: 'Price' }), 'invalid_provider_header')
  t.equal(bodyError({ sort: 1 }), 'invalid_provider_header')
  t.equal(bodyError({ trust_mode: 'high' }), 'invalid_trust_mode')
  t.equal(bodyError({ trust_mode: 'Private' }), 'invalid_trust_mode')
  t.equal(bodyError({ trust_mode: 2 }), 'invalid_trust_mode')
  for (const bad of ['yes', 'no', '1', 1, 0, {}]) {
    t.equal(bodyError({ allow_fallbacks: bad }), 'invalid_provider_header', `allow_fallbacks ${JSON.stringify(bad)}`)
    t.equal(bodyError({ require_parameters: bad }), 'invalid_provider_header', `require_parameters ${JSON.stringify(bad)}`)
  }
  for (const bad of [-1, 'NaN', 'Inf', '1e3', '-1', 'abc', true, [1]]) {
    for (const dim of ['prompt', 'completion', 'image']) {
      t.equal(bodyError({ max_price: { [dim]: bad } }), 'invalid_max_price_usd', `max_price.${dim} ${JSON.stringify(bad)}`)
    }
  }
  t.equal(bodyError({ max_price: 5 }), 'invalid_max_price_usd', 'max_price must be an object')
  t.equal(bodyError({ max_price: [1] }), 'invalid_max_price_usd', 'max_price must not be an array')
})

t.test('a malformed body field is rejected even when the header sets the same field', async (t) => {
  const { prefs } = parse({ providerSort: 'price' })
  t.equal(bodyError({ sort: 'fastest' }, prefs), 'invalid_provider_header')
})

t.test('unknown body fields and a non-object provider are invalid_request', async (t) => {
  t.equal(bodyError({ order: ['a'] }), 'invalid_request')
  t.equal(bodyError({ sort: 'price', ignore: [] }), 'invalid_request')
  t.equal(bodyError({ max_price: { request: 1 } }), 'invalid_request')
  t.equal(bodyError({ address: 5 }), 'invalid_request')
  t.equal(bodyError('price'), 'invalid_request')
  t.equal(bodyError(['price']), 'invalid_request')
  t.equal(bodyError(true), 'invalid_request')
})
