/**
 * Status lines a provider may send besides 2xx, 4xx, 429 and 5xx (those are in forwarding.test.ts):
 * - interim responses (1xx: 102 Processing, 103 Early Hints) before the final answer are part of HTTP, not a
 *   failure: the router waits for the final status, relays that answer as any other, bills it once, and keeps
 *   the provider healthy;
 * - a redirect (3xx) is never followed (it would send the request to an address that is not on the ledger) and
 *   is no answer for the client: it is the provider failing, so the next candidate is tried, and a last
 *   candidate's redirect is a 502 provider_error, billed nothing.
 */
import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { completionJson, fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-chat'
const P = addr('e')
const GOOD = addr('f')

const COMPLETION = completionJson('chatcmpl-interim', MODEL)
const CHUNK = (content: string) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-interim', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`
const USAGE = `data: ${JSON.stringify({ id: 'chatcmpl-interim', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`

/** Writes a raw interim response on the socket (Node's writeEarlyHints covers 103 only). */
function interim(res: ServerResponse, line: string): void {
  ;(res.socket as Socket).write(`HTTP/1.1 ${line}\r\n\r\n`)
}

function provider(t: Test, interims: string[]): Promise<string> {
  return fakeProvider(t, (_req, res, body) => {
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
  }).then((p) => p.url)
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

function redirecting(t: Test, status: number): Promise<{ url: string; hits: () => number }> {
  return fakeProvider(t, (_req, res) => {
    res.writeHead(status, { location: 'http://127.0.0.1:1/v1/chat/completions', 'content-type': 'text/html' })
    res.end('<a href="http://127.0.0.1:1/">moved</a>')
  })
}

async function chat(stack: Stack, stream: boolean) {
  const res = await request(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-svc-provider-sort': 'price', ...stack.auth },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream }),
  })
  return { status: res.statusCode, text: await res.body.text() }
}

for (const status of [301, 302, 307, 308]) {
  t.test(`a provider's ${status} is a provider failure: the next candidate answers; alone, 502 and nothing billed`, async (t) => {
    const bad = await redirecting(t, status)
    const stack = await startStack(
      t,
      [
        { address: P, url: bad.url, models: [{ id: MODEL, price: { prompt: 0.1, completion: 0.2 } }] },
        { address: GOOD, models: [{ id: MODEL, price: { prompt: 0.5, completion: 1 } }] },
      ],
      { routing: { failure_threshold: 100 }, health: { probes: false } },
    )
    for (const stream of [false, true]) {
      const out = await chat(stack, stream)
      t.equal(out.status, 200, `stream: ${stream}`)
      t.match(out.text, `"attempts":[{"provider":"${P}","status":${status},"error":"http_${status}"},{"provider":"${GOOD}","status":200}]`)
    }
    t.equal(bad.hits(), 2, 'the redirect was not followed')

    const alone = await startStack(t, [{ address: P, url: bad.url, models: [{ id: MODEL }] }], {
      routing: { failure_threshold: 100 },
      health: { probes: false },
    })
    const out = await chat(alone, false)
    t.equal(out.status, 502)
    const body = JSON.parse(out.text) as { error: { code: string }; x_svc_trace: { attempts: { status: number; error: string }[] } }
    t.equal(body.error.code, 'provider_error')
    t.same(body.x_svc_trace.attempts, [{ provider: P, status, error: `http_${status}` }])
    const journal = await alone.router.store.ledger.journal(alone.account)
    t.equal(journal.filter((e) => e.kind === 'charge').length, 0, 'nothing billed')
    t.equal(alone.router.ledger.reserved(alone.account), 0n, 'no reservation left')
  })
}
