/**
 * What the front end does with requests it cannot serve, probed with raw sockets the way hostile or old
 * clients send them, on whichever uWS build loads (src/server/uws-build.ts): a head over the limit gets 431
 * (from the router in the API's envelope, or past twice the limit from uWS itself), HTTP/1.0 and other versions
 * get uWS's 505 at once, up to 98 fields are served. What only the core decides (a head it cannot parse: 99
 * fields or more, no Host, a malformed field line) is answered at once by a current core and held until the
 * idle timeout by the older one of uwebsockets' Node 20 binary; test/helpers/uws-builds.ts says which core the
 * loaded binary has. After each, the same server still serves a new connection.
 */
import t, { type Test } from 'tap'
import { listen, MAX_HEADER_BYTES, UWS_HEAD_LIMIT_FACTOR, type AppHandle, type Route } from '../../src/server/app.js'
import { uwsBuild } from '../../src/server/uws-build.js'
import { addr, startStack } from '../helpers/stack.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { knownBinary } from '../helpers/uws-builds.js'
import { exchange, parseResponses, responses, type RawExchange } from './raw-http.js'

/** uWS's idle timeout is 10 s counted in 4 s ticks: a held connection closes 8–12 s after it opened. */
const IDLE_CLOSE_MS = 15_000
/** What "at once" means here, with room for a loaded CI machine. */
const PROMPTLY_MS = 2_000
/** The limit every listen in this process gives uWS (it takes it once, when it loads). */
const UWS_LIMIT = UWS_HEAD_LIMIT_FACTOR * MAX_HEADER_BYTES
const build = uwsBuild({ maxHeadBytes: UWS_LIMIT })
/** Whether this build's core holds a head it cannot parse (unrecorded builds are taken for current ones). */
const HOLDS = knownBinary(build.sha256)?.holdsUnparsable ?? false
const CORE = `${build.candidate.name} ${build.version} (${HOLDS ? 'holds unparsable heads' : 'answers unparsable heads'})`

interface Probe {
  readonly app: AppHandle
  /** Handlers of POST /slow that saw their client go away before they answered. */
  aborted: number
}

/**
 * GET /ok answers at once; POST /slow reads its body and answers SLOW_MS later, as an inference route would.
 * SLOW_MS is long enough that a request pipelined 10 ms behind a /slow one surely arrives while it is
 * pending, even when the test process stalls for a moment (both ends share one event loop).
 */
const SLOW_MS = 1000

async function startProbe(t: Test): Promise<Probe> {
  const probe = { aborted: 0 } as Probe
  const routes: Route[] = [
    { method: 'get', pattern: '/ok', handler: (_head, reply) => reply.send(200, ['Content-Type', 'text/plain'], 'ok') },
    {
      method: 'post',
      pattern: '/slow',
      handler: (_head, reply) => {
        let timer: NodeJS.Timeout | undefined
        reply.onAborted(() => {
          probe.aborted++
          clearTimeout(timer)
        })
        reply.readBody(
          1024,
          (body) => {
            timer = setTimeout(() => reply.send(200, ['Content-Type', 'text/plain'], `slow:${body.toString()}`), SLOW_MS)
          },
          () => reply.send(413, [], ''),
        )
      },
    },
  ]
  ;(probe as { app: AppHandle }).app = await listen('127.0.0.1', 0, routes)
  t.teardown(() => probe.app.close())
  return probe
}

/** A GET `path` head of exactly `bytes` bytes, padded by one field. */
function headOfSize(bytes: number, path = '/ok'): string {
  const start = `GET ${path} HTTP/1.1\r\nHost: a\r\nx-pad: `
  const end = '\r\n\r\n'
  return start + 'p'.repeat(bytes - start.length - end.length) + end
}

/** `count` fields in all, Host included. */
function headWithFields(count: number, version = 'HTTP/1.1'): string {
  let head = `GET /ok ${version}\r\nHost: a\r\n`
  for (let i = 1; i < count; i++) head += `x-field-${i}: ${i}\r\n`
  return head + '\r\n'
}

/** `head` in two reads, cut at `at`. */
const inTwo = (head: string, at = 2000): string[] => [head.slice(0, at), head.slice(at)]

