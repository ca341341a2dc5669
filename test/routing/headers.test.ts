/**
 * The routing header contract of spec §4.7, over HTTP through the real router to real simulated providers:
 * every header's domain and error code, every routing rule, the deprecated body `provider` object, and the
 * envelope and headers every error carries (DESIGN.md §4).
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { addr, startStack, type Stack, type TestProvider } from '../helpers/stack.js'

interface Attempt {
  provider: string
  status: number | null
  error?: string
}

interface Trace {
  request_id: string
  provider: string | null
  attempts: Attempt[]
}

interface Body {
  error?: { message: string; type: string; code: string }
  request_id?: string
  x_svc_trace?: Trace
  choices?: unknown[]
}

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: Body
}

/** Header values; an array sends the header once per value. */
type Headers = Record<string, string | string[]>

const MODEL = 'm'
const HELLO = { model: MODEL, messages: [{ role: 'user', content: 'hello there' }] }
const WEATHER_TOOL = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
}
const ERROR_TYPE: Record<number, string> = {
  400: 'invalid_request_error',
  403: 'permission_error',
  404: 'not_found_error',
  502: 'provider_error',
  503: 'service_unavailable',
  504: 'provider_error',
}

const A = addr('a')
const B = addr('b')
const C = addr('c')
const P = addr('1')
const Q = addr('2')

/** startStack with a tap subtest (the helper declares a narrower test type than tap's). */
function stackFor(t: Test, providers: TestProvider[], config: Record<string, Record<string, unknown>> = {}): Promise<Stack> {
  return startStack(t, providers, config)
}

async function chat(stack: Stack, headers: Headers = {}, body: Record<string, unknown> = {}): Promise<Answer> {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, ...headers },
    body: JSON.stringify({ ...HELLO, ...body }),
  })
  const text = await res.body.text()
  let parsed: Body
  try {
    parsed = JSON.parse(text) as Body
  } catch {
    parsed = {}
  }
  return { status: res.statusCode, headers: res.headers, body: parsed }
}

/** The headers every inference response carries (spec §4.8, DESIGN.md §4). */
function checkCommonHeaders(t: Test, res: Answer, what: string): void {
  const id = res.headers['x-request-id']
  t.ok(typeof id === 'string' && id.length > 0, `${what}: x-request-id`)
  t.match(res.headers['x-ratelimit-limit-requests'], /^\d+$/, `${what}: X-RateLimit-Limit-Requests`)
  t.match(res.headers['x-ratelimit-remaining-requests'], /^\d+$/, `${what}: X-RateLimit-Remaining-Requests`)
  const reset = res.headers['x-ratelimit-reset-requests']
  t.ok(typeof reset === 'string' && !Number.isNaN(Date.parse(reset)) && reset.includes('T'), `${what}: X-RateLimit-Reset-Requests is ISO 8601`)
}

/** A complete error answer: status, envelope, code, type, request_id matching x-request-id, common headers. */
function expectError(t: Test, res: Answer, status: number, code: string, what = code): void {
  t.equal(res.status, status, `${what}: status ${status}`)
  t.equal(res.body.error?.code, code, `${what}: code ${code}`)
  t.equal(res.body.error?.type, ERROR_TYPE[status], `${what}: type`)
  t.ok(typeof res.body.error?.message === 'string' && res.body.error.message.length > 0, `${what}: message`)
  t.ok(typeof res.body.request_id === 'string' && res.body.request_id.length > 0, `${what}: request_id`)
  t.equal(res.body.request_id, res.headers['x-request-id'], `${what}: request_id is x-request-id`)
  checkCommonHeaders(t, res, what)
}

/** A successful answer; returns the serving provider of the trace. */
function expectServed(t: Test, res: Answer, what: string): string | null {
  t.equal(res.status, 200, `${what}: served${res.body.error ? ` (got ${res.body.error.code})` : ''}`)
  return res.body.x_svc_trace?.provider ?? null
}

function requests(stack: Stack, address: string): number {
  return stack.sims.get(address)!.stats.requests
}

// ---------------------------------------------------------------------------------------------------------
// Header domains. One private provider P serves `m` for free, so every accepted value (any trust floor, a
// price ceiling of 0) is servable; a standard provider Q serves `std`.

