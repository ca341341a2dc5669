/**
 * RequestHead.conflictingHeader through a real listen(): uWS's getHeader sees only a field's first
 * occurrence, so a repeated authorization, content type, content length or routing header whose copies
 * disagree is reported for the routing stage to refuse. Repeats that agree (after HTTP's optional whitespace)
 * and repeats of other fields are not conflicts.
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

t.test('a routing header repeated with another value is reported by its lower-case name; the first value is kept', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, ['X-SVC-Provider-Sort: price', 'x-svc-provider-sort: latency'])
  t.equal(head.conflictingHeader, 'x-svc-provider-sort')
  t.equal(head.providerSort, 'price', 'the fields still hold the first occurrence, as getHeader did')
})

t.test('each of the eleven copied headers is checked', async (t) => {
  const port = await startEcho(t)
  for (const name of Object.values(HEADER)) {
    if (name === HEADER.contentLength) continue // framed by uWS: its own test below
    const head = await headOf(port, [`${name}: one`, 'x-unrelated: 1', `${name}: two`])
    t.equal(head.conflictingHeader, name, name)
  }
})

t.test('a blank first occurrence and a set second one conflict: one of them would be ignored', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, ['x-svc-provider-max-price-usd-image:', 'x-svc-provider-max-price-usd-image: 0.5'])
  t.equal(head.conflictingHeader, 'x-svc-provider-max-price-usd-image')
  t.equal(head.maxPriceImage, '')
})

t.test('two Content-Length values conflict (uWS frames the body by the first)', async (t) => {
  const port = await startEcho(t)
  const same = await headOf(port, ['Content-Length: 2', 'content-length: 2'], 'POST /head HTTP/1.1', 'hi')
  t.equal(same.conflictingHeader, '')
  const differ = await headOf(port, ['Content-Length: 2', 'content-length: 3'], 'POST /head HTTP/1.1', 'hi')
  t.equal(differ.conflictingHeader, 'content-length')
  t.equal(differ.contentLength, '2')
})

t.test('repeats of fields the head does not copy are not its business', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, ['Accept: a/b', 'Accept: c/d', 'X-Forwarded-For: 1.1.1.1', 'X-Forwarded-For: 2.2.2.2'])
  t.equal(head.conflictingHeader, '')
})

t.test('with several conflicts one is reported, the first sent', async (t) => {
  const port = await startEcho(t)
  const head = await headOf(port, [
    'Authorization: Bearer sk-a',
    'X-SVC-Provider-Sort: price',
    'X-SVC-Provider-Sort: latency',
    'Authorization: Bearer sk-b',
  ])
  t.equal(head.conflictingHeader, 'x-svc-provider-sort')
  t.equal(head.authorization, 'Bearer sk-a')
})

t.test('a head built for one request leaves nothing behind for the next', async (t) => {
  const port = await startEcho(t)
  t.equal((await headOf(port, ['Authorization: Bearer sk-a', 'Authorization: Bearer sk-b'])).conflictingHeader, 'authorization')
  const next = await headOf(port, ['X-SVC-Provider-Sort: price'])
  t.same(next, { conflictingHeader: '', authorization: '', contentLength: '', providerSort: 'price', maxPriceImage: '' })
})