async function assertStillServes(t: Test, port: number): Promise<void> {
  const res = await exchange(port, ['GET /ok HTTP/1.1\r\nHost: a\r\n\r\n'], { waitMs: 5_000, until: responses(1) })
  t.equal(parseResponses(res.text)[0]?.statusLine, 'HTTP/1.1 200 OK', 'a normal request on a new connection is served')
}

/** uWS's own answer `status` at once, and the connection closed. */
function assertUwsAnswered(t: Test, res: RawExchange, status: number, what: string): void {
  t.equal(res.text.slice(0, 13), `HTTP/1.1 ${status} `, `${what}: uWS answers ${status}: ${JSON.stringify(res.text.slice(0, 60))}`)
  t.match(res.text, /\r\nConnection: close\r\n/i, `${what}: and says it closes`)
  t.equal(res.end, 'fin', `${what}: the server closed the connection`)
  t.ok(res.ms < PROMPTLY_MS, `${what}: at once (${Math.round(res.ms)} ms)`)
}

/** Closed by the server without an answer within `ms`. */
function assertClosedUnanswered(t: Test, res: RawExchange, ms: number, what: string): void {
  t.not(res.end, 'open', `${what}: the server closed the connection (after ${Math.round(res.ms)} ms)`)
  t.ok(res.ms < ms, `${what}: closed within ${ms} ms (${Math.round(res.ms)} ms)`)
  t.equal(res.text, '', `${what}: no answer`)
}

/** A head the core cannot parse: answered at once by a current core (`status`), held then closed by an older one. */
function assertUnparsable(t: Test, res: RawExchange, status: number, what: string): void {
  if (HOLDS) assertClosedUnanswered(t, res, IDLE_CLOSE_MS, `${what} (${CORE})`)
  else assertUwsAnswered(t, res, status, `${what} (${CORE})`)
}

/** The router's 431 in the OpenAI envelope for a head of `bytes`, and the connection closed. */
function assertRouter431(t: Test, res: RawExchange, bytes: number, limit: number, what: string): void {
  t.equal(res.end, 'fin', `${what}: the server closed the connection after answering`)
  t.ok(res.ms < PROMPTLY_MS, `${what}: at once (${Math.round(res.ms)} ms)`)
  const [answer, ...more] = parseResponses(res.text)
  t.equal(answer?.statusLine, 'HTTP/1.1 431 Request Header Fields Too Large', what)
  t.same(more, [], `${what}: nothing else was sent`)
  t.equal(answer?.headers['connection'], 'close')
  t.equal(answer?.headers['content-type'], 'application/json')
  const body = JSON.parse(answer?.body ?? 'null')
  t.same(body?.error, {
    message: `the request head is ${bytes} bytes; the limit is ${limit}`,
    type: 'invalid_request_error',
    code: 'request_header_fields_too_large',
  })
  t.match(body?.request_id, /^req_/)
  t.equal(answer?.headers['x-request-id'], body?.request_id)
}

t.test('a head over 4 KiB sent in one piece is answered 431 in the envelope, and the connection closed', async (t) => {
  const { app } = await startProbe(t)
  const res = await exchange(app.port, [headOfSize(MAX_HEADER_BYTES + 1)], { waitMs: 5_000 })
  assertRouter431(t, res, MAX_HEADER_BYTES + 1, MAX_HEADER_BYTES, '4097 bytes')
  await assertStillServes(t, app.port)
})

t.test('a head of exactly 4 KiB is served, in one piece or in two', async (t) => {
  const { app } = await startProbe(t)
  const head = headOfSize(MAX_HEADER_BYTES)
  for (const parts of [[head], inTwo(head)]) {
    const res = await exchange(app.port, parts, { waitMs: 5_000, gapMs: 50, until: responses(1) })
    const [answer] = parseResponses(res.text)
    t.equal(answer?.statusLine, 'HTTP/1.1 200 OK', `${parts.length} piece(s)`)
    t.equal(answer?.body, 'ok')
  }
})