t.test('header domains', async (t) => {
  const stack = await stackFor(t, [
    { address: P, trust_mode: 'private', verifiability: 'TeeML', models: [{ id: MODEL, price: { prompt: 0, completion: 0 } }] },
    { address: Q, trust_mode: 'standard', models: [{ id: 'std', price: { prompt: 0, completion: 0 } }] },
  ])

  t.test('header names are case-insensitive', async (t) => {
    expectError(t, await chat(stack, { 'x-svc-provider-sort': 'fastest' }), 400, 'invalid_provider_header', 'lower-case name')
    expectError(t, await chat(stack, { 'X-SVC-PROVIDER-SORT': 'fastest' }), 400, 'invalid_provider_header', 'upper-case name')
    expectError(t, await chat(stack, { 'X-Svc-Provider-Trust-Mode': 'high' }), 400, 'invalid_trust_mode', 'mixed-case name')
    expectError(t, await chat(stack, { 'X-SVC-PROVIDER-MAX-PRICE-USD-PROMPT': 'abc' }), 400, 'invalid_max_price_usd', 'upper-case price name')
    t.equal(expectServed(t, await chat(stack, { 'x-svc-provider-sort': 'price' }), 'lower-case sort=price'), P)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-PROVIDER-SORT': 'price' }), 'upper-case sort=price'), P)
  })

  t.test('blank and whitespace-only headers are unset: the default applies and the request is served', async (t) => {
    const names = [
      'X-SVC-Provider-Address',
      'X-SVC-Provider-Sort',
      'X-SVC-Provider-Trust-Mode',
      'X-SVC-Provider-Allow-Fallbacks',
      'X-SVC-Provider-Require-Parameters',
      'X-SVC-Provider-Max-Price-Usd-Prompt',
      'X-SVC-Provider-Max-Price-Usd-Completion',
      'X-SVC-Provider-Max-Price-Usd-Image',
    ]
    for (const blank of ['', '   ', '\t', ' \t ']) {
      for (const name of names) {
        const res = await chat(stack, { [name]: blank })
        t.equal(expectServed(t, res, `${name}: ${JSON.stringify(blank)}`), P)
      }
      const all = Object.fromEntries(names.map((n) => [n, blank]))
      t.equal(expectServed(t, await chat(stack, all), `all eight ${JSON.stringify(blank)}`), P)
    }
  })

  // A todo, not a pass: the uWS build in use trims header values itself, dropping every byte below 0x21 or
  // above 0x7F at either edge (a signed-char `< 33` test in its parser), so "\xA0price" reaches
  // parseRoutingHeaders as "price". Only SP and HTAB may be trimmed (spec §4.7, RFC 9110); the parser does
  // its part (test/routing/preferences.test.ts), the front end has to stop uWS doing the rest.
  const uwsTrimsObsText = 'uWS strips bytes 0x80-0xFF at the edges of a header value before the front end sees it'
  t.test('a raw 0xA0 byte (U+00A0) around a value is not trimmed: 400 with the header\'s own code', { todo: uwsTrimsObsText }, async (t) => {
    const nbsp = '\u00a0'
    const before = requests(stack, P)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Sort': nbsp + 'price' }), 400, 'invalid_provider_header', 'sort')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': 'private' + nbsp }), 400, 'invalid_trust_mode', 'trust mode')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': nbsp }), 400, 'invalid_trust_mode', 'trust mode U+00A0 alone is not blank')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Allow-Fallbacks': nbsp + 'true' }), 400, 'invalid_provider_header', 'allow-fallbacks')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Require-Parameters': 'false' + nbsp }), 400, 'invalid_provider_header', 'require-parameters')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': nbsp + '0.5' }), 400, 'invalid_max_price_usd', 'prompt ceiling')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Image': ' 0.5' + nbsp }), 400, 'invalid_max_price_usd', 'image ceiling')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Address': nbsp + P }), 404, 'provider_not_found', 'pin')
    t.equal(requests(stack, P), before, 'nothing reached the provider')
  })

  t.test('a routing header sent twice with the same value is that value', async (t) => {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': ['price', 'price'] }), 'sort twice'), P)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': ['private', 'private'] }), 'trust mode twice'), P)
  })

  t.test('a blank copy of a routing header is unset: the other copy counts, in either order', async (t) => {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': [' ', 'price'] }), 'blank, then price'), P)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': ['private', ''] }), 'private, then blank'), P)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': ['\t', 'private', ' '] }), 'blank around private'), P)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': ['', 'private', 'standard'] }), 400, 'invalid_trust_mode', 'two values beside a blank')
  })

  t.test('a routing header sent twice with different values is 400 with its own code', async (t) => {
    const before = requests(stack, P)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Sort': ['price', 'latency'] }), 400, 'invalid_provider_header', 'sort')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': ['private', 'standard'] }), 400, 'invalid_trust_mode', 'trust mode')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Allow-Fallbacks': ['true', 'false'] }), 400, 'invalid_provider_header', 'allow-fallbacks')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': ['1', '2'] }), 400, 'invalid_max_price_usd', 'prompt ceiling')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Address': [P, Q] }), 400, 'invalid_provider_header', 'pin')
    t.equal(requests(stack, P), before, 'nothing reached the provider')
  })

  t.test('Sort: exact lowercase latency and price only, else 400 invalid_provider_header', async (t) => {
    for (const value of ['latency', 'price', ' price ']) {
      expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': value }), `sort ${JSON.stringify(value)}`)
    }
    for (const value of ['Latency', 'PRICE', 'fastest']) {
      expectError(t, await chat(stack, { 'X-SVC-Provider-Sort': value }), 400, 'invalid_provider_header', `sort ${value}`)
    }
  })

  t.test('Trust-Mode: standard, verified, private only, else 400 invalid_trust_mode', async (t) => {
    for (const value of ['standard', 'verified', 'private']) {
      t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': value }), `trust ${value}`), P)
    }
    for (const value of ['Private', 'high', 'VERIFIED']) {
      expectError(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': value }), 400, 'invalid_trust_mode', `trust ${value}`)
    }
  })

  t.test('Allow-Fallbacks and Require-Parameters: true/false in any case, else 400 invalid_provider_header', async (t) => {
    for (const name of ['X-SVC-Provider-Allow-Fallbacks', 'X-SVC-Provider-Require-Parameters']) {
      for (const value of ['true', 'false', 'TRUE', 'False']) {
        expectServed(t, await chat(stack, { [name]: value }), `${name}: ${value}`)
      }
      for (const value of ['1', '0', 'yes', 'no']) {
        expectError(t, await chat(stack, { [name]: value }), 400, 'invalid_provider_header', `${name}: ${value}`)
      }
    }
  })

  t.test('price headers: finite non-negative decimals only, else 400 invalid_max_price_usd', async (t) => {
    for (const dim of ['Prompt', 'Completion', 'Image']) {
      const name = `X-SVC-Provider-Max-Price-Usd-${dim}`
      for (const value of ['0', '0.5', '10']) {
        expectServed(t, await chat(stack, { [name]: value }), `${name}: ${value}`)
      }
      for (const value of ['NaN', 'Inf', 'Infinity', '-1', '1e3', 'abc', '0x10', '1.']) {
        expectError(t, await chat(stack, { [name]: value }), 400, 'invalid_max_price_usd', `${name}: ${value}`)
      }
    }
  })

  t.test('unknown model is 404 model_not_found', async (t) => {
    expectError(t, await chat(stack, {}, { model: 'no-such-model' }), 404, 'model_not_found')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Sort': 'price' }, { model: 'no-such-model' }), 404, 'model_not_found', 'with a sort header')
  })

  t.test('body provider: a malformed field gives the same 400 code as its header', async (t) => {
    const cases: [Record<string, unknown>, string][] = [
      [{ sort: 'fastest' }, 'invalid_provider_header'],
      [{ sort: 'PRICE' }, 'invalid_provider_header'],
      [{ trust_mode: 'high' }, 'invalid_trust_mode'],
      [{ trust_mode: 'Private' }, 'invalid_trust_mode'],
      [{ allow_fallbacks: 'yes' }, 'invalid_provider_header'],
      [{ allow_fallbacks: 1 }, 'invalid_provider_header'],
      [{ require_parameters: '0' }, 'invalid_provider_header'],
      [{ max_price: { prompt: -1 } }, 'invalid_max_price_usd'],
      [{ max_price: { completion: 'NaN' } }, 'invalid_max_price_usd'],
      [{ max_price: { image: '1e3' } }, 'invalid_max_price_usd'],
      [{ max_price: 'cheap' }, 'invalid_max_price_usd'],
    ]
    for (const [provider, code] of cases) {
      expectError(t, await chat(stack, {}, { provider }), 400, code, `provider ${JSON.stringify(provider)}`)
    }
  })

  t.test('body provider: an unknown field is 400 invalid_request', async (t) => {
    expectError(t, await chat(stack, {}, { provider: { order: [P] } }), 400, 'invalid_request', 'unknown field')
    expectError(t, await chat(stack, {}, { provider: { max_price: { request: 1 } } }), 400, 'invalid_request', 'unknown max_price field')
    expectError(t, await chat(stack, {}, { provider: 'price' }), 400, 'invalid_request', 'not an object')
  })

  t.test('body provider is stripped before the request is forwarded', async (t) => {
    const sim = stack.sims.get(P)!
    const res = await chat(stack, {}, { provider: { sort: 'price', allow_fallbacks: true }, temperature: 0.5 })
    t.equal(expectServed(t, res, 'with provider'), P)
    t.equal(sim.stats.lastBody?.provider, undefined, 'no provider member upstream')
    t.notOk(Object.hasOwn(sim.stats.lastBody ?? {}, 'provider'), 'not even as null')
    t.equal(sim.stats.lastBody?.model, MODEL, 'the rest of the body is intact')
    t.same(sim.stats.lastBody?.messages, HELLO.messages)
    t.equal(sim.stats.lastBody?.temperature, 0.5)

    const stream = await request(stack.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...stack.auth },
      body: JSON.stringify({ ...HELLO, stream: true, provider: { sort: 'latency' } }),
    })
    const text = await stream.body.text()
    t.equal(stream.statusCode, 200, 'stream served')
    t.ok(text.trimEnd().endsWith('data: [DONE]'), 'stream completes')
    t.notOk(Object.hasOwn(sim.stats.lastBody ?? {}, 'provider'), 'stream: no provider member upstream')
    t.equal(sim.stats.lastBody?.stream, true)
  })

  t.test('every error response carries request_id, x-request-id and the X-RateLimit-* headers', async (t) => {
    const ids = new Set<string>()
    const failures: [Headers, Record<string, unknown>, number, string][] = [
      [{ 'X-SVC-Provider-Sort': 'fastest' }, {}, 400, 'invalid_provider_header'],
      [{ 'X-SVC-Provider-Trust-Mode': 'high' }, {}, 400, 'invalid_trust_mode'],
      [{ 'X-SVC-Provider-Max-Price-Usd-Prompt': '-1' }, {}, 400, 'invalid_max_price_usd'],
      [{ 'X-SVC-Provider-Trust-Mode': 'verified' }, { model: 'std' }, 503, 'no_provider_for_trust_mode'],
      [{ 'X-SVC-Provider-Address': addr('9') }, {}, 404, 'provider_not_found'],
      [{}, { model: 'nope' }, 404, 'model_not_found'],
      [{}, { provider: { bogus: 1 } }, 400, 'invalid_request'],
      [{}, { messages: [] }, 400, 'invalid_request'],
    ]
    for (const [headers, body, status, code] of failures) {
      const res = await chat(stack, headers, body)
      expectError(t, res, status, code)
      ids.add(String(res.body.request_id))
    }
    t.equal(ids.size, failures.length, 'request ids are unique')
  })
})

