/**
 * The OpenAI → Anthropic stream translator, driven by streams in the shape real providers send: content and
 * finish in one chunk, usage after the finish chunk, parallel tool calls, reasoning, a refusal, CRLF framing.
 * Every fixture split at every byte offset (and at random cuts) translates to the same events.
 */
import t, { type Test } from 'tap'
import { AnthropicTranslatedStreamCodec } from '../../src/codecs/anthropic-stream-translation.js'
import type { ToolNames } from '../../src/codecs/tool-names.js'
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
function run(parts: Buffer[], names: ToolNames = new Map()): { events: [string, any][]; codec: AnthropicTranslatedStreamCodec } {
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
  'a tool name after its call\'s first chunk': sse([
    chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { arguments: '' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { name: 'long_renamed_x', arguments: '"Paris"}' } }] }),
    chunk({}, 'tool_calls'),
    USAGE,
  ]),
}

/**
 * Real OpenAI chunks carry every member (`"usage":null`, `"logprobs":null`, `"refusal":null`); written out as
 * a provider writes them, so the bytes are split where a provider's would be.
 */
const GPT = '"id":"chatcmpl-B9x","object":"chat.completion.chunk","created":1732147200,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4"'
function raw(delta: string, finish = 'null', extra = '"usage":null'): string {
  return `data: {${GPT},"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}],${extra}}\n\n`
}
const call = (index: number, id: string, name: string): string =>
  `{"index":${index},"id":"${id}","type":"function","function":{"name":"${name}","arguments":""}}`
const args = (index: number, piece: string): string => `{"index":${index},"function":{"arguments":${JSON.stringify(piece)}}}`
const tools = (...calls: string[]): string => `{"tool_calls":[${calls.join(',')}]}`

/** Three parallel calls whose chunks interleave (0, 1, 0, 2, 1, 0 …), the finish, then the usage chunk. */
const INTERLEAVED = Buffer.from(
  raw('{"role":"assistant","content":null,"refusal":null}') +
    raw(tools(call(0, 'call_Wea0', 'get_weather'))) +
    raw(tools(call(1, 'call_Tim1', 'mcp__srv__tool_x_8f3a2b1c'))) +
    raw(tools(args(0, '{"ci'))) +
    raw(tools(args(1, '{"tz": "Europe/'))) +
    raw(tools(args(0, 'ty": "Par'))) +
    raw(tools(call(2, 'call_Wea2', 'get_weather'))) +
    raw(tools(args(1, 'Paris"}'))) +
    raw(tools(args(2, '{"city": "Rome"}'))) +
    raw(tools(args(0, 'is, \\"FR\\""}'))) +
    raw('{}', '"tool_calls"') +
    `data: {${GPT},"choices":[],"usage":{"prompt_tokens":81,"completion_tokens":52,"total_tokens":133,"prompt_tokens_details":{"cached_tokens":0}}}\n\n` +
    'data: [DONE]\n\n',
)

/** Walks the events checking that blocks never interleave; each block with its joined deltas. */
function blocksOf(t: Test, events: [string, any][]): { block: any; json: string; text: string }[] {
  const blocks: { block: any; json: string; text: string }[] = []
  let open: { block: any; json: string; text: string } | null = null
  for (const [name, data] of events) {
    if (name === 'content_block_start') {
      t.equal(open, null, `block ${data.index} starts after the previous one stopped`)
      t.equal(data.index, blocks.length, 'blocks are numbered in order')
      open = { block: data.content_block, json: '', text: '' }
      blocks.push(open)
    } else if (name === 'content_block_delta') {
      t.equal(data.index, blocks.length - 1, 'a delta belongs to the open block')
      t.ok(open !== null)
      open!.json += data.delta.partial_json ?? ''
      open!.text += data.delta.text ?? ''
    } else if (name === 'content_block_stop') {
      t.equal(data.index, blocks.length - 1)
      open = null
    }
  }
  t.equal(open, null, 'every block stopped')
  return blocks
}

t.test('interleaved parallel tool calls: contiguous blocks, ids, names and JSON exact', async (t) => {
  const names = new Map([['mcp__srv__tool_x_8f3a2b1c', { name: 'mcp__srv__a tool name OpenAI refused' }]])
  const { events } = run([INTERLEAVED], names)
  const blocks = blocksOf(t, events)
  t.same(
    blocks.map((b) => [b.block.type, b.block.id, b.block.name, b.json]),
    [
      ['tool_use', 'call_Wea0', 'get_weather', '{"city": "Paris, \\"FR\\""}'],
      ['tool_use', 'call_Tim1', 'mcp__srv__a tool name OpenAI refused', '{"tz": "Europe/Paris"}'],
      ['tool_use', 'call_Wea2', 'get_weather', '{"city": "Rome"}'],
    ],
  )
  for (const b of blocks) t.doesNotThrow(() => JSON.parse(b.json))
  const delta = events.find((e) => e[0] === 'message_delta')![1]
  t.same(delta, { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 52, input_tokens: 81 } })
  t.equal(events.at(-1)![0], 'message_stop')
  // Every cut of the bytes gives the same events.
  const whole = JSON.stringify(events)
  let same = 0
  let cuts = 0
  for (const { parts } of [...everyCut(INTERLEAVED), ...randomCuts(INTERLEAVED, 30, 11)]) {
    cuts++
    if (JSON.stringify(run(parts, names).events) === whole) same++
  }
  t.equal(same, cuts)
})