t.test('a head over 4 KiB gets 431 at once however it arrives: the envelope up to 8 KiB, uWS\'s own past it', async (t) => {
  const { app } = await startProbe(t)
  for (const bytes of [MAX_HEADER_BYTES + 1, 6000, UWS_LIMIT]) {
    for (const parts of [[headOfSize(bytes)], inTwo(headOfSize(bytes)), inTwo(headOfSize(bytes), bytes - 10)]) {
      const res = await exchange(app.port, parts, { waitMs: 5_000, gapMs: 50 })
      assertRouter431(t, res, bytes, MAX_HEADER_BYTES, `${bytes} bytes in ${parts.length} piece(s)`)
    }
  }
  // Past uWS's limit: the router's envelope where this core hands the head over (the older core, in one read),
  // uWS's own 431 where it does not. Either way a 431, at once, and the connection closed.
  for (const bytes of [UWS_LIMIT + 1, 16 * 1024, 64 * 1024]) {
    for (const parts of [[headOfSize(bytes)], inTwo(headOfSize(bytes))]) {
      const what = `${bytes} bytes in ${parts.length} piece(s)`
      const res = await exchange(app.port, parts, { waitMs: 5_000, gapMs: 50 })
      t.equal(res.text.slice(0, 13), 'HTTP/1.1 431 ', `${what}: 431 (${res.text.includes('"request_header_fields_too_large"') ? 'envelope' : "uWS's own"})`)
      t.equal(res.end, 'fin', `${what}: closed`)
      t.ok(res.ms < PROMPTLY_MS, `${what}: at once (${Math.round(res.ms)} ms)`)
      if (parts.length === 2 || !HOLDS) t.notMatch(res.text, /request_header_fields_too_large/, `${what}: uWS's own answer`)
    }
  }
  await assertStillServes(t, app.port)
})

t.test('the 431 comes before routing: an unknown path, and a POST whose body is never read', async (t) => {
  const { app } = await startProbe(t)
  const unknown = await exchange(app.port, [headOfSize(MAX_HEADER_BYTES + 100, '/no-such-route')], { waitMs: 5_000 })
  t.equal(parseResponses(unknown.text)[0]?.status, 431, 'not 404')
  const post = `POST /slow HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nx-pad: ${'p'.repeat(MAX_HEADER_BYTES)}\r\n\r\nhello`
  const res = await exchange(app.port, [post], { waitMs: 5_000 })
  t.equal(parseResponses(res.text)[0]?.status, 431)
  t.equal(res.end, 'fin', 'closed: the body is not read as another request')
  await assertStillServes(t, app.port)
})

t.test('60 and 98 header fields are served; 99 and more are refused by uWS, never served', async (t) => {
  const { app } = await startProbe(t)
  for (const count of [48, 49, 60, 98]) {
    const served = await exchange(app.port, [headWithFields(count)], { waitMs: 5_000, until: responses(1) })
    t.equal(parseResponses(served.text)[0]?.statusLine, 'HTTP/1.1 200 OK', `${count} fields`)
  }
  const counts = [99, 100, 200]
  const results = await Promise.all(counts.map((n) => exchange(app.port, [headWithFields(n)], { waitMs: IDLE_CLOSE_MS + 5_000 })))
  counts.forEach((n, i) => assertUnparsable(t, results[i]!, 431, `${n} fields`))
  // Many fields in over 4 KiB: the size decides first.
  const many = headWithFields(60).replace(/\r\n\r\n$/, `\r\nx-pad: ${'p'.repeat(MAX_HEADER_BYTES)}\r\n\r\n`)
  const res = await exchange(app.port, [many], { waitMs: 5_000 })
  t.equal(parseResponses(res.text)[0]?.status, 431, '60 fields in over 4 KiB: 431')
  await assertStillServes(t, app.port)
})

