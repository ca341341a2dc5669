/**
 * RequestHead.conflictingHeader through a real listen(): uWS's getHeader sees only a field's first
 * occurrence, so a repeated routing header whose copies disagree is reported for the routing stage to refuse,
 * and a repeated authorization, content type or content length is refused by the front end itself (400, then
 * the connection is closed). Repeats that agree (after HTTP's optional whitespace) and repeats of other fields
 * are not conflicts.
 */
import t, { type Test } from 'tap'
import { listen } from '../../src/server/app.js'
import { HEADER, type RequestHead } from '../../src/server/request-head.js'
import { exchange, parseResponses, responses } from './raw-http.js'

/** GET and POST /head answer with what the head copied: the conflict, and the values kept. */
async function startEcho(t: Test): Promise<number> {
  const echo = (head: RequestHead) =>
    JSON.stringify({
      conflictingHeader: head.conflictingHeader,
      authorization: head.authorization,
      contentLength: head.contentLength,
      providerSort: head.providerSort,
      maxPriceImage: head.maxPriceImage,
    })
  const app = await listen('127.0.0.1', 0, [
    { method: 'get', pattern: '/head', handler: (head, reply) => reply.send(200, ['Content-Type', 'application/json'], echo(head)) },
    {
      method: 'post',
      pattern: '/head',
      handler: (head, reply) =>
        reply.readBody(
          64,
          () => reply.send(200, ['Content-Type', 'application/json'], echo(head)),
          () => reply.send(413, [], ''),
        ),
    },
  ])
  t.teardown(() => app.close())
  return app.port
}

/** Sends GET /head with `fields` (raw lines, in order) and returns what the head held. */
async function headOf(port: number, fields: readonly string[], request = 'GET /head HTTP/1.1', body = ''): Promise<Record<string, string>> {
  const raw = `${request}\r\nHost: a\r\n${fields.map((f) => f + '\r\n').join('')}\r\n${body}`
  const res = await exchange(port, [raw], { waitMs: 5_000, until: responses(1) })
  const [answer] = parseResponses(res.text)
  if (answer?.status !== 200) throw new Error(`unexpected answer: ${JSON.stringify(res.text.slice(0, 200))}`)
  return JSON.parse(answer.body) as Record<string, string>
}

t.test('no repeated field: no conflict', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, ['Authorization: Bearer sk-a', 'X-SVC-Provider-Sort: price'])
  t.equal(head.conflictingHeader, '')
  t.equal(head.authorization, 'Bearer sk-a')
  t.equal(head.providerSort, 'price')
})

t.test('repeats with the same value, or values that differ only by SP and HTAB around them, are no conflict', async (t) => {
  const port = await startEcho(t)
  t.equal((await headOf(port, ['x-svc-provider-sort: price', 'x-svc-provider-sort: price'])).conflictingHeader, '')
  const spaced = await headOf(port, ['x-svc-provider-sort: price', 'x-svc-provider-sort: \t price \t', 'X-SVC-Provider-Sort:price'])
  t.equal(spaced.conflictingHeader, '')
  t.equal(spaced.providerSort, 'price')
})

t.test('repeats of a routing header that say the same in other words are no conflict; other meanings are', async (t) => {
  const port = await startEcho(t)
  const same = [
    ['x-svc-provider-allow-fallbacks: true', 'X-SVC-Provider-Allow-Fallbacks: TRUE'],
    ['x-svc-provider-require-parameters: False', 'x-svc-provider-require-parameters: false'],
    [`x-svc-provider-address: 0x${'ab'.repeat(20)}`, `x-svc-provider-address: 0x${'AB'.repeat(20)}`],
    ['x-svc-provider-max-price-usd-prompt: 1', 'x-svc-provider-max-price-usd-prompt: 1.0'],
    ['x-svc-provider-max-price-usd-image: 0.50', 'x-svc-provider-max-price-usd-image: 0.5'],
  ]
  for (const fields of same) t.equal((await headOf(port, fields)).conflictingHeader, '', fields.join(' + '))
  const different = [
    ['x-svc-provider-allow-fallbacks: true', 'x-svc-provider-allow-fallbacks: false'],
    ['x-svc-provider-allow-fallbacks: yes', 'x-svc-provider-allow-fallbacks: YES'],
    ['x-svc-provider-max-price-usd-prompt: 1', 'x-svc-provider-max-price-usd-prompt: 1.01'],
    ['x-svc-provider-sort: price', 'x-svc-provider-sort: Price'],
  ]
  for (const fields of different) t.not((await headOf(port, fields)).conflictingHeader, '', fields.join(' + '))
})

t.test('a routing header repeated with another value is reported by its lower-case name; the first value is kept', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, ['X-SVC-Provider-Sort: price', 'x-svc-provider-sort: latency'])
  t.equal(head.conflictingHeader, 'x-svc-provider-sort')
  t.equal(head.providerSort, 'price', 'the fields still hold the first occurrence, as getHeader did')
})