t.test('sequential parallel calls stream live: a call whose JSON is whole closes when the next starts', async (t) => {
  const codec = new AnthropicTranslatedStreamCodec('m', new Map())
  const out: string[] = []
  const push = (s: string): void => codec.push(Buffer.from(s), (b) => out.push(b.toString()))
  push(raw(tools(call(0, 'call_a', 'f'))) + raw(tools(args(0, '{"a":'))) + raw(tools(args(0, '1}'))))
  push(raw(tools(call(1, 'call_b', 'g'))))
  const before = out.join('')
  t.match(before, /"content_block_stop","index":0/, 'the first block stopped as soon as the second call began')
  t.match(before, /"id":"call_b"/, 'the second call is not held')
  push(raw(tools(args(1, '{"b":2}'))))
  t.match(out.at(-1)!, /"index":1,"delta":\{"type":"input_json_delta","partial_json":"\{\\"b\\":2\}"\}/)
  // All calls in one chunk, whole (as some OpenAI-compatible servers send them).
  const one = run([Buffer.from(raw(`{"tool_calls":[{"index":0,"id":"x0","type":"function","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"x1","type":"function","function":{"name":"g","arguments":"{\\"q\\":1}"}}]}`, '"tool_calls"') + 'data: [DONE]\n\n')])
  t.same(
    blocksOf(t, one.events).map((b) => [b.block.id, b.json]),
    [
      ['x0', '{}'],
      ['x1', '{"q":1}'],
    ],
  )
})

t.test('a held call whose id never came gets one; text after tool calls flushes the held ones first', async (t) => {
  const bytes = Buffer.from(
    raw(tools(call(0, 'call_a', 'f'))) +
      raw(tools(args(0, '{"a":'))) +
      raw(tools('{"index":1,"function":{"name":"g","arguments":"{}"}}')) +
      raw(tools(args(0, '1}'))) +
      raw('{"content":"done"}', '"stop"') +
      'data: [DONE]\n\n',
  )
  const blocks = blocksOf(t, run([bytes]).events)
  t.same(
    blocks.map((b) => [b.block.type, b.block.id, b.block.name, b.json || b.text]),
    [
      ['tool_use', 'call_a', 'f', '{"a":1}'],
      ['tool_use', 'toolu_1', 'g', '{}'],
      ['text', undefined, undefined, 'done'],
    ],
  )
})

t.test("a tool name after its call's first chunk: the tool_use block starts once it comes, named, with the arguments so far", async (t) => {
  const names = new Map([['long_renamed_x', { name: 'a long original name' }]])
  const { events } = run([FIXTURES["a tool name after its call's first chunk"]!], names)
  const blocks = blocksOf(t, events)
  t.same(blocks.map((b) => [b.block.type, b.block.id, b.block.name, b.json]), [['tool_use', 'call_a', 'a long original name', '{"city":"Paris"}']])
  // A name that never comes before something else: the block starts as it stands.
  const bytes = Buffer.from(raw(tools(args(0, '{"a":'))) + raw('{"content":"done"}', '"stop"') + 'data: [DONE]\n\n')
  t.same(blocksOf(t, run([bytes]).events).map((b) => [b.block.type, b.block.id, b.block.name, b.json || b.text]), [
    ['tool_use', 'toolu_0', '', '{"a":'],
    ['text', undefined, undefined, 'done'],
  ])
})

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
  const { events } = run([FIXTURES['parallel tool calls']!], new Map([['long_renamed_x', { name: 'a long original name' }]]))
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
    const names = new Map([['long_renamed_x', { name: 'a long original name' }]])
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

