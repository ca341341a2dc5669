/**
 * Issue 43 point 3: a provider cannot forge the trace. A provider of the test's own (a small http server) puts
 * its own `x_svc_trace` (tee_verified, another provider's address) in every answer it gives, spelled plainly and
 * with key escapes a JSON reader decodes to the same name. Through the real router, on chat, messages and
 * responses (native and translated), images, transcriptions, async jobs, stored responses and provider 4xx
 * bodies, the client
 * sees exactly one x_svc_trace member in each body or stream, the router's: first-wins and last-wins readers of
 * the JSON agree.
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'
import { wav } from '../media/fixtures.js'

const FAKE = { request_id: 'req_fake', provider: addr('f'), tee_verified: true, billing: { input_cost: '0', output_cost: '0', total_cost: '0', currency: 'USD' } }
const FAKE_JSON = JSON.stringify(FAKE)
const OURS = addr('e')

/** The trace member's name as a provider may write it in its JSON: each a JSON reader decodes to x_svc_trace. */
const SPELLINGS = ['"x_svc_trace"', '"x_svc\\u005ftrace"', '"\\u0078_svc_trac\\u0065"', '"x\\u005Fsvc\\u005Ftrace"']

const OPENAI = 'm-openai'
const ANTHROPIC = 'm-anth'
const RESPONSES = 'm-resp'
const IMAGE = 'm-image'
const AUDIO = 'm-audio'
const BOUNDARY = 'forged-trace-boundary'

/**
 * Every key of a JSON text, decoded, in order, at any depth: a string followed by a colon. Counting keys named
 * x_svc_trace in the bytes a client got is what both kinds of reader see (duplicates included).
 */
function keysOf(text: string): string[] {
  const keys: string[] = []
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '"') continue
    let j = i + 1
    while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1
    const raw = text.slice(i, j + 1)
    let k = j + 1
    while (k < text.length && ' \t\r\n'.includes(text[k]!)) k++
    if (text[k] === ':') keys.push(JSON.parse(raw) as string)
    i = j
  }
  return keys
}

function traceCount(text: string): number {
  return keysOf(text).filter((k) => k === 'x_svc_trace').length
}

/** The data payloads of an SSE text, [DONE] left out. */
function payloads(text: string): string[] {
  const out: string[] = []
  for (const event of text.split(/\r?\n\r?\n/)) {
    const data = event
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5))
      .join('\n')
    if (data !== '' && data !== '[DONE]') out.push(data)
  }
  return out
}

