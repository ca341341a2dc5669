/**
 * A provider's own 4xx (other than 429) through the real router on every OpenAI-format surface (chat JSON and
 * stream, image generations and edits, transcriptions, async jobs): its status passes through, and its body
 * always reaches the client as the envelope of DESIGN.md §4 with a code and the request_id, as JSON. An OpenAI
 * error object is relayed as the provider wrote it with our request_id added; an HTML page, text, no body, JSON
 * that is not an error object, or bytes that are not UTF-8 are rewritten. The real `openai` client reads them as
 * its typed errors.
 */
import OpenAI, { toFile } from 'openai'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'
import { wav } from '../media/fixtures.js'

const CHAT = 'm-chat'
const IMAGE = 'img-model'
const AUDIO = 'stt-model'
const BOUNDARY = 'svc-error-boundary'

/** What the fake provider answers: status, Content-Type ('' for none) and body. */
interface Answer {
  status: number
  type: string
  body: string | Buffer
}

const CONTEXT_ERROR = JSON.stringify({
  error: { message: 'context too long', type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' },
})

/** Answers that are not an OpenAI error object, and the envelope each becomes. */
const REWRITTEN: [string, Answer, { message: string; type: string; code: string }][] = [
  [
    'an HTML page',
    { status: 400, type: 'text/html', body: '<html><body><h1>Bad Request</h1></body></html>' },
    { message: 'the provider answered HTTP 400', type: 'invalid_request_error', code: 'invalid_request' },
  ],
  ['no body at all', { status: 400, type: '', body: '' }, { message: 'the provider answered HTTP 400', type: 'invalid_request_error', code: 'invalid_request' }],
  ['plain text', { status: 404, type: 'text/plain', body: 'no such route\n' }, { message: 'the provider answered HTTP 404', type: 'provider_error', code: 'provider_error' }],
  [
    'JSON that is not an object',
    { status: 422, type: 'application/json', body: '["bad"]' },
    { message: 'the provider answered HTTP 422', type: 'invalid_request_error', code: 'invalid_request' },
  ],
  [
    'an error member that is a string',
    { status: 400, type: 'application/json', body: '{"error":"bad model"}' },
    { message: 'the provider answered HTTP 400', type: 'invalid_request_error', code: 'invalid_request' },
  ],
  [
    "vLLM's top-level error",
    { status: 400, type: 'application/json', body: '{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}' },
    { message: 'max_tokens is too large', type: 'BadRequestError', code: 'invalid_request' },
  ],
  [
    'an error object that is not UTF-8',
    {
      status: 400,
      type: 'application/json',
      body: Buffer.concat([Buffer.from('{"error":{"message":"bad '), Buffer.from([0xff]), Buffer.from('","type":"invalid_request_error"}}')]),
    },
    { message: 'bad \ufffd', type: 'invalid_request_error', code: 'invalid_request' },
  ],
]

interface Reply {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
}

function multipart(fields: [string, string][], file: { field: string; name: string; bytes: Buffer }): Buffer {
  const parts: Buffer[] = []
  for (const [name, value] of fields) parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`))
  parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${file.field}"; filename="${file.name}"\r\nContent-Type: application/octet-stream\r\n\r\n`))
  parts.push(file.bytes, Buffer.from(`\r\n--${BOUNDARY}--\r\n`))
  return Buffer.concat(parts)
}

const JSON_TYPE = 'application/json'
const FORM_TYPE = `multipart/form-data; boundary=${BOUNDARY}`

/** One request of each OpenAI-format surface: path, Content-Type and body. */
const SURFACES: [string, string, string, () => string | Buffer][] = [
  ['chat', '/v1/chat/completions', JSON_TYPE, () => JSON.stringify({ model: CHAT, messages: [{ role: 'user', content: 'hi' }] })],
  ['chat stream', '/v1/chat/completions', JSON_TYPE, () => JSON.stringify({ model: CHAT, stream: true, messages: [{ role: 'user', content: 'hi' }] })],
  ['images', '/v1/images/generations', JSON_TYPE, () => JSON.stringify({ model: IMAGE, prompt: 'a fox' })],
  ['image edits', '/v1/images/edits', FORM_TYPE, () => multipart([['model', IMAGE], ['prompt', 'a hat']], { field: 'image', name: 'i.png', bytes: Buffer.alloc(64, 1) })],
  ['transcriptions', '/v1/audio/transcriptions', FORM_TYPE, () => multipart([['model', AUDIO]], { field: 'file', name: 'a.wav', bytes: wav(0.5) })],
]