// ---------------------------------------------------------------------------------------------------------
// Sort strategies.

t.test('price sort picks the cheapest provider', async (t) => {
  const stack = await stackFor(t, [
    { address: B, models: [{ id: MODEL, price: { prompt: 2, completion: 2 } }] },
    { address: A, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.3 } }] },
  ])
  for (let i = 0; i < 8; i++) {
    const name = i % 2 === 0 ? 'X-SVC-Provider-Sort' : 'x-svc-provider-sort'
    t.equal(expectServed(t, await chat(stack, { [name]: 'price' }), `try ${i}`), A, `try ${i}: the cheap provider`)
  }
  t.equal(requests(stack, A), 8, 'every request reached A')
  t.equal(requests(stack, B), 0, 'none reached B')
})

t.test('latency sort and the body provider object', async (t) => {
  // A is cheap but slow, B dear but fast: price and latency disagree.
  const stack = await stackFor(t, [
    { address: A, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.3 } }], sim: { ttftMs: 150 } },
    { address: B, models: [{ id: MODEL, price: { prompt: 1, completion: 1 } }], sim: { ttftMs: 5 } },
  ])
  // Warm up the time-to-first-byte EWMA: default requests, then each provider pinned so both surely have samples.
  // A's EWMA is never below its 150 ms; B gets enough samples that one slow answer on a loaded machine (its
  // first, on a cold path, say) is outweighed: B stays the faster by a wide margin.
  for (let i = 0; i < 4; i++) expectServed(t, await chat(stack), `warm-up ${i}`)
  for (const address of [A, B, A, B, B, B, B, B]) {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Address': address }), `warm-up pinned`), address)
  }
  await stack.router.table.refresh()

  t.test('latency sort picks the provider with the lowest observed time to first byte', async (t) => {
    const a = requests(stack, A)
    const b = requests(stack, B)
    for (let i = 0; i < 5; i++) {
      t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': 'latency' }), `try ${i}`), B, `try ${i}: the fast provider`)
    }
    t.equal(requests(stack, B) - b, 5, 'B got them all')
    t.equal(requests(stack, A) - a, 0, 'A got none')
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': 'price' }), 'price'), A, 'price still picks the cheap one')
  })

  t.test('body provider sort applies when no header is sent', async (t) => {
    t.equal(expectServed(t, await chat(stack, {}, { provider: { sort: 'price' } }), 'body price'), A)
    t.equal(expectServed(t, await chat(stack, {}, { provider: { sort: 'latency' } }), 'body latency'), B)
  })

  t.test('header sort wins over body sort', async (t) => {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': 'latency' }, { provider: { sort: 'price' } }), 'header latency'), B)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': 'price' }, { provider: { sort: 'latency' } }), 'header price'), A)
  })

  t.test('a blank sort header leaves the body sort in force', async (t) => {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Sort': '  ' }, { provider: { sort: 'latency' } }), 'blank header'), B)
  })
})