/** The provider's answers, with `key` (one of SPELLINGS) naming its fake trace. */
function answers(key: string) {
  const fake = `${key}:${FAKE_JSON}`
  const sse = (events: [string, string][]) => events.map(([name, data]) => (name === '' ? '' : `event: ${name}\n`) + `data: ${data}\n\n`).join('')
  const chunk = (delta: string, finish: string | null) =>
    `{"id":"chatcmpl-f","object":"chat.completion.chunk","created":0,"model":"${OPENAI}","choices":[{"index":0,"delta":${delta},"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]`
  const responseObject = (status: string, output: string, usage: string) =>
    `{"id":"resp_f","object":"response","created_at":0,"status":"${status}","model":"${RESPONSES}","output":${output},"usage":${usage},${fake}}`
  const item = '[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"ok","annotations":[]}]}]'
  return {
    chatJson: `{"id":"chatcmpl-f","object":"chat.completion","created":0,"model":"${OPENAI}","choices":[{"index":0,"message":{"role":"assistant","content":"ok","${'x_svc_trace'}":${FAKE_JSON}},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},${fake}}`,
    chatStream: sse([
      ['', chunk('{"role":"assistant","content":"o"}', null) + `,${fake}}`],
      // Nothing but the fake trace: no chunk at all once it is gone.
      ['', `{${fake}}`],
      ['', chunk('{"content":"k"}', 'stop') + '}'],
      // The router's trace chunk, imitated.
      ['', `{"id":"chatcmpl-f","object":"chat.completion.chunk","created":0,"model":"${OPENAI}","choices":[],${fake}}`],
      ['', `{"id":"chatcmpl-f","object":"chat.completion.chunk","created":0,"model":"${OPENAI}","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},${fake}}`],
      ['', '[DONE]'],
    ]),
    messagesJson: `{"id":"msg_f","type":"message","role":"assistant","model":"${ANTHROPIC}","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1},${fake}}`,
    messagesStream: sse([
      [
        'message_start',
        `{"type":"message_start","message":{"id":"msg_f","type":"message","role":"assistant","model":"${ANTHROPIC}","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0},${fake}}}`,
      ],
      ['content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'],
      ['content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"},${fake}}`],
      ['ping', `{${fake}}`],
      ['content_block_stop', '{"type":"content_block_stop","index":0}'],
      ['message_delta', `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1},${fake}}`],
      ['message_stop', `{"type":"message_stop",${fake}}`],
    ]),
    responsesJson: responseObject('completed', item, '{"input_tokens":3,"output_tokens":1,"total_tokens":4}'),
    responsesStream: sse([
      ['response.created', `{"type":"response.created","sequence_number":0,"response":${responseObject('in_progress', '[]', 'null')}}`],
      ['response.output_text.delta', `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"ok",${fake}}`],
      [
        'response.completed',
        `{"type":"response.completed","sequence_number":2,"response":${responseObject('completed', item, '{"input_tokens":3,"output_tokens":1,"total_tokens":4}')},${fake}}`,
      ],
    ]),
    imagesJson: `{"created":0,"data":[{"b64_json":"aGk="}],${fake}}`,
    transcriptionJson: `{"text":"ok","usage":{"type":"duration","seconds":1},${fake}}`,
    chatError: `{"error":{"message":"bad thing","type":"invalid_request_error"},${fake}}`,
    messagesError: `{"type":"error","error":{"type":"invalid_request_error","message":"bad thing"},${fake}}`,
  }
}

interface Forger {
  stack: Stack
  /** The spelling the provider uses now, and whether it answers with its 4xx. */
  set(key: string, error?: boolean): void
}

async function forgingStack(t: Test): Promise<Forger> {
  let a = answers(SPELLINGS[0]!)
  let spelling = SPELLINGS[0]!
  let error = false
  const provider = await fakeProvider(t, (req, res, body) => {
    let stream = false
    try {
      stream = (JSON.parse(body || '{}') as { stream?: boolean }).stream === true
    } catch {
      // A multipart upload.
    }
    const send = (status: number, type: string, text: string) => {
      res.writeHead(status, { 'content-type': type })
      res.end(text)
    }
    const url = req.url ?? ''
    if (url.endsWith('/chat/completions')) {
      if (error) return send(400, 'application/json', a.chatError)
      return stream ? send(200, 'text/event-stream', a.chatStream) : send(200, 'application/json', a.chatJson)
    }
    if (url.endsWith('/messages')) {
      // Under a Content-Type that is not JSON as well: clients parse an error body that parses.
      if (error) return send(400, spelling === SPELLINGS[1] ? 'text/plain' : 'application/json', a.messagesError)
      return stream ? send(200, 'text/event-stream', a.messagesStream) : send(200, 'application/json', a.messagesJson)
    }
    if (url.endsWith('/responses')) return stream ? send(200, 'text/event-stream', a.responsesStream) : send(200, 'application/json', a.responsesJson)
    if (url.endsWith('/images/generations')) return send(200, 'application/json', a.imagesJson)
    if (url.endsWith('/audio/transcriptions')) return send(200, 'application/json', a.transcriptionJson)
    send(404, 'text/plain', 'no')
  })
  const stack = await startStack(t, [
    {
      address: OURS,
      url: provider.url,
      models: [
        { id: OPENAI, formats: ['openai'] },
        { id: ANTHROPIC, formats: ['anthropic'] },
        { id: RESPONSES, formats: ['openai', 'responses'] },
        { id: IMAGE, type: 'text-to-image', price: { image: '0.003' } },
        { id: AUDIO, type: 'speech-to-text', price: { audio_second: '0.0001' } },
      ],
    },
  ])
  return {
    stack,
    set(key, err = false) {
      a = answers(key)
      spelling = key
      error = err
    },
  }
}

async function post(stack: Stack, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await request(stack.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...stack.auth }, body: JSON.stringify(body) })
  return { status: res.statusCode, text: await res.body.text() }
}

/** The request of each surface for `model`, streamed or not. */
const REQUESTS: [string, string, string, (model: string, stream: boolean) => unknown][] = [
  ['chat native', '/v1/chat/completions', OPENAI, (model, stream) => ({ model, stream, messages: [{ role: 'user', content: 'hi' }] })],
  ['chat from anthropic', '/v1/chat/completions', ANTHROPIC, (model, stream) => ({ model, stream, messages: [{ role: 'user', content: 'hi' }] })],
  ['messages native', '/v1/messages', ANTHROPIC, (model, stream) => ({ model, stream, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })],
  ['messages from chat', '/v1/messages', OPENAI, (model, stream) => ({ model, stream, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })],
  ['responses native', '/v1/responses', RESPONSES, (model, stream) => ({ model, stream, input: 'hi' })],
  ['responses from chat', '/v1/responses', OPENAI, (model, stream) => ({ model, stream, input: 'hi' })],
  ['responses from anthropic', '/v1/responses', ANTHROPIC, (model, stream) => ({ model, stream, input: 'hi' })],
]

/** The one trace of a parsed body or event: top level, or (Responses events) in its response object. */
function traceOf(value: Record<string, any>): Record<string, any> | undefined {
  return value.x_svc_trace ?? value.response?.x_svc_trace
}

function checkOurs(t: Test, trace: Record<string, any> | undefined, label: string): void {
  t.equal(trace?.provider, OURS, `${label}: the trace names the provider that answered`)
  t.not(trace?.tee_verified, true, `${label}: nothing of the fake`)
  t.not(trace?.request_id, FAKE.request_id, `${label}: the router's request id`)
}

