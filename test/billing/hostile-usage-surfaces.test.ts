/**
 * The usage bound on every codec that reads a provider's usage (issue 43, point 1): Anthropic answers (native
 * on /v1/messages, JSON and stream, and translated for chat), Responses answers (native, and translated from
 * chat) and transcriptions all bill a count past 10^9 (here 2^53 - 1, and 10^12 audio seconds) by the estimate.
 */
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack } from '../helpers/stack.js'
import { AUDIO_MODEL, wav } from '../media/fixtures.js'

const HUGE = 9007199254740991
const BOUNDARY = 'svc-hostile-usage'

function anthropicMessage(): string {
  return JSON.stringify({
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'anth-m',
    content: [{ type: 'text', text: 'ok' }],
    stop_reason: 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: HUGE, output_tokens: HUGE },
  })
}

function anthropicStream(): string {
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`
  return (
    ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'anth-m', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: HUGE, output_tokens: 1 } } }) +
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
    ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'ok' } }) +
    ev('content_block_stop', { index: 0 }) +
    ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: HUGE } }) +
    ev('message_stop', {})
  )
}

function responsesAnswer(): string {
  return JSON.stringify({
    id: 'resp_1',
    object: 'response',
    created_at: 0,
    status: 'completed',
    model: 'resp-m',
    output: [{ type: 'message', id: 'msg_1', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'ok', annotations: [] }] }],
    usage: { input_tokens: HUGE, output_tokens: 3, total_tokens: HUGE },
  })
}

function chatAnswer(): string {
  return JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 0,
    model: 'chat-m',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 4, completion_tokens: HUGE, total_tokens: HUGE },
  })
}

t.test('every codec bills a count past the bound by the estimate', async (t) => {
  const liar = await fakeProvider(t, (req, res, body) => {
    const path = req.url ?? ''
    const streamed = path !== '/v1/audio/transcriptions' && body.startsWith('{') && JSON.parse(body).stream === true
    if (path.endsWith('/v1/messages') && streamed) {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      return res.end(anthropicStream())
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    if (path.endsWith('/v1/messages')) return res.end(anthropicMessage())
    if (path.endsWith('/v1/responses')) return res.end(responsesAnswer())
    if (path.endsWith('/v1/chat/completions')) return res.end(chatAnswer())
    if (path.endsWith('/v1/audio/transcriptions')) return res.end(JSON.stringify({ text: 'hello', usage: { type: 'duration', seconds: 1e12 } }))
    res.end('{"data":[]}')
  })
  const stack = await startStack(
    t,
    [
      {
        address: addr('d'),
        url: liar.url,
        models: [
          { id: 'anth-m', formats: ['anthropic'] },
          { id: 'resp-m', formats: ['openai', 'responses'] },
          { id: 'chat-m', formats: ['openai'] },
          { id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.0001' } },
        ],
      },
    ],
    { health: { probes: false } },
  )
  const post = async (path: string, payload: object): Promise<{ status: number; text: string }> => {
    const res = await request(stack.url + path, { method: 'POST', headers: { ...stack.auth, 'content-type': 'application/json' }, body: JSON.stringify(payload) })
    return { status: res.statusCode, text: await res.body.text() }
  }
  const traceOf = (text: string): Record<string, any> | undefined => {
    if (text.startsWith('{')) return JSON.parse(text).x_svc_trace
    let trace
    for (const line of text.split('\n')) if (line.startsWith('data: {') && line.includes('"x_svc_trace"')) trace = JSON.parse(line.slice(6)).x_svc_trace
    return trace
  }
  const messages = [{ role: 'user', content: 'hello there' }]
  const cases: [string, string, object][] = [
    ['messages, Anthropic JSON', '/v1/messages', { model: 'anth-m', max_tokens: 16, messages }],
    ['messages, Anthropic stream', '/v1/messages', { model: 'anth-m', max_tokens: 16, messages, stream: true }],
    ['chat, translated to Anthropic', '/v1/chat/completions', { model: 'anth-m', messages }],
    ['chat stream, translated to Anthropic', '/v1/chat/completions', { model: 'anth-m', messages, stream: true }],
    ['responses, native', '/v1/responses', { model: 'resp-m', input: 'hello there' }],
    ['responses, translated to chat', '/v1/responses', { model: 'chat-m', input: 'hello there' }],
  ]
  for (const [what, path, payload] of cases) {
    const { status, text } = await post(path, payload)
    t.equal(status, 200, `${what}: answered`)
    const usage = traceOf(text)?.usage
    t.equal(usage?.estimated, true, `${what}: billed by the estimate`)
    t.ok(usage?.prompt_tokens < 1000 && usage?.completion_tokens < 1000, `${what}: no claimed count billed (${JSON.stringify(usage)})`)
  }

  const form = Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${AUDIO_MODEL}\r\n`),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    wav(2),
    Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
  ])
  const res = await request(stack.url + '/v1/audio/transcriptions', { method: 'POST', headers: { ...stack.auth, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }, body: form })
  t.equal(res.statusCode, 200)
  const usage = ((await res.body.json()) as any).x_svc_trace?.usage
  t.match(usage, { seconds: 2, estimated: true }, 'transcription: 10^12 s is no figure; the upload says 2 s')
})