// ---------------------------------------------------------------------------------------------------------
// Trust floor. A standard (cheapest), C private (middle), B verified (dearest); `m2` has no private provider.

t.test('trust floor', async (t) => {
  const both = (price: { prompt: number; completion: number }) => [
    { id: MODEL, price },
    { id: 'm2', price },
  ]
  const stack = await stackFor(t, [
    { address: A, trust_mode: 'standard', models: both({ prompt: 0.1, completion: 0.1 }) },
    { address: B, trust_mode: 'verified', verifiability: 'TeeTLS', models: both({ prompt: 1, completion: 1 }) },
    { address: C, trust_mode: 'private', verifiability: 'TeeML', models: [{ id: MODEL, price: { prompt: 0.5, completion: 0.5 } }] },
  ])

  t.test('verified never goes to a standard provider', async (t) => {
    const a = requests(stack, A)
    for (let i = 0; i < 10; i++) {
      const provider = expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': 'verified' }), `try ${i}`)
      t.ok(provider === B || provider === C, `try ${i}: served by ${provider}`)
    }
    t.equal(requests(stack, A) - a, 0, 'the standard provider got nothing')
  })

  t.test('private with no private provider is 503 no_provider_for_trust_mode', async (t) => {
    const before = requests(stack, A) + requests(stack, B)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': 'private' }, { model: 'm2' }), 503, 'no_provider_for_trust_mode')
    expectError(t, await chat(stack, {}, { model: 'm2', provider: { trust_mode: 'private' } }), 503, 'no_provider_for_trust_mode', 'from the body')
    t.equal(requests(stack, A) + requests(stack, B), before, 'never served from a weaker tier')
  })

  t.test('a stronger tier satisfies a weaker floor', async (t) => {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': 'verified', 'X-SVC-Provider-Sort': 'price' }), 'verified+price'), C)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': 'standard', 'X-SVC-Provider-Sort': 'price' }), 'standard+price'), A)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Trust-Mode': 'private' }), 'private'), C)
  })

  t.test('a pinned provider below the floor is refused, not served', async (t) => {
    const a = requests(stack, A)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Address': A, 'X-SVC-Provider-Trust-Mode': 'verified' }), 503, 'no_provider_for_trust_mode')
    t.equal(requests(stack, A), a)
  })
})