t.test('JSON answers: one x_svc_trace, the router\'s, whatever the provider wrote', async (t) => {
  const { stack, set } = await forgingStack(t)
  for (const key of SPELLINGS) {
    set(key)
    for (const [what, path, model, body] of REQUESTS) {
      const label = `${what}, ${key}`
      const res = await post(stack, path, body(model, false))
      t.equal(res.status, 200, label)
      t.equal(traceCount(res.text), 1, `${label}: one x_svc_trace member in the body`)
      checkOurs(t, JSON.parse(res.text).x_svc_trace, label)
      t.match(res.text, /"ok"/, `${label}: the answer itself is kept`)
    }
    const images = await post(stack, '/v1/images/generations', { model: IMAGE, prompt: 'a fox' })
    t.equal(traceCount(images.text), 1, `images, ${key}: one x_svc_trace`)
    checkOurs(t, JSON.parse(images.text).x_svc_trace, `images, ${key}`)
    t.same(JSON.parse(images.text).data, [{ b64_json: 'aGk=' }])
    const form = Buffer.concat([
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${AUDIO}\r\n`),
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
      wav(0.5),
      Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
    ])
    const res = await request(stack.url + '/v1/audio/transcriptions', {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth },
      body: form,
    })
    const text = await res.body.text()
    t.equal(res.statusCode, 200, `transcriptions, ${key}`)
    t.equal(traceCount(text), 1, `transcriptions, ${key}: one x_svc_trace`)
    checkOurs(t, JSON.parse(text).x_svc_trace, `transcriptions, ${key}`)
    t.equal(JSON.parse(text).text, 'ok')
  }
})

t.test('streams: the router\'s trace is the only one, in its last event', async (t) => {
  const { stack, set } = await forgingStack(t)
  for (const key of SPELLINGS) {
    set(key)
    for (const [what, path, model, body] of REQUESTS) {
      const label = `${what} stream, ${key}`
      const res = await post(stack, path, body(model, true))
      t.equal(res.status, 200, label)
      const data = payloads(res.text)
      const counts = data.map(traceCount)
      t.equal(
        counts.reduce((a, b) => a + b, 0),
        1,
        `${label}: one x_svc_trace member in the whole stream`,
      )
      const at = counts.indexOf(1)
      t.ok(at >= data.length - 2, `${label}: in the last events, where the router puts it`)
      checkOurs(t, traceOf(JSON.parse(data[at]!)), label)
      t.notOk(data.includes('{}'), `${label}: a chunk that was only the fake trace is not relayed empty`)
      t.match(res.text, /"o"|"ok"/, `${label}: the text is relayed`)
    }
  }
})

t.test('async jobs and stored responses keep the router\'s trace only', async (t) => {
  const { stack, set } = await forgingStack(t)
  set(SPELLINGS[1]!)
  const launched = await post(stack, '/v1/async/images/generations', { model: IMAGE, prompt: 'a fox' })
  t.equal(launched.status, 202)
  const jobId = (JSON.parse(launched.text) as { jobId: string }).jobId
  let job = ''
  t.ok(
    await eventually(async () => {
      const res = await request(`${stack.url}/v1/async/jobs/${jobId}`, { headers: stack.auth })
      job = await res.body.text()
      return (JSON.parse(job) as { status: string }).status === 'completed'
    }),
    'the job completes',
  )
  t.equal(traceCount(job), 1, 'the job: one x_svc_trace')
  checkOurs(t, JSON.parse(job).x_svc_trace, 'the job')

  for (const stream of [false, true]) {
    set(SPELLINGS[stream ? 0 : 2]!)
    const res = await post(stack, '/v1/responses', { model: RESPONSES, stream, input: 'hi' })
    const id = stream ? (JSON.parse(payloads(res.text).at(-1)!) as { response: { id: string } }).response.id : (JSON.parse(res.text) as { id: string }).id
    const stored = await request(`${stack.url}/v1/responses/${id}`, { headers: stack.auth })
    const text = await stored.body.text()
    t.equal(stored.statusCode, 200, `stored (${stream ? 'stream' : 'JSON'})`)
    t.equal(traceCount(text), 1, `stored (${stream ? 'stream' : 'JSON'}): one x_svc_trace`)
    checkOurs(t, JSON.parse(text).x_svc_trace, 'the stored response')
  }
})

t.test("a provider's 4xx: its own x_svc_trace gives way to the router's, in every spelling", async (t) => {
  const { stack, set } = await forgingStack(t)
  for (const key of SPELLINGS) {
    set(key, true)
    for (const [what, path, model] of [
      ['chat', '/v1/chat/completions', OPENAI],
      ['messages native (relayed as written)', '/v1/messages', ANTHROPIC],
      ['messages from chat', '/v1/messages', OPENAI],
    ] as const) {
      const label = `${what}, ${key}`
      const res = await post(stack, path, { model, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
      t.equal(res.status, 400, label)
      t.equal(traceCount(res.text), 1, `${label}: one x_svc_trace`)
      checkOurs(t, JSON.parse(res.text).x_svc_trace, label)
      t.match(JSON.parse(res.text).error, { message: 'bad thing' }, `${label}: the provider's error is kept`)
    }
  }
})
