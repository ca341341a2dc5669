/**
 * HEAD (issue 42): answered wherever GET is, with the GET's status and headers, the Content-Length of the body
 * the GET sends, and no body; any other HEAD gets its status (404, 405) and no body. Checked on the wire with a
 * raw socket: HEAD then GET on one keep-alive connection must read as two answers, nothing left over.
 */
import net from 'node:net'
import t from 'tap'
import { addr, startStack } from '../helpers/stack.js'
import { parseResponses, type RawResponse } from './raw-http.js'

/**
 * Sends `requests` one after the other on one connection, each once the answer before it is whole (a real
 * keep-alive client, not pipelining), and returns the answers and everything the server sent.
 */
function sequence(port: number, requests: readonly string[]): Promise<{ answers: RawResponse[]; text: string }> {
  const bodiless = requests.map((r) => r.startsWith('HEAD '))
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let text = ''
    let sent = 0
    const next = (): void => {
      if (sent < requests.length) socket.write(requests[sent++]!, 'latin1')
    }
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1')
      const answers = parseResponses(text, bodiless)
      if (answers.length === requests.length) {
        socket.destroy()
        resolve({ answers, text })
      } else if (answers.length === sent) next()
    })
    socket.on('error', reject)
    socket.on('close', () => resolve({ answers: parseResponses(text, bodiless), text }))
    socket.once('connect', next)
  })
}

function req(method: string, path: string, headers: Record<string, string> = {}): string {
  const fields = Object.entries({ host: 'test', ...headers })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')
  return `${method} ${path} HTTP/1.1\r\n${fields}\r\n`
}

/** The bytes of the answers laid end to end: the whole of what the server sent, if the framing is right. */
function wire(text: string, answers: RawResponse[]): number {
  let n = 0
  for (const a of answers) n += text.indexOf('\r\n\r\n', n) + 4 - n + a.body.length
  return n
}

t.test('HEAD then GET on one connection: two answers, the same head, no body on the first', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: 'm-chat' }, { id: 'org/m-slash' }] }])
  const port = Number(new URL(stack.url).port)
  const paths: [string, Record<string, string>][] = [
    ['/v1/models', {}],
    ['/v1/models/m-chat', {}],
    ['/v1/models/nope', {}],
    ['/v1/providers?model=m-chat', {}],
    ['/v1/providers', {}],
    ['/v1/account/balance', stack.mgmtAuth],
    ['/v1/api-keys', stack.auth],
    ['/v1/responses/resp_missing', stack.auth],
    ['/healthz', {}],
    ['/console', {}],
  ]
  for (const [path, headers] of paths) {
    const { answers, text } = await sequence(port, [req('HEAD', path, headers), req('GET', path, headers)])
    t.equal(answers.length, 2, `${path}: two answers`)
    const [head, get] = answers as [RawResponse, RawResponse]
    t.equal(head.status, get.status, `${path}: the same status (${get.status})`)
    t.equal(head.body, '', `${path}: HEAD has no body`)
    t.ok(get.body.length > 0, `${path}: GET has one`)
    t.equal(head.headers['content-length'], String(Buffer.byteLength(get.body, 'latin1')), `${path}: HEAD's length is that of GET's body`)
    t.equal(head.headers['content-type'], get.headers['content-type'], `${path}: the same type`)
    const names = (r: RawResponse) => Object.keys(r.headers).filter((k) => k !== 'date').sort()
    t.same(names(head), names(get), `${path}: the same header names`)
    t.equal(wire(text, answers), text.length, `${path}: nothing after the two answers`)
  }
})

t.test('HEAD where there is no GET: its status, no body, and the connection goes on', async (t) => {
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: 'm-chat' }] }])
  const port = Number(new URL(stack.url).port)
  for (const [path, status] of [
    ['/v1/chat/completions', 405],
    ['/v1/messages', 405],
    ['/v1/nothing-here', 404],
    ['/v1/messages/count_tokens', 405],
  ] as const) {
    const { answers, text } = await sequence(port, [req('HEAD', path), req('GET', '/v1/models'), req('HEAD', path)])
    t.equal(answers.length, 3, `${path}: three answers`)
    t.equal(answers[0]!.status, status, `${path}: ${status}`)
    t.equal(answers[0]!.body, '', `${path}: no body`)
    t.ok(Number(answers[0]!.headers['content-length']) > 0, `${path}: the length of the error a GET would get`)
    if (status === 405) t.match(answers[0]!.headers.allow, /POST/, `${path}: Allow names what is`)
    t.equal(answers[1]!.status, 200, `${path}: the GET after it is read as its own answer`)
    t.match(answers[1]!.body, /"object":"list"/)
    t.equal(answers[2]!.status, status)
    t.equal(wire(text, answers), text.length, `${path}: nothing after the answers`)
  }
  // A head the front end refuses (431, closed after): no body either.
  const big = await sequence(port, [req('HEAD', '/v1/models', { 'x-padding': 'p'.repeat(5000) })])
  t.equal(big.answers[0]?.status, 431)
  t.equal(big.answers[0]?.body, '')
  t.equal(wire(big.text, big.answers), big.text.length, '431: nothing after its head')
  // The GET routes list HEAD among their methods.
  const { answers } = await sequence(port, [req('POST', '/v1/models', { 'content-length': '0' })])
  t.equal(answers[0]!.status, 405)
  t.match(answers[0]!.headers.allow, /GET, HEAD/)
})
