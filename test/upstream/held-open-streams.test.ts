/**
 * A provider that sends a whole stream, its last event included (`data: [DONE]`, an Anthropic message_stop),
 * and then keeps its response open: the answer is over at that event. The router ends the client's stream
 * there (trace, then its own end), bills it once as a whole answer, and does not wait for a body end that
 * never comes, which held the client until the idle timeout and then turned the answer into a broken stream
 * (an error event, `body_timeout` in attempts, no [DONE]).
 */
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'

const OPENAI_MODEL = 'm-openai'
const ANTHROPIC_MODEL = 'm-anthropic'
const P = addr('d')

function openAiStream(res: ServerResponse): string {
  const chunk = (delta: object, finish: string | null) =>
    `data: ${JSON.stringify({ id: 'chatcmpl-held', object: 'chat.completion.chunk', created: 1, model: OPENAI_MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
  const usage = `data: ${JSON.stringify({ id: 'chatcmpl-held', object: 'chat.completion.chunk', created: 1, model: OPENAI_MODEL, choices: [], usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 } })}\n\n`
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  return chunk({ role: 'assistant', content: 'he' }, null) + chunk({ content: 'llo' }, null) + chunk({}, 'stop') + usage + 'data: [DONE]\n\n'
}

function anthropicStream(res: ServerResponse): string {
  const event = (name: string, data: object) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  return (
    event('message_start', {
      message: { id: 'msg_held', type: 'message', role: 'assistant', model: ANTHROPIC_MODEL, content: [], stop_reason: null, usage: { input_tokens: 4, output_tokens: 1 } },
    }) +
    event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
    event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'hello' } }) +
    event('content_block_stop', { index: 0 }) +
    event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } }) +
    event('message_stop', {})
  )
}

t.test('a stream whose provider keeps its response open after the last event ends at that event, billed once', async (t) => {
  const provider = await fakeProvider(t, (req, res) => {
    res.write(req.url!.endsWith('/messages') ? anthropicStream(res) : openAiStream(res))
  })
  const stack = await startStack(
    t,
    [
      {
        address: P,
        url: provider.url,
        models: [
          { id: OPENAI_MODEL, formats: ['openai'] },
          { id: ANTHROPIC_MODEL, formats: ['anthropic'] },
        ],
      },
    ],
    // Longer than a passing run takes by far, shorter than tap's timeout: without the fix the answer breaks here.
    { upstream: { body_timeout_ms: 15_000 } },
  )
  const routes = [
    ['/v1/chat/completions', OPENAI_MODEL, /data: \[DONE\]\n\n$/],
    ['/v1/chat/completions', ANTHROPIC_MODEL, /data: \[DONE\]\n\n$/],
    ['/v1/messages', ANTHROPIC_MODEL, /event: message_stop\ndata: .*\n\n$/],
    ['/v1/messages', OPENAI_MODEL, /event: message_stop\ndata: .*\n\n$/],
  ] as const
  let charges = 0
  for (const [path, model, end] of routes) {
    const res = await request(stack.url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...stack.auth },
      body: JSON.stringify({ model, max_tokens: 16, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    })
    t.equal(res.statusCode, 200, `${path} ${model}`)
    const text = await res.body.text()
    t.match(text, end, `${path} ${model}: ends as a whole answer`)
    t.notMatch(text, /"error"/, 'no error event')
    t.match(text, /hello|"he"|llo/, 'the content was relayed')
    const trace = JSON.parse(/"x_svc_trace":(\{.*\})\}\n\n/.exec(text)![1]!)
    t.same(trace.attempts, [{ provider: P, status: 200 }], 'one clean attempt')
    t.notOk(trace.usage.estimated, "billed from the provider's usage")
    charges++
    t.ok(
      await eventually(async () => (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge').length === charges),
      'billed once',
    )
    t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no reservation left behind')
  }
})