// ---------------------------------------------------------------------------------------------------------
// Max price. A: 0.1 / 0.3 per 1M; B: 5 / 5 per 1M.

const CHEAP_AND_DEAR: TestProvider[] = [
  { address: A, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.3 } }] },
  { address: B, models: [{ id: MODEL, price: { prompt: 5, completion: 5 } }] },
]

t.test('max price', async (t) => {
  const stack = await stackFor(t, CHEAP_AND_DEAR)

  t.test('a ceiling removes dearer providers from the default strategy', async (t) => {
    const b = requests(stack, B)
    for (let i = 0; i < 6; i++) {
      t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '1' }), `prompt ceiling ${i}`), A)
      t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Completion': '0.3' }), `completion ceiling ${i}`), A)
    }
    t.equal(requests(stack, B), b, 'B never tried')
  })

  t.test('every candidate priced out is 400 no_provider_within_max_price', async (t) => {
    expectError(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '0.05' }), 400, 'no_provider_within_max_price', 'prompt')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Completion': '0' }), 400, 'no_provider_within_max_price', 'completion')
    expectError(
      t,
      await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '1', 'X-SVC-Provider-Max-Price-Usd-Completion': '0.2' }),
      400,
      'no_provider_within_max_price',
      'both',
    )
  })

  t.test('a pinned provider above the ceiling is 400 pinned_provider_exceeds_max_price', async (t) => {
    const b = requests(stack, B)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Address': B, 'X-SVC-Provider-Max-Price-Usd-Prompt': '1' }), 400, 'pinned_provider_exceeds_max_price')
    expectError(
      t,
      await chat(stack, { 'X-SVC-Provider-Address': B, 'X-SVC-Provider-Max-Price-Usd-Completion': '4.99', 'X-SVC-Provider-Allow-Fallbacks': 'true' }),
      400,
      'pinned_provider_exceeds_max_price',
      'even with fallbacks allowed',
    )
    t.equal(requests(stack, B), b, 'B never tried')
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Address': B, 'X-SVC-Provider-Max-Price-Usd-Prompt': '5' }), 'at the ceiling'), B)
  })

  t.test('body max_price applies while the header sets only the trust mode', async (t) => {
    const trust = { 'X-SVC-Provider-Trust-Mode': 'standard' }
    expectError(t, await chat(stack, trust, { provider: { max_price: { prompt: 0.05 } } }), 400, 'no_provider_within_max_price')
    const b = requests(stack, B)
    for (let i = 0; i < 4; i++) {
      t.equal(expectServed(t, await chat(stack, trust, { provider: { max_price: { prompt: 1 } } }), `body ceiling ${i}`), A)
    }
    t.equal(requests(stack, B), b, 'B never tried')
  })

  t.test('a price header for a dimension that does not apply (Image on chat) is inert, even at 0', async (t) => {
    const served = new Set<string | null>()
    for (let i = 0; i < 6; i++) {
      served.add(expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Image': '0' }), `image ceiling 0, try ${i}`))
    }
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Image': '0', 'X-SVC-Provider-Address': B }), 'pinned B'), B)
    t.equal(
      expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Image': '0', 'X-SVC-Provider-Sort': 'price', 'X-SVC-Provider-Max-Price-Usd-Prompt': '0.1' }), 'with a prompt ceiling'),
      A,
    )
    t.ok([...served].every((p) => p === A || p === B), 'served by the chat providers')
  })

  t.test('a header ceiling wins over the body ceiling of the same dimension', async (t) => {
    const res = await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '10', 'X-SVC-Provider-Address': B }, { provider: { max_price: { prompt: 0.05 } } })
    t.equal(expectServed(t, res, 'header 10 over body 0.05'), B)
  })
})

