/**
 * A provider may send interim responses (1xx: 102 Processing, 103 Early Hints) before its final answer. They
 * are part of HTTP, not a failure: the router waits for the final status, relays that answer as any other,
 * bills it once, and keeps the provider healthy.
 */
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { addr, startStack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const P = addr('e')

const COMPLETION = JSON.stringify({
  id: 'chatcmpl-interim',
  object: 'chat.completion',
  created: 1,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
})
const CHUNK = (content: string) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-interim', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`
const USAGE = `data: ${JSON.stringify({ id: 'chatcmpl-interim', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`

/** Writes a raw interim response on the socket (Node's writeEarlyHints covers 103 only). */
function interim(res: ServerResponse, line: string): void {
  ;(res.socket as Socket).write(`HTTP/1.1 ${line}\r\n\r\n`)
}

async function provider(t: Test, interims: string[]): Promise<string> {
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => {
      for (const line of interims) {
        if (line.startsWith('103')) res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' })
        else interim(res, line)
      }
      const stream = (JSON.parse(body) as { stream?: boolean }).stream === true
      if (!stream) {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(COMPLETION)
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(CHUNK('o'))
      res.end(CHUNK('k') + USAGE + 'data: [DONE]\n\n')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

for (const interims of [['103 Early Hints'], ['102 Processing'], ['102 Processing', '103 Early Hints', '102 Processing']]) {
  t.test(`interim ${interims.join(', ')} before the answer: relayed as the final answer, billed once`, async (t) => {
    const stack = await startStack(t, [{ address: P, url: await provider(t, interims), models: [{ id: MODEL }] }], {
      routing: { failure_threshold: 1 },
      health: { probes: false },
    })
    for (const stream of [false, true]) {
      const res = await request(stack.url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...stack.auth },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream }),
      })
      const text = await res.body.text()
      t.equal(res.statusCode, 200, `stream: ${stream}`)
      if (stream) {
        t.match(text, /"content":"o"/)
        t.match(text, /"x_svc_trace"/)
        t.ok(text.endsWith('data: [DONE]\n\n'), 'the stream ends with [DONE]')
      } else {
        const json = JSON.parse(text) as { choices: { message: { content: string } }[]; x_svc_trace: { provider: string; attempts: unknown[] } }
        t.equal(json.choices[0]!.message.content, 'ok')
        t.equal(json.x_svc_trace.provider, P)
        t.equal(json.x_svc_trace.attempts.length, 1, 'one attempt: the interim answer was no failure')
      }
    }
    const journal = await stack.router.store.ledger.journal(stack.account)
    t.equal(journal.filter((e) => e.kind === 'charge').length, 2, 'each answer billed once')
    const providers = (await (await request(`${stack.url}/v1/providers?model=${MODEL}`)).body.json()) as { data: { is_healthy: boolean; uptime: number }[] }
    t.equal(providers.data[0]!.is_healthy, true, 'the provider stays healthy')
    t.equal(providers.data[0]!.uptime, 100)
  })
}