/** A router whose one provider (a small http server) serves every model with whatever `answer` holds. */
async function errorStack(t: Test): Promise<{ stack: Stack; answer: Answer }> {
  const answer: Answer = { status: 400, type: '', body: '' }
  const provider = await fakeProvider(t, (_req, res) => {
    res.writeHead(answer.status, answer.type === '' ? {} : { 'content-type': answer.type })
    res.end(answer.body)
  })
  const stack = await startStack(t, [
    {
      address: addr('e'),
      url: provider.url,
      models: [
        { id: CHAT },
        { id: IMAGE, type: 'text-to-image', price: { image: '0.003' } },
        { id: AUDIO, type: 'speech-to-text', price: { audio_second: '0.0001' } },
      ],
    },
  ])
  return { stack, answer }
}

/**
 * The answer's JSON without its x_svc_trace, after checking that trace: the provider that answered, nothing
 * billed, its try in attempts with the status it gave.
 */
function untraced(t: Test, res: Reply, label: string): unknown {
  const value = JSON.parse(res.text) as Record<string, any>
  const trace = value.x_svc_trace
  t.match(trace, { request_id: res.headers['x-request-id'], provider: addr('e'), billing: { total_cost: '0' }, attempts: [{ provider: addr('e'), status: res.status }] }, `${label}: the trace`)
  delete value.x_svc_trace
  return value
}

async function post(stack: Stack, path: string, type: string, body: string | Buffer): Promise<Reply> {
  const res = await request(stack.url + path, { method: 'POST', headers: { 'content-type': type, ...stack.auth }, body })
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() }
}

function client(stack: Stack): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
}

async function apiError(t: Test, call: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await call
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err
    throw err
  }
  t.fail('the call succeeded')
  throw new Error('unreachable')
}

t.test('a provider 4xx that is not an OpenAI error object keeps its status and becomes the envelope, on every surface', async (t) => {
  const { stack, answer } = await errorStack(t)
  for (const [what, provider, error] of REWRITTEN) {
    Object.assign(answer, provider)
    for (const [surface, path, type, body] of SURFACES) {
      const res = await post(stack, path, type, body())
      const label = `${what}, ${surface}`
      t.equal(res.status, provider.status, `${label}: the status passes through`)
      t.equal(res.headers['content-type'], 'application/json', `${label}: JSON`)
      t.same(untraced(t, res, label), { error, request_id: res.headers['x-request-id'] }, `${label}: the envelope with the request_id`)
    }
  }
})

t.test("a provider's OpenAI error object is relayed as it wrote it, as JSON, with our request_id", async (t) => {
  const { stack, answer } = await errorStack(t)
  Object.assign(answer, { status: 400, type: 'text/plain; charset=utf-8', body: CONTEXT_ERROR })
  for (const [surface, path, type, body] of SURFACES) {
    const res = await post(stack, path, type, body())
    t.equal(res.status, 400, surface)
    t.equal(res.headers['content-type'], 'application/json', `${surface}: JSON whatever the provider labelled it`)
    const spliced = CONTEXT_ERROR.slice(0, -1) + `,"request_id":"${res.headers['x-request-id']}","x_svc_trace":`
    t.ok(res.text.startsWith(spliced), `${surface}: the provider's bytes, request_id and trace spliced in`)
    t.same(untraced(t, res, surface), { ...JSON.parse(CONTEXT_ERROR), request_id: res.headers['x-request-id'] })
  }
  // The provider's own request_id gives way to ours: one member, never two.
  const own = JSON.stringify({ error: { message: 'nope', type: 'invalid_request_error', code: 'bad_thing' }, request_id: 'provider-7' })
  Object.assign(answer, { status: 409, type: 'application/json', body: own })
  const res = await post(stack, '/v1/chat/completions', JSON_TYPE, SURFACES[0]![3]())
  t.equal(res.status, 409)
  t.same(untraced(t, res, 'its own request_id'), { error: { message: 'nope', type: 'invalid_request_error', code: 'bad_thing' }, request_id: res.headers['x-request-id'] })
  t.equal(res.text.split('"request_id"').length, 3, 'one request_id member (and the trace\'s)')
  // A provider's own x_svc_trace member gives way to ours as well.
  const traced = JSON.stringify({ error: { message: 'nope', type: 'invalid_request_error' }, x_svc_trace: { provider: 'me', billing: { total_cost: '9' } } })
  Object.assign(answer, { status: 409, type: 'application/json', body: traced })
  const again = await post(stack, '/v1/chat/completions', JSON_TYPE, SURFACES[0]![3]())
  t.equal(again.text.split('"x_svc_trace"').length, 2, 'one x_svc_trace member')
  t.same(untraced(t, again, 'its own trace'), { error: { message: 'nope', type: 'invalid_request_error' }, request_id: again.headers['x-request-id'] })
})

