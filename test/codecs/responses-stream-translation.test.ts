/**
 * The OpenAI chat → Responses stream translator, event by event: the documented sequence with its
 * sequence_numbers, one item at a time when a provider interleaves parallel tool calls, reasoning, text after
 * tools, a cut answer, a provider's error chunk, a break. Every fixture split at random cuts translates to the
 * same events.
 */
import t from 'tap'
import { ResponsesTranslatedStreamCodec } from '../../src/codecs/responses-stream-translation.js'
import { RouterError } from '../../src/errors.js'
import { upstreamToolName, type ToolNames } from '../../src/codecs/tool-names.js'
import { randomCuts } from './split.js'

function sse(chunks: object[], done = true): Buffer {
  return Buffer.from(chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + (done ? 'data: [DONE]\n\n' : ''))
}

const BASE = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm' }
function chunk(delta: object, finish: string | null = null, extra: object = {}) {
  return { ...BASE, choices: [{ index: 0, delta, finish_reason: finish }], ...extra }
}
const USAGE = { ...BASE, choices: [], usage: { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27, prompt_tokens_details: { cached_tokens: 5 }, completion_tokens_details: { reasoning_tokens: 2 } } }
const META = { id: 'resp_x', createdAt: 1, model: 'm', echo: { store: true, previous_response_id: null } }

/** Runs the codec over `parts`, then usage(), kept() and complete(); the events, with item ids numbered in order. */
function run(parts: Buffer[], names?: ToolNames) {
  const codec = new ResponsesTranslatedStreamCodec(META, names)
  const out: Buffer[] = []
  for (const p of parts) codec.push(p, (b) => out.push(Buffer.from(b)))
  codec.finish((b) => out.push(Buffer.from(b)))
  const usage = codec.usage(100)
  const kept = codec.kept()
  let text = Buffer.concat(out).toString() + codec.complete({ t: 1 })
  const ids = new Map<string, string>()
  text = text.replace(/"((?:msg|fc|ctc|rs)_[0-9a-f]{48})"/g, (_, id: string) => {
    if (!ids.has(id)) ids.set(id, `${id.split('_')[0]}_${ids.size}`)
    return JSON.stringify(ids.get(id))
  })
  const events = text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => {
      const name = /^event: (.*)$/m.exec(e)![1]!
      const data = JSON.parse(/^data: (.*)$/m.exec(e)![1]!)
      return { name, data }
    })
  return { events, codec, usage, kept }
}

const TEXT = sse([chunk({ role: 'assistant', content: 'Hel' }), chunk({ content: 'lo "you"' }, 'stop'), USAGE])

t.test('text: the documented sequence, numbered from 0, the trace in response.completed', async (t) => {
  const { events, usage, kept } = run([TEXT])
  t.same(events.map((e) => e.name), [
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.content_part.added',
    'response.output_text.delta',
    'response.output_text.delta',
    'response.output_text.done',
    'response.content_part.done',
    'response.output_item.done',
    'response.completed',
  ])
  t.ok(events.every((e, i) => e.data.sequence_number === i && e.data.type === e.name))
  t.same(events[0]!.data.response, { ...events[0]!.data.response, id: 'resp_x', object: 'response', status: 'in_progress', output: [], usage: null })
  t.same(events[2]!.data, { type: 'response.output_item.added', sequence_number: 2, output_index: 0, item: { id: 'msg_0', type: 'message', status: 'in_progress', role: 'assistant', content: [] } })
  t.same(events[4]!.data, { type: 'response.output_text.delta', sequence_number: 4, item_id: 'msg_0', output_index: 0, content_index: 0, delta: 'Hel', logprobs: [] })
  t.equal(events[6]!.data.text, 'Hello "you"')
  t.same(events[8]!.data.item, { id: 'msg_0', type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'Hello "you"', annotations: [] }] })
  const done = events[9]!.data.response
  t.equal(done.status, 'completed')
  t.same(done.usage, { input_tokens: 20, input_tokens_details: { cached_tokens: 5 }, output_tokens: 7, output_tokens_details: { reasoning_tokens: 2 }, total_tokens: 27 })
  t.same(done.x_svc_trace, { t: 1 })
  t.same(usage, { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27 })
  t.equal(kept!.output.length, 1)
  t.equal(kept!.response.status, 'completed')
})

