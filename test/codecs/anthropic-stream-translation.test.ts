/**
 * The OpenAI → Anthropic stream translator, driven by streams in the shape real providers send: content and
 * finish in one chunk, usage after the finish chunk, parallel tool calls, reasoning, a refusal, CRLF framing.
 * Every fixture split at every byte offset (and at random cuts) translates to the same events.
 */
import t from 'tap'
import { AnthropicTranslatedStreamCodec } from '../../src/codecs/anthropic-stream-translation.js'
import { everyCut, randomCuts } from './split.js'

function sse(chunks: object[], done = true, eol = '\n'): Buffer {
  return Buffer.from(chunks.map((c) => `data: ${JSON.stringify(c)}${eol}${eol}`).join('') + (done ? `data: [DONE]${eol}${eol}` : ''))
}

const BASE = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm' }
function chunk(delta: object, finish: string | null = null, extra: object = {}) {
  return { ...BASE, choices: [{ index: 0, delta, finish_reason: finish }], ...extra }
}
const USAGE = { ...BASE, choices: [], usage: { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27, prompt_tokens_details: { cached_tokens: 5 } } }

/** Runs the codec over `parts`, then complete(); the events as [name, data]. */
function run(parts: Buffer[], names = new Map<string, string>()): { events: [string, any][]; codec: AnthropicTranslatedStreamCodec } {
  const codec = new AnthropicTranslatedStreamCodec('claude-x', names)
  const out: Buffer[] = []
  for (const p of parts) codec.push(p, (b) => out.push(Buffer.from(b)))
  codec.finish((b) => out.push(Buffer.from(b)))
  const text = Buffer.concat(out).toString() + codec.complete({ t: 1 })
  const events = text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e): [string, any] => [/^event: (.*)$/m.exec(e)![1]!, JSON.parse(/^data: (.*)$/m.exec(e)![1]!)])
  return { events, codec }
}

const FIXTURES: Record<string, Buffer> = {
  'content and finish in one chunk, usage after the finish': sse([chunk({ role: 'assistant', content: 'Hel' }), chunk({ content: 'lo "you"' }, 'stop'), USAGE]),
  'parallel tool calls': sse([
    chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
    chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'long_renamed_x', arguments: '{"city":"Rome"}' } }] }),
    chunk({}, 'tool_calls'),
    USAGE,
  ]),
  'reasoning then text, CRLF framing': sse([chunk({ reasoning_content: 'think' }), chunk({ content: 'answer' }), chunk({}, 'length', { usage: USAGE.usage })], true, '\r\n'),
  'a refusal': sse([chunk({ refusal: 'I cannot' }), chunk({}, 'stop')]),
}

t.test('content and finish in one chunk, usage after the finish chunk', async (t) => {
  const { events, codec } = run([FIXTURES['content and finish in one chunk, usage after the finish']!])
  t.same(
    events.map((e) => e[0]),
    ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
  )
  t.equal(events[0]![1].message.id, 'chatcmpl-1')
  t.equal(events[0]![1].message.model, 'claude-x')
  t.same(events[1]![1].content_block, { type: 'text', text: '' })
  t.same(events[3]![1].delta, { type: 'text_delta', text: 'lo "you"' })
  t.same(events[5]![1], {
    type: 'message_delta',
    delta: { stop_reason: 'end_turn', stop_sequence: null },
    usage: { output_tokens: 7, input_tokens: 15, cache_read_input_tokens: 5 },
  })
  t.same(events[6]![1], { type: 'message_stop', x_svc_trace: { t: 1 } })
  t.same(codec.usage(100), { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27 })
  t.equal(codec.id, 'chatcmpl-1')
})

t.test('parallel tool calls become sequential tool_use blocks with partial JSON, names mapped back', async (t) => {
  const { events } = run([FIXTURES['parallel tool calls']!], new Map([['long_renamed_x', 'a long original name']]))
  const starts = events.filter((e) => e[0] === 'content_block_start').map((e) => e[1])
  t.same(starts, [
    { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'call_a', name: 'get_weather', input: {} } },
    { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'call_b', name: 'a long original name', input: {} } },
  ])
  const json = events.filter((e) => e[0] === 'content_block_delta').map((e) => [e[1].index, e[1].delta.partial_json])
  t.same(json, [
    [0, '{"city":'],
    [0, '"Paris"}'],
    [1, '{"city":"Rome"}'],
  ])
  t.equal(events.filter((e) => e[0] === 'content_block_stop').length, 2)
  t.equal(events.find((e) => e[0] === 'message_delta')![1].delta.stop_reason, 'tool_use')
})