t.test('a ceiling of 0.49999999999999999 is below a price of 0.50: ceilings are compared as exact decimals', async (t) => {
  // As a double, 0.49999999999999999 is 0.5: a float comparison admitted the provider priced 0.50.
  const stack = await stackFor(t, [{ address: A, models: [{ id: MODEL, price: { prompt: 0.5, completion: 0.5 } }] }])
  const justBelow = '0.49999999999999999'
  const farBelow = '0.49999999999999999999' // 20 decimals: more than atto-USD holds, and still below 0.5

  await t.test('header', async (t) => {
    for (const [name, value] of [
      ['X-SVC-Provider-Max-Price-Usd-Prompt', justBelow],
      ['X-SVC-Provider-Max-Price-Usd-Completion', justBelow],
      ['X-SVC-Provider-Max-Price-Usd-Prompt', farBelow],
      ['X-SVC-Provider-Max-Price-Usd-Completion', farBelow],
    ] as const) {
      expectError(t, await chat(stack, { [name]: value }), 400, 'no_provider_within_max_price', `${name}: ${value}`)
      expectError(t, await chat(stack, { [name]: value, 'X-SVC-Provider-Address': A }), 400, 'pinned_provider_exceeds_max_price', `pinned, ${name}: ${value}`)
    }
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '0.5' }), 'a ceiling equal to the price'), A)
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '0.50000000000000000001' }), 'a hair above'), A)
  })

  await t.test('body', async (t) => {
    for (const value of [justBelow, farBelow]) {
      for (const dim of ['prompt', 'completion']) {
        const provider = { max_price: { [dim]: value } }
        expectError(t, await chat(stack, {}, { provider }), 400, 'no_provider_within_max_price', `max_price.${dim} ${value}`)
      }
    }
    t.equal(expectServed(t, await chat(stack, {}, { provider: { max_price: { prompt: 0.5, completion: '0.5' } } }), 'equal, as a number and a string'), A)
  })
  t.equal(requests(stack, A), 3, 'only the requests within the ceiling reached the provider')
})

t.test('max price is a hard filter before failover: the cheap provider fails and the dear one is never tried', async (t) => {
  const stack = await stackFor(t, [{ ...CHEAP_AND_DEAR[0]!, sim: { fault: 'status-500' } }, CHEAP_AND_DEAR[1]!])
  const res = await chat(stack, { 'X-SVC-Provider-Max-Price-Usd-Prompt': '1' })
  expectError(t, res, 502, 'provider_error')
  t.same(
    res.body.x_svc_trace?.attempts.map((a) => [a.provider, a.status]),
    [[A, 500]],
    'attempts list only the cheap provider',
  )
  t.equal(requests(stack, B), 0, 'the provider above the ceiling got nothing')
  // Control: without the ceiling the same failure fails over to B.
  const control = await chat(stack, { 'X-SVC-Provider-Sort': 'price' })
  t.equal(expectServed(t, control, 'no ceiling'), B)
  t.same(
    control.body.x_svc_trace?.attempts.map((a) => [a.provider, a.status]),
    [
      [A, 500],
      [B, 200],
    ],
  )
})