const INTERLEAVED = sse([
  chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
  chunk({ tool_calls: [{ index: 1, function: { arguments: '{"tz":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
  chunk({ tool_calls: [{ index: 1, function: { arguments: '"CET"}' } }] }),
  chunk({}, 'tool_calls'),
  USAGE,
])

t.test('parallel tool calls that interleave come out one whole item at a time', async (t) => {
  const { events, kept } = run([INTERLEAVED])
  t.same(events.map((e) => [e.name, e.data.output_index ?? null]), [
    ['response.created', null],
    ['response.in_progress', null],
    ['response.output_item.added', 0],
    ['response.function_call_arguments.delta', 0],
    ['response.function_call_arguments.delta', 0],
    ['response.function_call_arguments.done', 0],
    ['response.output_item.done', 0],
    ['response.output_item.added', 1],
    ['response.function_call_arguments.delta', 1],
    ['response.function_call_arguments.done', 1],
    ['response.output_item.done', 1],
    ['response.completed', null],
  ])
  t.ok(events.every((e, i) => e.data.sequence_number === i))
  const items = events.at(-1)!.data.response.output
  t.same(items, [
    { id: 'fc_0', type: 'function_call', status: 'completed', call_id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { id: 'fc_1', type: 'function_call', status: 'completed', call_id: 'call_b', name: 'get_time', arguments: '{"tz":"CET"}' },
  ])
  t.same(kept!.output.map((i) => i.call_id), ['call_a', 'call_b'])
  // Within an item, every delta names it; no event of item 1 comes before item 0 is done.
  const firstOfB = events.findIndex((e) => e.data.item_id === 'fc_1' || e.data.item?.id === 'fc_1')
  const doneOfA = events.findIndex((e) => e.name === 'response.output_item.done' && e.data.item.id === 'fc_0')
  t.ok(firstOfB > doneOfA)
})

t.test('a call whose arguments are whole is done as soon as the next begins; reasoning, then text after tools', async (t) => {
  const { events } = run([
    sse([
      chunk({ reasoning_content: 'think' }),
      chunk({ tool_calls: [{ index: 0, id: 'call_a', function: { name: 'f', arguments: '{}' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'g', arguments: '{"x":1}' } }] }),
      chunk({ content: 'and text' }),
      chunk({}, 'stop', { usage: USAGE.usage }),
    ]),
  ])
  const added = events.filter((e) => e.name === 'response.output_item.added').map((e) => e.data.item.type)
  t.same(added, ['reasoning', 'function_call', 'function_call', 'message'])
  t.ok(events.some((e) => e.name === 'response.reasoning_text.delta' && e.data.delta === 'think'))
  const output = events.at(-1)!.data.response.output
  t.same(output.map((i: any) => i.type), ['reasoning', 'function_call', 'function_call', 'message'])
  t.same(output[0].content, [{ type: 'reasoning_text', text: 'think' }])
  t.ok(events.every((e, i) => e.data.sequence_number === i))
})

t.test('a cut answer ends in response.incomplete; a provider error chunk in response.failed, never completed', async (t) => {
  const cut = run([sse([chunk({ content: 'a' }), chunk({}, 'length', { usage: USAGE.usage })])])
  t.equal(cut.events.at(-1)!.name, 'response.incomplete')
  t.same(cut.events.at(-1)!.data.response.incomplete_details, { reason: 'max_output_tokens' })
  t.equal(cut.kept!.response.status, 'incomplete')

  const failed = run([sse([chunk({ content: 'a' }), { error: { message: 'overloaded', type: 'server_error' } }], false)])
  t.equal(failed.codec.ended, true, 'a provider that reports its error has ended its answer')
  t.equal(failed.kept, null, 'nothing is stored of it')
  const [before, last] = failed.events.slice(-2)
  t.equal(before!.name, 'response.failed')
  t.same(before!.data.response.error, { code: 'provider_error', message: 'overloaded' })
  t.equal(last!.name, 'error', 'then the error event clients raise')
  t.match(last!.data, { code: 'provider_error', message: 'overloaded', error: { type: 'provider_error', code: 'provider_error', message: 'overloaded' } })
  t.ok(failed.events.every((e, i) => e.data.sequence_number === i))
  t.notOk(failed.events.some((e) => e.name === 'response.completed'))
})

t.test('a break: response.failed once the response began, then an error event; the error event alone before', async (t) => {
  const codec = new ResponsesTranslatedStreamCodec(META)
  const out: string[] = []
  codec.push(sse([chunk({ content: 'a' })], false), (b) => out.push(b.toString()))
  t.equal(codec.ended, false, 'no finish, no [DONE]: cut short')
  const failed = codec.fail(new RouterError('provider_error', 'broke'), 'req_1', { t: 1 })
  t.match(failed, /^event: response\.failed\n/)
  const data = JSON.parse(/^data: (.*)$/m.exec(failed)![1]!)
  t.equal(data.sequence_number, out.join('').split('\n\n').filter((e) => e !== '').length)
  t.equal(data.response.status, 'failed')
  t.same(data.response.x_svc_trace, { t: 1 })
  const error = JSON.parse(/^data: (.*)$/m.exec(failed.split('\n\n')[1]!)![1]!)
  t.match(error, { type: 'error', sequence_number: data.sequence_number + 1, code: 'provider_error', error: { type: 'provider_error', code: 'provider_error', message: 'broke' }, request_id: 'req_1', x_svc_trace: { t: 1 } })
  t.equal(failed.split('\n\n').filter((e) => e !== '').length, 2)

  const early = new ResponsesTranslatedStreamCodec(META).fail(new RouterError('provider_timeout', 'slow'), 'req_2', { t: 2 })
  t.match(early, /^event: error\n/)
  const e = JSON.parse(/^data: (.*)$/m.exec(early)![1]!)
  t.match(e, { type: 'error', sequence_number: 0, code: 'provider_timeout', message: 'slow', request_id: 'req_2' })

  const junk = new ResponsesTranslatedStreamCodec(META)
  junk.push(Buffer.from('data: not json\n\n'), () => {})
  t.equal(junk.streamError, true)
  t.equal(junk.ended, false)
})

/** A custom tool call whose first chunk carries its id only: the name, which decides the item's type, comes next. */
const LATE_NAME = sse([
  chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_p', type: 'function', function: { arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { name: 'apply_patch' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"input":"*** Begin' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: ' Patch"}' } }] }),
  chunk({ tool_calls: [{ index: 1, id: 'call_w', type: 'function', function: { arguments: '{"city":' } }] }),
  chunk({ tool_calls: [{ index: 1, function: { name: 'get_weather', arguments: '"Oslo"}' } }] }),
  chunk({}, 'tool_calls'),
  USAGE,
])

function customNames(): ToolNames {
  const names: ToolNames = new Map()
  upstreamToolName('apply_patch', names, undefined, true)
  return names
}

t.test("a tool call's name after its first chunk: its item waits for it, so a custom tool's is a custom_tool_call", async (t) => {
  const { events, kept } = run([LATE_NAME], customNames())
  t.same(events.map((e) => e.name), [
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.custom_tool_call_input.delta',
    'response.custom_tool_call_input.done',
    'response.output_item.done',
    'response.output_item.added',
    'response.function_call_arguments.delta',
    'response.function_call_arguments.done',
    'response.output_item.done',
    'response.completed',
  ])
  t.ok(events.every((e, i) => e.data.sequence_number === i))
  t.same(events[2]!.data.item, { id: 'ctc_0', type: 'custom_tool_call', status: 'in_progress', call_id: 'call_p', name: 'apply_patch', input: '' })
  t.same(events[5]!.data.item, { id: 'ctc_0', type: 'custom_tool_call', status: 'completed', call_id: 'call_p', name: 'apply_patch', input: '*** Begin Patch' })
  t.same(events[6]!.data.item, { id: 'fc_1', type: 'function_call', status: 'in_progress', call_id: 'call_w', name: 'get_weather', arguments: '' })
  t.equal(events[7]!.data.delta, '{"city":"Oslo"}', "the arguments that came before the name, with the name's chunk's")
  t.same(kept!.output.map((i) => [i.type, i.name]), [['custom_tool_call', 'apply_patch'], ['function_call', 'get_weather']])
  // A call whose name never comes before something else: added as it stands, and named when the name comes.
  const early = run([sse([
    chunk({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { arguments: '{"a":' } }] }),
    chunk({ tool_calls: [{ index: 1, id: 'call_y', type: 'function', function: { name: 'other', arguments: '{}' } }] }),
    chunk({}, 'tool_calls'),
    USAGE,
  ])]).events
  t.same(early.filter((e) => e.name === 'response.output_item.done').map((e) => [e.data.item.call_id, e.data.item.name, e.data.item.arguments]), [['call_x', '', '{"a":'], ['call_y', 'other', '{}']])
})

t.test('every fixture translates alike however it is cut', async (t) => {
  for (const [name, bytes] of Object.entries({ TEXT, INTERLEAVED, LATE_NAME })) {
    const whole = JSON.stringify(run([bytes], customNames()).events)
    for (const { label, parts } of randomCuts(bytes, 40, 7)) t.equal(JSON.stringify(run(parts, customNames()).events), whole, `${name}: ${label}`)
  }
})