t.test('the openai client raises its typed errors with our code and message for such answers', async (t) => {
  const { stack, answer } = await errorStack(t)
  const openai = client(stack)
  const chat = { model: CHAT, messages: [{ role: 'user' as const, content: 'hi' }] }

  Object.assign(answer, REWRITTEN[0]![1])
  const html = await apiError(t, openai.chat.completions.create(chat))
  t.ok(html instanceof OpenAI.BadRequestError, 'an HTML 400 is a BadRequestError')
  t.equal(html.code, 'invalid_request')
  t.equal(html.type, 'invalid_request_error')
  t.equal(html.message, '400 the provider answered HTTP 400')
  t.ok(html.requestID)

  Object.assign(answer, REWRITTEN[1]![1])
  const empty = await apiError(t, openai.chat.completions.create({ ...chat, stream: true }))
  t.ok(empty instanceof OpenAI.BadRequestError, 'an empty 400 to a stream request is a BadRequestError')
  t.equal(empty.code, 'invalid_request')

  Object.assign(answer, REWRITTEN[2]![1])
  const text = await apiError(t, openai.images.generate({ model: IMAGE, prompt: 'a fox' }))
  t.ok(text instanceof OpenAI.NotFoundError, 'a text 404 is a NotFoundError')
  t.equal(text.code, 'provider_error')

  Object.assign(answer, REWRITTEN[0]![1])
  const file = await toFile(wav(0.5), 'a.wav', { type: 'audio/wav' })
  const audio = await apiError(t, openai.audio.transcriptions.create({ model: AUDIO, file }))
  t.ok(audio instanceof OpenAI.BadRequestError)
  t.equal(audio.code, 'invalid_request')

  Object.assign(answer, { status: 400, type: 'application/json', body: CONTEXT_ERROR })
  const relayed = await apiError(t, openai.chat.completions.create(chat))
  t.ok(relayed instanceof OpenAI.BadRequestError)
  t.equal(relayed.code, 'context_length_exceeded', "the provider's own code")
  t.equal(relayed.param, 'messages')
  t.equal(relayed.message, '400 context too long')
})

t.test("an async image job failed by a provider's HTML 4xx records the envelope's message, not the page", async (t) => {
  const { stack, answer } = await errorStack(t)
  Object.assign(answer, REWRITTEN[0]![1])
  const submitted = await post(stack, '/v1/async/images/generations', JSON_TYPE, JSON.stringify({ model: IMAGE, prompt: 'a fox' }))
  t.equal(submitted.status, 202)
  const { jobId } = JSON.parse(submitted.text)
  let job: any
  for (let i = 0; i < 400; i++) {
    const res = await request(`${stack.url}/v1/async/jobs/${jobId}`, { headers: stack.auth })
    job = await res.body.json()
    if (job.status === 'failed' || job.status === 'completed') break
    await new Promise((r) => setTimeout(r, 25))
  }
  t.equal(job.status, 'failed')
  t.equal(job.errorMessage, 'the provider answered HTTP 400')
})