t.test('HTTP/1.0 and other versions get 505 at once from uWS, whatever the method or body', async (t) => {
  // nginx proxies with HTTP/1.0 unless told proxy_http_version 1.1 (README "Operations notes"): it now sees a
  // 505 at once instead of a connection held for 8–12 s.
  const { app } = await startProbe(t)
  const cases: [string, string][] = [
    ['HTTP/1.0', 'GET /ok HTTP/1.0\r\nHost: a\r\n\r\n'],
    ['HTTP/1.0 with keep-alive', 'GET /ok HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n'],
    ['an HTTP/1.0 POST with a body', 'POST /slow HTTP/1.0\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi'],
    ['HTTP/1.0 without Host', 'GET /ok HTTP/1.0\r\n\r\n'],
    ['HTTP/2.0 in a request line', 'GET /ok HTTP/2.0\r\nHost: a\r\n\r\n'],
    ['lines ended by LF alone', 'GET /ok HTTP/1.1\nHost: a\n\n'],
    // RFC 9112 §3.2.2 asks servers to accept it (proxies' form); uWS does not parse it, and says 505.
    ['an absolute-form target', 'GET http://a/ok HTTP/1.1\r\nHost: a\r\n\r\n'],
  ]
  const results = await Promise.all(cases.map(([, bytes]) => exchange(app.port, [bytes], { waitMs: 5_000 })))
  cases.forEach(([what], i) => assertUwsAnswered(t, results[i]!, 505, what))
  t.notMatch(results[0]!.text, /x-request-id/i, 'no route ran: the answer is uWS\'s, not the router\'s')
  await assertStillServes(t, app.port)
})

t.test('heads uWS cannot parse are refused at once, or on the older core held no longer than its idle timeout', async (t) => {
  const { app } = await startProbe(t)
  const cases: [string, string, number][] = [
    ['no Host', 'GET /ok HTTP/1.1\r\n\r\n', 400],
    ['a space before the colon', 'GET /ok HTTP/1.1\r\nHost : a\r\n\r\n', 400],
    ['a control byte in a value', 'GET /ok HTTP/1.1\r\nHost: a\r\nx-a: b\x01c\r\n\r\n', 400],
  ]
  const results = await Promise.all(cases.map(([, bytes]) => exchange(app.port, [bytes], { waitMs: IDLE_CLOSE_MS + 5_000 })))
  cases.forEach(([what, , status], i) => assertUnparsable(t, results[i]!, status, what))
  // Content-Length beside Transfer-Encoding (a smuggling probe): every core refuses it at once.
  const smuggle = 'POST /slow HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
  assertUwsAnswered(t, await exchange(app.port, [smuggle], { waitMs: 5_000 }), 400, 'Content-Length with Transfer-Encoding')
  await assertStillServes(t, app.port)
})

t.test('raw bytes around header values: spaces and tabs are trimmed, UTF-8 is decoded, other bytes become U+FFFD', async (t) => {
  const values: string[] = []
  const app = await listen('127.0.0.1', 0, [
    {
      method: 'get',
      pattern: '/echo',
      handler: (head, reply) => {
        values.push(head.contentType)
        reply.send(200, ['Content-Type', 'text/plain'], 'ok')
      },
    },
  ])
  t.teardown(() => app.close())
  for (const [raw, seen] of [
    ['Content-Type:  text/plain  ', 'text/plain'],
    ['Content-Type:\ttext/plain\t', 'text/plain'],
    ['Content-Type: text/plain; x="\xc3\xa9"', 'text/plain; x="\u00e9"'],
    ['Content-Type: text/plain; x="\xe9"', 'text/plain; x="\ufffd"'],
  ] as const) {
    const res = await exchange(app.port, [`GET /echo HTTP/1.1\r\nHost: a\r\n${raw}\r\n\r\n`], { waitMs: 5_000, until: responses(1) })
    t.equal(parseResponses(res.text)[0]?.status, 200, JSON.stringify(raw))
    t.equal(JSON.stringify(values.pop()), JSON.stringify(seen), `${JSON.stringify(raw)}: the value the route sees`)
  }
})

t.test('pipelined requests that are answered at once each get their answer, in order', async (t) => {
  const { app } = await startProbe(t)
  const get = 'GET /ok HTTP/1.1\r\nHost: a\r\n\r\n'
  const res = await exchange(app.port, [get + get + 'GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n'], { waitMs: 5_000, until: responses(3) })
  t.same(
    parseResponses(res.text).map((r) => r.statusLine),
    ['HTTP/1.1 200 OK', 'HTTP/1.1 200 OK', 'HTTP/1.1 404 Not Found'],
  )
})