t.test('stop_sequence: named by the provider, or at the end of the text; otherwise end_turn (stream and JSON)', async (t) => {
  const { toAnthropicMessage } = await import('../../src/codecs/anthropic-json-translation.js')
  const stops = ['###', 'END', 'THE END']
  const cases: { name: string; text: string[]; finish: string; want: string | null }[] = [
    // vLLM names the matched string in the choice's stop_reason (and drops it from the text).
    { name: 'vLLM stop_reason', text: ['Hello', ' there'], finish: '"finish_reason":"stop","stop_reason":"###"', want: '###' },
    // SGLang names it in matched_stop.
    { name: 'SGLang matched_stop', text: ['Hi'], finish: '"finish_reason":"stop","matched_stop":"END"', want: 'END' },
    // A token id (EOS) is not one of the request's sequences.
    { name: 'vLLM EOS token id', text: ['Hi'], finish: '"finish_reason":"stop","stop_reason":128009', want: null },
    // A provider that keeps the sequence in the text: the longest one it ends with, even split across chunks.
    { name: 'kept in the text', text: ['once upon', ' a time. THE E', 'ND'], finish: '"finish_reason":"stop"', want: 'THE END' },
    // OpenAI: "stop" and nothing more said.
    { name: 'OpenAI', text: ['Hello'], finish: '"finish_reason":"stop"', want: null },
    { name: 'length is not a stop', text: ['x ###'], finish: '"finish_reason":"length"', want: null },
  ]
  for (const c of cases) {
    const body =
      c.text.map((x) => raw(`{"content":${JSON.stringify(x)}}`)).join('') +
      `data: {${GPT},"choices":[{"index":0,"delta":{},"logprobs":null,${c.finish}}],"usage":null}\n\ndata: [DONE]\n\n`
    const codec = new AnthropicTranslatedStreamCodec('m', new Map(), stops)
    const out: Buffer[] = []
    codec.push(Buffer.from(body), (b) => out.push(Buffer.from(b)))
    codec.finish((b) => out.push(b))
    const text = Buffer.concat(out).toString() + codec.complete({})
    const delta = JSON.parse(/event: message_delta\ndata: (.*)\n/.exec(text)![1]!).delta
    const reason = c.want !== null ? 'stop_sequence' : c.finish.includes('length') ? 'max_tokens' : 'end_turn'
    t.same(delta, { stop_reason: reason, stop_sequence: c.want }, `stream: ${c.name}`)

    const choice = JSON.parse(`{"index":0,"message":{"role":"assistant","content":${JSON.stringify(c.text.join(''))}},${c.finish}}`)
    const message = toAnthropicMessage({ id: 'x', choices: [choice] }, 'm', new Map(), stops)
    t.same([message.stop_reason, message.stop_sequence], [reason, c.want], `JSON: ${c.name}`)
  }
  const none = toAnthropicMessage({ id: 'x', choices: [{ message: { content: 'a ###' }, finish_reason: 'stop', stop_reason: '###' }] }, 'm', new Map())
  t.same([none.stop_reason, none.stop_sequence], ['end_turn', null], 'a request without stop_sequences never gets stop_sequence')
})

t.test('an event whose data is not a JSON object is dropped and breaks the stream, whatever follows', async (t) => {
  for (const bad of ['{not json', '<html>502</html>', '[1,2]', '"a-bare-string"', '{"a":1} {"b":2}']) {
    const body = Buffer.concat([sse([chunk({ role: 'assistant', content: 'Hi' })], false), Buffer.from(`data: ${bad}\n\n`), sse([chunk({}, 'stop'), USAGE])])
    const codec = new AnthropicTranslatedStreamCodec('claude-x', new Map())
    const out: Buffer[] = []
    codec.push(body, (b) => out.push(Buffer.from(b)))
    codec.finish((b) => out.push(Buffer.from(b)))
    t.notOk(Buffer.concat(out).toString().includes(bad), `${bad}: not relayed`)
    t.equal(codec.ended, false, `${bad}: the stream is not whole though [DONE] came`)
    t.equal(codec.streamError, true, `${bad}: a stream_error`)
  }
  const blank = new AnthropicTranslatedStreamCodec('claude-x', new Map())
  blank.push(Buffer.concat([Buffer.from('data: \n\ndata:   \n\n'), FIXTURES['a refusal']!]), () => {})
  t.equal(blank.ended, true, 'blank data lines are no events and break nothing')
  t.equal(blank.streamError, false)
})

t.test('usage counts that are not counts are not passed on to the client', async (t) => {
  const bad = { ...BASE, choices: [], usage: { prompt_tokens: -20, completion_tokens: -7, total_tokens: -27, prompt_tokens_details: { cached_tokens: -5 } } }
  const { events, codec } = run([sse([chunk({ role: 'assistant', content: 'Hi' }, null, { usage: bad.usage }), chunk({ content: '!' }, 'stop'), bad])])
  t.equal(events[0]![1].message.usage.input_tokens, 0, 'message_start: no negative input')
  const delta = events.find((e) => e[0] === 'message_delta')![1]
  t.same(delta.usage, { output_tokens: 2 }, 'message_delta: the content chunks counted, no input_tokens')
  t.equal(codec.usage(100).estimated, true, 'billed by estimate')
  const cached = run([sse([chunk({ content: 'x' }, 'stop'), { ...BASE, choices: [], usage: { prompt_tokens: 4, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 9 } } }])])
  t.same(cached.events.find((e) => e[0] === 'message_delta')![1].usage, { input_tokens: 4, output_tokens: 1 }, 'more cached than prompt tokens: no cache figure')
})

t.test('a translated JSON message carries no negative usage', async (t) => {
  const { toAnthropicMessage } = await import('../../src/codecs/anthropic-json-translation.js')
  const choice = { message: { content: 'a' }, finish_reason: 'stop' }
  const negative = toAnthropicMessage({ id: 'x', choices: [choice], usage: { prompt_tokens: -3, completion_tokens: -1 } }, 'm', new Map())
  t.same(negative.usage, { input_tokens: 0, output_tokens: 0 })
  const cached = toAnthropicMessage({ id: 'x', choices: [choice], usage: { prompt_tokens: 12, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 10 } } }, 'm', new Map())
  t.same(cached.usage, { input_tokens: 2, output_tokens: 2, cache_read_input_tokens: 10 })
})