// ---------------------------------------------------------------------------------------------------------
// Pin. A cheap, B dear.

t.test('pin', async (t) => {
  const stack = await stackFor(t, CHEAP_AND_DEAR)

  t.test('goes to the pinned provider even when sort=price points elsewhere', async (t) => {
    for (let i = 0; i < 3; i++) {
      t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Address': B, 'X-SVC-Provider-Sort': 'price' }), `try ${i}`), B)
    }
    t.equal(expectServed(t, await chat(stack, {}, { provider: { address: B, sort: 'price' } }), 'pinned in the body'), B)
  })

  t.test('the pinned address is matched case-insensitively', async (t) => {
    t.equal(expectServed(t, await chat(stack, { 'X-SVC-Provider-Address': '0x' + 'B'.repeat(40) }), 'upper-case hex'), B)
  })

  t.test('an unknown pinned address is 404 provider_not_found', async (t) => {
    expectError(t, await chat(stack, { 'X-SVC-Provider-Address': addr('9') }), 404, 'provider_not_found')
    expectError(t, await chat(stack, { 'X-SVC-Provider-Address': 'not-an-address' }), 404, 'provider_not_found', 'malformed')
    expectError(
      t,
      await chat(stack, { 'X-SVC-Provider-Address': addr('9'), 'X-SVC-Provider-Allow-Fallbacks': 'true' }),
      404,
      'provider_not_found',
      'fallbacks do not paper over it',
    )
  })

  t.test('pin skips the parameter filters', async (t) => {
    const res = await chat(
      stack,
      { 'X-SVC-Provider-Address': A, 'X-SVC-Provider-Require-Parameters': 'true' },
      { tools: [WEATHER_TOOL], seed: 7 },
    )
    t.equal(expectServed(t, res, 'A advertises no parameters'), A)
    expectError(t, await chat(stack, { 'X-SVC-Provider-Require-Parameters': 'true' }, { seed: 7 }), 400, 'model_not_capable', 'unpinned control')
  })
})

t.test('pinned provider failing', async (t) => {
  // A high threshold keeps A healthy throughout, so every test sees it as the first choice.
  const stack = await stackFor(t, [{ ...CHEAP_AND_DEAR[0]!, sim: { fault: 'status-500' } }, CHEAP_AND_DEAR[1]!], { routing: { failure_threshold: 100 } })

  t.test('without Allow-Fallbacks: 502 with one attempt', async (t) => {
    const res = await chat(stack, { 'X-SVC-Provider-Address': A })
    expectError(t, res, 502, 'provider_error')
    t.same(res.body.x_svc_trace?.attempts.map((a) => [a.provider, a.status]), [[A, 500]])
    t.equal(requests(stack, B), 0, 'no fallback')
  })

  t.test('with Allow-Fallbacks true: served by another provider, two attempts', async (t) => {
    const res = await chat(stack, { 'X-SVC-Provider-Address': A, 'X-SVC-Provider-Allow-Fallbacks': 'true' })
    t.equal(expectServed(t, res, 'fallback'), B)
    t.same(
      res.body.x_svc_trace?.attempts.map((a) => [a.provider, a.status]),
      [
        [A, 500],
        [B, 200],
      ],
    )
  })

  t.test('Allow-Fallbacks from the body re-enables fallback for a header pin', async (t) => {
    const res = await chat(stack, { 'X-SVC-Provider-Address': A }, { provider: { allow_fallbacks: true } })
    t.equal(expectServed(t, res, 'body fallback'), B)
    t.equal(res.body.x_svc_trace?.attempts.length, 2)
  })

  t.test('Allow-Fallbacks false without a pin stops after the first failure', async (t) => {
    const b = requests(stack, B)
    const res = await chat(stack, { 'X-SVC-Provider-Sort': 'price', 'X-SVC-Provider-Allow-Fallbacks': 'false' })
    expectError(t, res, 502, 'provider_error')
    t.equal(res.body.x_svc_trace?.attempts.length, 1)
    t.equal(requests(stack, B), b)
  })
})