t.test('reasoning becomes a thinking block, then text; length is max_tokens', async (t) => {
  const { events } = run([FIXTURES['reasoning then text, CRLF framing']!])
  const starts = events.filter((e) => e[0] === 'content_block_start').map((e) => e[1].content_block.type)
  t.same(starts, ['thinking', 'text'])
  t.same(events[2]![1].delta, { type: 'thinking_delta', thinking: 'think' })
  t.equal(events.find((e) => e[0] === 'message_delta')![1].delta.stop_reason, 'max_tokens')
})

t.test('a refusal is kept as refusal', async (t) => {
  const { events } = run([FIXTURES['a refusal']!])
  t.equal(events.find((e) => e[0] === 'message_delta')![1].delta.stop_reason, 'refusal')
  const { codec } = run([FIXTURES['a refusal']!])
  t.equal(codec.usage(40).estimated, true, 'no usage reported: estimated')
})

t.test('a stream that breaks before its end: fail() is an error event, never a message_stop', async (t) => {
  const codec = new AnthropicTranslatedStreamCodec('m', new Map())
  const out: Buffer[] = []
  codec.push(sse([chunk({ content: 'partial' })], false), (b) => out.push(b))
  const { RouterError } = await import('../../src/errors.js')
  const end = codec.fail(new RouterError('provider_error', 'broke'), 'req_1', { x: 1 })
  t.ok(codec.produced)
  t.notMatch(Buffer.concat(out).toString(), /message_stop/)
  t.match(end, /^event: error\ndata: /)
  t.same(JSON.parse(end.slice(end.indexOf('{'))), {
    type: 'error',
    error: { type: 'provider_error', message: 'broke', code: 'provider_error' },
    request_id: 'req_1',
    x_svc_trace: { x: 1 },
  })
})

t.test('every split of every fixture translates to the same events', async (t) => {
  for (const [name, bytes] of Object.entries(FIXTURES)) {
    const names = new Map([['long_renamed_x', 'a long original name']])
    const whole = JSON.stringify(run([bytes], names).events)
    let same = 0
    let cuts = 0
    for (const { parts } of [...everyCut(bytes), ...randomCuts(bytes, 50, 7)]) {
      cuts++
      if (JSON.stringify(run(parts, names).events) === whole) same++
    }
    t.equal(same, cuts, name)
  }
})

t.test('an error chunk from the provider mid-stream ends the stream in event: error, never message_stop', async (t) => {
  const bytes = Buffer.concat([sse([chunk({ content: 'par' })], false), Buffer.from('data: {"error":{"message":"overloaded","type":"server_error"}}\n\n')])
  const { events } = run([bytes])
  t.notOk(events.some((e) => e[0] === 'message_stop' || e[0] === 'message_delta'))
  t.same(events.at(-1), ['error', { type: 'error', error: { type: 'server_error', message: 'overloaded' }, x_svc_trace: { t: 1 } }])
})

t.test('native: a provider error event is held and ends the stream with the trace, in place of message_stop', async (t) => {
  const { AnthropicStreamCodec } = await import('../../src/codecs/anthropic-native.js')
  const codec = new AnthropicStreamCodec()
  const out: Buffer[] = []
  const start = 'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
  const error = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
  codec.push(Buffer.from(start + error), (b) => out.push(Buffer.from(b)))
  codec.finish((b) => out.push(b))
  t.equal(Buffer.concat(out).toString(), start)
  t.equal(codec.id, 'msg_1')
  const end = codec.complete({ t: 1 })
  t.same(JSON.parse(end.slice(end.indexOf('{'))), { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' }, x_svc_trace: { t: 1 } })
  t.match(end, /^event: error\n/)
})
