/**
 * A native Responses answer made the router's: the provider's id replaced by ours (and kept as SVC-Res-Key),
 * the client's own store / previous_response_id, deltas relayed byte for byte, the last event held for the
 * trace, the provider's own failure events, events without an `event:` line, and what a break ends with.
 */
import t from 'tap'
import { ResponsesNativeJsonCodec, ResponsesNativeStreamCodec } from '../../src/codecs/responses-native.js'
import { RouterError } from '../../src/errors.js'

const META = { id: 'resp_ours', createdAt: 1, model: 'm', echo: { store: true, previous_response_id: 'resp_before' } }
const RESPONSE = { id: 'resp_theirs', object: 'response', status: 'in_progress', store: false, previous_response_id: null, output: [], usage: null }
const DONE = { ...RESPONSE, status: 'completed', output: [{ id: 'msg_1', type: 'message', content: [{ type: 'output_text', text: 'hi' }] }], usage: { input_tokens: 7, output_tokens: 3, total_tokens: 10 } }

function event(type: string, seq: number, body: object, named = true): string {
  return `${named ? `event: ${type}\n` : ''}data: ${JSON.stringify({ type, sequence_number: seq, ...body })}\n\n`
}

const DELTA = event('response.output_text.delta', 2, { item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'hi' })

function run(text: string) {
  const codec = new ResponsesNativeStreamCodec(META)
  const out: Buffer[] = []
  codec.push(Buffer.from(text), (b) => out.push(Buffer.from(b)))
  codec.finish((b) => out.push(Buffer.from(b)))
  return { codec, out: Buffer.concat(out).toString() }
}

t.test('a stream: lifecycle events re-written with our id, deltas byte for byte, completed held for the trace', async (t) => {
  for (const named of [true, false]) {
    const { codec, out } = run(event('response.created', 0, { response: RESPONSE }, named) + event('response.in_progress', 1, { response: RESPONSE }, named) + DELTA + event('response.completed', 3, { response: DONE }, named))
    t.equal(codec.id, 'resp_theirs', 'SVC-Res-Key is the provider’s id')
    t.ok(out.includes(DELTA), 'the delta is relayed as it came')
    t.notOk(out.includes('resp_theirs'), 'no provider id reaches the client')
    t.notOk(out.includes('response.completed'), 'the last event waits for the charge')
    const created = JSON.parse(/^data: (.*)$/m.exec(out)![1]!)
    t.match(created, { type: 'response.created', sequence_number: 0, response: { id: 'resp_ours', store: true, previous_response_id: 'resp_before' } })
    t.equal(codec.ended, true)
    t.equal(codec.terminated, true)
    t.same(codec.usage(100), { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })
    const kept = codec.kept()!
    t.equal(kept.response.id, 'resp_ours')
    t.same(kept.output, DONE.output)
    const last = codec.complete({ t: 1 })
    t.match(last, /^event: response\.completed\n/)
    const data = JSON.parse(/^data: (.*)$/m.exec(last)![1]!)
    t.match(data, { type: 'response.completed', sequence_number: 3, response: { id: 'resp_ours', status: 'completed', x_svc_trace: { t: 1 } } })
  }
})

t.test("the provider's own failure events end the stream in its place, with the trace; nothing is kept", async (t) => {
  const failed = run(event('response.created', 0, { response: RESPONSE }) + event('response.failed', 1, { response: { ...RESPONSE, status: 'failed', error: { code: 'server_error', message: 'x' } } }))
  t.equal(failed.codec.ended, true)
  t.equal(failed.codec.kept(), null)
  t.match(failed.codec.complete({ t: 2 }), /^event: response\.failed\ndata: .*"x_svc_trace":\{"t":2\}/)
  const error = run(event('response.created', 0, { response: RESPONSE }) + event('error', 1, { code: 'overloaded', message: 'busy' }))
  t.equal(error.codec.ended, true)
  t.match(JSON.parse(/^data: (.*)$/m.exec(error.codec.complete({ t: 3 }))![1]!), { type: 'error', code: 'overloaded', x_svc_trace: { t: 3 } })
})

t.test('a break: response.failed numbered after the last event once it began, then an error event; junk is a stream error', async (t) => {
  // Deltas are relayed unread: they are counted from the last number read (the provider numbers each event).
  const begun = run(event('response.created', 0, { response: RESPONSE }) + event('response.in_progress', 1, { response: RESPONSE }) + DELTA)
  t.equal(begun.codec.ended, false)
  const failed = begun.codec.fail(new RouterError('provider_error', 'broke'), 'req_1', { t: 1 })
  t.match(JSON.parse(/^data: (.*)$/m.exec(failed)![1]!), { type: 'response.failed', sequence_number: 3, response: { id: 'resp_ours', status: 'failed', error: { code: 'provider_error' } } })
  const early = run('').codec.fail(new RouterError('provider_timeout', 'slow'), 'req_2', { t: 2 })
  t.match(early, /^event: error\n/)
  const junk = run('data: {not json}\n\n')
  t.equal(junk.codec.streamError, true)
  t.equal(junk.codec.ended, false)
})

t.test('a JSON answer: our id, the client’s store, its usage; not a response object is a provider failure', async (t) => {
  const codec = new ResponsesNativeJsonCodec(META)
  t.equal(codec.read(Buffer.from(JSON.stringify(DONE))), true)
  t.equal(codec.id, 'resp_theirs')
  t.same(codec.usage(10), { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })
  const body = JSON.parse(codec.complete({ t: 1 }))
  t.match(body, { id: 'resp_ours', store: true, previous_response_id: 'resp_before', x_svc_trace: { t: 1 } })
  t.equal(new ResponsesNativeJsonCodec(META).read(Buffer.from('{"error":{"message":"x"}}')), false)
  t.equal(new ResponsesNativeJsonCodec(META).read(Buffer.from('not json')), false)
  const bare = new ResponsesNativeJsonCodec(META)
  bare.read(Buffer.from(JSON.stringify({ ...DONE, usage: undefined })))
  t.equal(bare.usage(40).estimated, true, 'no usage: estimated')
})