// ---------------------------------------------------------------------------------------------------------
// Require-Parameters. A cheap: temperature, max_tokens, cap 100. B dear: + tools, cap 200. `uncapped` is served
// by C, which advertises max_tokens but never reported a cap.

t.test('Require-Parameters', async (t) => {
  const stack = await stackFor(t, [
    { address: A, models: [{ id: MODEL, supported_parameters: ['temperature', 'max_tokens'], max_completion_tokens: 100, price: { prompt: 0.1, completion: 0.1 } }] },
    {
      address: B,
      models: [{ id: MODEL, supported_parameters: ['temperature', 'max_tokens', 'tools', 'tool_choice'], max_completion_tokens: 200, price: { prompt: 1, completion: 1 } }],
    },
    { address: C, models: [{ id: 'uncapped', supported_parameters: ['temperature', 'max_tokens'], price: { prompt: 0.1, completion: 0.1 } }] },
  ])
  const price = { 'X-SVC-Provider-Sort': 'price' }
  const strict = { 'X-SVC-Provider-Sort': 'price', 'X-SVC-Provider-Require-Parameters': 'true' }

  t.test('off: prefers a capable provider even when it is dearer', async (t) => {
    t.equal(expectServed(t, await chat(stack, price), 'no parameters'), A, 'control: the cheap one')
    for (let i = 0; i < 3; i++) {
      t.equal(expectServed(t, await chat(stack, price, { tools: [WEATHER_TOOL] }), `tools ${i}`), B)
    }
    t.equal(expectServed(t, await chat(stack, { ...price, 'X-SVC-Provider-Require-Parameters': 'false' }, { tools: [WEATHER_TOOL] }), 'explicit false'), B)
  })

  t.test('off: falls back to incapable providers when none is capable, no 400', async (t) => {
    t.equal(expectServed(t, await chat(stack, price, { seed: 7 }), 'seed: nobody advertises it'), A)
  })

  t.test('on: drops incapable providers', async (t) => {
    const a = requests(stack, A)
    for (let i = 0; i < 3; i++) {
      t.equal(expectServed(t, await chat(stack, strict, { tools: [WEATHER_TOOL] }), `tools ${i}`), B)
    }
    t.equal(requests(stack, A), a, 'A never tried')
  })

  t.test('on: none capable is 400 model_not_capable', async (t) => {
    expectError(t, await chat(stack, strict, { seed: 7 }), 400, 'model_not_capable')
    expectError(t, await chat(stack, {}, { seed: 7, provider: { require_parameters: true } }), 400, 'model_not_capable', 'from the body')
  })

  t.test('on: max_tokens above every reported cap is 400 no_provider_within_max_tokens', async (t) => {
    expectError(t, await chat(stack, strict, { max_tokens: 500 }), 400, 'no_provider_within_max_tokens')
    expectError(t, await chat(stack, strict, { max_completion_tokens: 201 }), 400, 'no_provider_within_max_tokens', 'max_completion_tokens')
    t.equal(expectServed(t, await chat(stack, strict, { max_tokens: 150 }), 'only B holds 150'), B)
    t.equal(expectServed(t, await chat(stack, strict, { max_tokens: 100 }), 'A holds 100'), A)
  })

  t.test('on: max_tokens where only a provider that never reported a cap exists is 400 no_provider_within_max_tokens', async (t) => {
    expectError(t, await chat(stack, strict, { model: 'uncapped', max_tokens: 10 }), 400, 'no_provider_within_max_tokens')
    t.equal(requests(stack, C), 0)
  })

  t.test('off: an unreported cap is unknown, not incapable', async (t) => {
    t.equal(expectServed(t, await chat(stack, price, { model: 'uncapped', max_tokens: 10 }), 'uncapped'), C)
    t.equal(expectServed(t, await chat(stack, price, { max_tokens: 500 }), 'above every cap, off'), A)
  })
})

t.test(
  'Require-Parameters on: the output cap alone decides max_tokens, not the supported_parameters list',
  async (t) => {
    const stack = await stackFor(t, [
      { address: A, models: [{ id: MODEL, max_completion_tokens: 1000, price: { prompt: 0.1, completion: 0.1 } }] },
      { address: B, models: [{ id: 'uncapped', price: { prompt: 0.1, completion: 0.1 } }] },
    ])
    const strict = { 'X-SVC-Provider-Require-Parameters': 'true' }
    t.equal(expectServed(t, await chat(stack, strict, { max_tokens: 10 }), 'cap 1000 holds 10'), A)
    expectError(t, await chat(stack, strict, { model: 'uncapped', max_tokens: 10 }), 400, 'no_provider_within_max_tokens', 'cap never reported')
  },
)