const FRONT_END_REFUSED: readonly string[] = [HEADER.authorization, HEADER.xApiKey, HEADER.contentType, HEADER.contentLength]

t.test('each of the routing headers is checked and reported to the route', async (t) => {
  const port = await startEcho(t)
  for (const name of Object.values(HEADER)) {
    if (FRONT_END_REFUSED.includes(name)) continue // refused by the front end itself: tests below
    const head = await headOf(port, [`${name}: one`, 'x-unrelated: 1', `${name}: two`])
    t.equal(head.conflictingHeader, name, name)
  }
})

/** Sends a request and returns the one answer and how the connection ended. */
async function refused(port: number, fields: readonly string[], request = 'GET /head HTTP/1.1', body = '') {
  const raw = `${request}\r\nHost: a\r\n${fields.map((f) => f + '\r\n').join('')}\r\n${body}`
  const res = await exchange(port, [raw], { waitMs: 5_000 })
  const [answer] = parseResponses(res.text)
  return { answer: answer!, end: res.end }
}

t.test('authorization, content-type or content-length sent twice with different values: 400 and the connection closed', async (t) => {
  const port = await startEcho(t)
  const cases: [string, string[], string, string][] = [
    ['authorization', ['Authorization: Bearer sk-a', 'Authorization: Bearer sk-b'], 'GET /head HTTP/1.1', ''],
    ['x-api-key', ['x-api-key: sk-a', 'X-Api-Key: sk-b'], 'GET /head HTTP/1.1', ''],
    ['content-type', ['Content-Type: application/json', 'Content-Type: text/plain', 'Content-Length: 2'], 'POST /head HTTP/1.1', 'hi'],
    // uWS frames the body by the first Content-Length: a second, different one is a smuggling probe.
    ['content-length', ['Content-Length: 2', 'content-length: 3'], 'POST /head HTTP/1.1', 'hi'],
  ]
  for (const [name, fields, request, body] of cases) {
    const { answer, end } = await refused(port, fields, request, body)
    t.equal(answer.status, 400, name)
    const parsed = JSON.parse(answer.body)
    t.equal(parsed.error.code, 'invalid_request', name)
    t.match(parsed.error.message, new RegExp(`${name} header was sent more than once`), name)
    t.match(parsed.request_id, /^req_/)
    t.equal(end, 'fin', `${name}: the connection is closed`)
  }
  const same = await headOf(port, ['Content-Length: 2', 'content-length: 2'], 'POST /head HTTP/1.1', 'hi')
  t.equal(same.conflictingHeader, '', 'repeats that agree are served')
})

t.test('a blank occurrence beside a set one is no conflict: the set one counts, whichever came first', async (t) => {
  // Blank means unset (spec §4.7), and repeats combine as a list whose empty elements a recipient ignores
  // (RFC 9110 §5.6.1): ", 0.5" is "0.5".
  const port = await startEcho(t)
  const first = await headOf(port, ['x-svc-provider-max-price-usd-image:', 'x-svc-provider-max-price-usd-image: 0.5'])
  t.equal(first.conflictingHeader, '')
  t.equal(first.maxPriceImage, '0.5')
  const second = await headOf(port, ['x-svc-provider-max-price-usd-image: 0.5', 'x-svc-provider-max-price-usd-image:  '])
  t.equal(second.conflictingHeader, '')
  t.equal(second.maxPriceImage, '0.5')
})

t.test('repeats of fields the head does not copy are not its business', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, ['Accept: a/b', 'Accept: c/d', 'X-Forwarded-For: 1.1.1.1', 'X-Forwarded-For: 2.2.2.2'])
  t.equal(head.conflictingHeader, '')
})

t.test('with several conflicts one is reported, the first sent', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, [
    'X-SVC-Provider-Sort: price',
    'X-SVC-Provider-Max-Price-Usd-Image: 1',
    'X-SVC-Provider-Sort: latency',
    'X-SVC-Provider-Max-Price-Usd-Image: 2',
  ])
  t.equal(head.conflictingHeader, 'x-svc-provider-sort')
  t.equal(head.maxPriceImage, '1')
})

t.test('a head built for one request leaves nothing behind for the next', async (t) => {
  const port = await startEcho(t)
  t.equal((await headOf(port, ['X-SVC-Provider-Sort: price', 'X-SVC-Provider-Sort: latency'])).conflictingHeader, 'x-svc-provider-sort')
  const next = await headOf(port, ['X-SVC-Provider-Sort: price'])
  t.same(next, { conflictingHeader: '', authorization: '', contentLength: '', providerSort: 'price', maxPriceImage: '' })
})