t.test('a request pipelined behind one still pending closes the connection at once; the pending one is aborted', async (t) => {
  // uWS refuses async pipelining (HttpContext.h: a request while a response is pending closes the socket),
  // so both requests go unanswered and the first handler's onAborted runs: its upstream work is cancelled.
  // RFC 9112 9.3.2: a client retries requests left unanswered by a closed connection.
  const probe = await startProbe(t)
  const post = 'POST /slow HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi'
  const together = await exchange(probe.app.port, [post + post], { waitMs: IDLE_CLOSE_MS })
  assertClosedUnanswered(t, together, PROMPTLY_MS, 'two POSTs in one write')
  const apart = await exchange(probe.app.port, [post, post], { waitMs: IDLE_CLOSE_MS, gapMs: 10 })
  assertClosedUnanswered(t, apart, PROMPTLY_MS, 'a second POST 10 ms later, before the first answer')
  t.equal(probe.aborted, 2, 'each pending handler saw the abort')

  // One at a time on one connection is fine.
  const inTurn = await exchange(probe.app.port, [post], { waitMs: 5_000, until: responses(1) })
  t.equal(parseResponses(inTurn.text)[0]?.body, 'slow:hi')
  await assertStillServes(t, probe.app.port)
})

t.test('the router as served: 431 for an oversized head, pipelined chat completions closed, then requests go on', async (t) => {
  const stack = await startStack(t, [{ address: addr('f'), models: [{ id: 'm-chat' }] }])
  const port = Number(new URL(stack.url).port)
  const body = JSON.stringify({ model: 'm-chat', messages: [{ role: 'user', content: 'hi' }] })
  const head = (extra: string) =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${stack.key}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\n${extra}\r\n`
  const refused = await exchange(port, [head(`x-pad: ${'p'.repeat(MAX_HEADER_BYTES)}\r\n`) + body], { waitMs: 5_000 })
  const [answer] = parseResponses(refused.text)
  t.equal(answer?.statusLine, 'HTTP/1.1 431 Request Header Fields Too Large')
  t.equal(JSON.parse(answer?.body ?? 'null')?.error?.code, 'request_header_fields_too_large')
  t.equal(refused.end, 'fin')

  const pipelined = await exchange(port, [head('') + body + head('') + body], { waitMs: IDLE_CLOSE_MS })
  assertClosedUnanswered(t, pipelined, PROMPTLY_MS, 'two chat completions pipelined')

  const served = await exchange(port, [head('') + body], { waitMs: 10_000, until: responses(1) })
  const [ok] = parseResponses(served.text)
  t.equal(ok?.status, 200, 'the next request, on a new connection, is served')
  t.equal(JSON.parse(ok?.body ?? 'null')?.object, 'chat.completion')

  const models = 'GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n'
  const catalog = await exchange(port, [models + models], { waitMs: 5_000, until: responses(2) })
  t.same(
    parseResponses(catalog.text).map((r) => r.status),
    [200, 200],
    'the catalog answers at once, so pipelined catalog requests are each answered',
  )
})

t.test('a 413 answered before the body ended: the rest is read as body, and the connection serves the next request', async (t) => {
  // The client is still sending when the 413 goes out. Closing then would reset a client mid-write (it sees
  // EPIPE, never the 413); uWS frames the rest of the body by its Content-Length or chunks, so a request line
  // inside it is never taken for a request of its own.
  const stack = await startStack(t, [{ address: addr('f'), models: [{ id: 'm-chat' }] }], {
    server: { max_json_body_bytes: 2048, max_multipart_body_bytes: 4096 },
  })
  const port = Number(new URL(stack.url).port)
  const inside = 'GET /v1/providers?model=m-chat HTTP/1.1\r\nHost: a\r\n\r\n'
  const body = 'x'.repeat(5000) + inside + 'y'.repeat(5000)
  const next = 'GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n'
  const chunk = (s: string) => `${s.length.toString(16)}\r\n${s}\r\n`
  for (const [path, type] of [
    ['/v1/chat/completions', 'application/json'],
    ['/v1/audio/transcriptions', 'multipart/form-data; boundary=b'],
  ] as const) {
    const head = `POST ${path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${stack.key}\r\nContent-Type: ${type}\r\n`
    const framings: [string, string[]][] = [
      ['Content-Length', [`${head}Content-Length: ${body.length}\r\n\r\n${body.slice(0, 100)}`, body.slice(100, 6000), body.slice(6000), next]],
      ['chunked', [`${head}Transfer-Encoding: chunked\r\n\r\n${chunk(body.slice(0, 6000))}`, chunk(body.slice(6000)) + '0\r\n\r\n', next]],
    ]
    for (const [framing, parts] of framings) {
      const res = await exchange(port, parts, { waitMs: 10_000, gapMs: 100, until: responses(2) })
      const answers = parseResponses(res.text)
      t.same(answers.map((r) => r.status), [413, 200], `${path}, ${framing}: the 413, then the next request's answer`)
      t.equal(JSON.parse(answers[0]?.body ?? 'null')?.error?.code, 'request_too_large')
      t.equal(JSON.parse(answers[1]?.body ?? 'null')?.object, 'list', 'the answer is the catalog, not the providers inside the body')
    }
  }
})

