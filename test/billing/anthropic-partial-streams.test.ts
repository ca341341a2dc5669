/**
 * An Anthropic stream cut short is billed for the content it relayed. Its message_start carries output_tokens as
 * counted when the message began (1); only message_delta carries the whole count. A stream that never reached
 * message_delta (its provider broke, or its client left after reading nearly all of it) was billed that early
 * count: one output token for a whole answer, on /v1/messages (native) and on /v1/chat/completions translated
 * to an Anthropic-only provider alike, while an OpenAI stream cut at the same point bills what it relayed.
 */
import type { ServerResponse } from 'node:http'
import { connect } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { parseUsd } from '../../src/billing/money.js'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'

const MODEL = 'm-claude'
const P = addr('a')
const DELTAS = 30

function event(name: string, data: object): string {
  return `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`
}

/**
 * message_start (output_tokens 1, as Anthropic sends it), a text block and DELTAS words, no message_delta; then
 * `written` once they are on the wire.
 */
function partialStream(res: ServerResponse, written: () => void): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  let out = event('message_start', {
    message: { id: 'msg_partial', type: 'message', role: 'assistant', model: MODEL, content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 1 } },
  })
  out += event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } })
  for (let i = 0; i < DELTAS; i++) out += event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ` word${i}` } })
  res.write(out, written)
}

/** `end`: what the provider does once the partial stream is out (break the connection, or hang until cancelled). */
async function stack(t: Test, end: 'reset' | 'hang'): Promise<Stack> {
  const provider = await fakeProvider(t, (_req, res) => {
    partialStream(res, () => {
      if (end === 'reset') res.socket!.destroy()
    })
  })
  return startStack(t, [{ address: P, url: provider.url, models: [{ id: MODEL, formats: ['anthropic'] }] }])
}

const ROUTES = [
  ['/v1/messages', { model: MODEL, max_tokens: 200, stream: true, messages: [{ role: 'user', content: 'hi' }] }],
  ['/v1/chat/completions', { model: MODEL, max_tokens: 200, stream: true, messages: [{ role: 'user', content: 'hi' }] }],
] as const

/** The only charge of the test account and the completion tokens it was billed for. */
async function billed(stack: Stack): Promise<{ amount: bigint; completionTokens: number }[]> {
  const charges = (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  const day = new Date().toISOString().slice(0, 10)
  const rows = await stack.router.store.ledger.usage(stack.account, { fromDay: day, toDay: day })
  return charges.map((c) => ({ amount: c.amount, completionTokens: rows.reduce((n, r) => n + r.completionTokens, 0) }))
}

for (const [path, body] of ROUTES) {
  t.test(`${path}: an Anthropic stream that breaks before message_delta bills the content it relayed`, async (t) => {
    const s = await stack(t, 'reset')
    const res = await request(s.url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...s.auth },
      body: JSON.stringify(body),
    })
    t.equal(res.statusCode, 200)
    const text = await res.body.text()
    t.match(text, /word29/, 'every delta reached the client')
    const last = text.trimEnd().split('\n').at(-1)!
    const trace = JSON.parse(last.slice('data: '.length)).x_svc_trace
    t.ok(trace.usage.completion_tokens >= DELTAS - 2, `billed for the relayed content, not message_start's 1 (${trace.usage.completion_tokens})`)
    t.equal(trace.usage.estimated, true, 'the output count is the router estimate')
    t.ok(await eventually(async () => (await billed(s)).length === 1))
    const [charge] = await billed(s)
    t.equal(charge!.amount, parseUsd(trace.billing.total_cost), 'the ledger holds what the trace says')
    t.equal(charge!.completionTokens, trace.usage.completion_tokens)
    t.equal(s.router.ledger.reserved(s.account), 0n)
  })

  t.test(`${path}: a client that leaves an Anthropic stream before message_delta pays for what it read`, async (t) => {
    const s = await stack(t, 'hang')
    const { port } = new URL(s.url)
    const payload = JSON.stringify(body)
    const sock = connect(Number(port), '127.0.0.1')
    sock.write(
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.key}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    )
    let seen = ''
    await new Promise<void>((resolve) => {
      sock.on('data', (chunk: Buffer) => {
        seen += chunk.toString('latin1')
        if (seen.includes('word29')) resolve()
      })
    })
    sock.destroy()
    t.ok(await eventually(async () => (await billed(s)).length === 1), 'the abandoned stream is billed')
    const [charge] = await billed(s)
    t.ok(charge!.completionTokens >= DELTAS - 2, `billed for the content it read, not 1 token (${charge!.completionTokens})`)
    t.ok(await eventually(() => s.router.ledger.reserved(s.account) === 0n), 'no reservation left behind')
  })
}