t.test('server.max_head_bytes raises the limit: 16 KiB heads are served, one byte more gets 431', async (t) => {
  // uWS takes its limit once, when it loads: another limit needs a process of its own.
  const limit = 16 * 1024
  const sim = await startSimulator({ name: 'head-limit' })
  t.teardown(() => sim.close())
  const provider = { address: addr('f'), url: sim.url, models: [{ id: 'm-chat', price: { prompt: 0.1, completion: 0.1 } }] }
  const router = await spawnRouter(t, [provider], { server: { max_head_bytes: limit } })
  const port = Number(new URL(router.url).port)
  for (const bytes of [8 * 1024, 8 * 1024 + 1, limit]) {
    for (const parts of [[headOfSize(bytes, '/v1/models')], inTwo(headOfSize(bytes, '/v1/models'), 5000)]) {
      const res = await exchange(port, parts, { waitMs: 5_000, gapMs: 50, until: responses(1) })
      const [answer] = parseResponses(res.text)
      t.equal(answer?.status, 200, `${bytes} bytes in ${parts.length} piece(s)`)
      t.equal(JSON.parse(answer?.body ?? 'null')?.object, 'list')
    }
  }
  for (const parts of [[headOfSize(limit + 1, '/v1/models')], inTwo(headOfSize(limit + 1, '/v1/models'), 5000)]) {
    const res = await exchange(port, parts, { waitMs: 5_000, gapMs: 50 })
    assertRouter431(t, res, limit + 1, limit, `${limit + 1} bytes in ${parts.length} piece(s)`)
  }
  for (const parts of [[headOfSize(2 * limit + 1, '/v1/models')], inTwo(headOfSize(2 * limit + 1, '/v1/models'), 5000)]) {
    const res = await exchange(port, parts, { waitMs: 5_000, gapMs: 50 })
    t.equal(res.text.slice(0, 13), 'HTTP/1.1 431 ', `${2 * limit + 1} bytes in ${parts.length} piece(s): 431`)
    t.equal(res.end, 'fin')
  }
  assertUwsAnswered(t, await exchange(port, ['GET /v1/models HTTP/1.0\r\nHost: a\r\n\r\n'], { waitMs: 5_000 }), 505, 'HTTP/1.0')
})

t.test('a body announced past the limit is refused at once, before the client sends it', async (t) => {
  const stack = await startStack(t, [{ address: addr('f'), models: [{ id: 'm-chat' }] }], {
    server: { max_json_body_bytes: 2048, max_multipart_body_bytes: 4096 },
  })
  const port = Number(new URL(stack.url).port)
  for (const [path, auth] of [
    ['/v1/chat/completions', stack.key],
    ['/v1/api-keys', stack.mgmtKey],
  ] as const) {
    // 50 MiB announced, nine bytes sent: the client would wait on the router for ever if it read to the limit first.
    const head = `POST ${path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${auth}\r\nContent-Type: application/json\r\nContent-Length: ${50 << 20}\r\n\r\n{"model":`
    const started = Date.now()
    const res = await exchange(port, [head], { waitMs: 5_000, until: responses(1) })
    const [answer] = parseResponses(res.text)
    t.equal(answer?.status, 413, `${path}: 413 (after ${Date.now() - started} ms)`)
    t.equal(JSON.parse(answer?.body ?? 'null')?.error?.code, 'request_too_large')
  }
})
