/**
 * The simulated model in an agent loop, in all three wire formats, with the real `openai` and
 * `@anthropic-ai/sdk` clients: a tool call while the conversation does not end in a tool result, then a text
 * answer (whatever system or user text is sent beside the result); structured output that matches the
 * requested JSON schema (nested objects, arrays, enums, $refs, nullable fields), streamed or not; JSON mode
 * answered with JSON.
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { startSimulator, type SimulatorHandle } from '../../src/simulator/simulator.js'

async function start(tt: Test): Promise<SimulatorHandle> {
  const sim = await startSimulator()
  tt.teardown(() => sim.close())
  return sim
}

const openai = (sim: SimulatorHandle) => new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 })
const anthropic = (sim: SimulatorHandle) => new Anthropic({ baseURL: sim.url, apiKey: 'x', maxRetries: 0 })

const PARAMS = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }
const CHAT_TOOL = { type: 'function' as const, function: { name: 'get_weather', parameters: PARAMS } }

// What a zod schema becomes in OpenAI's strict form: nested objects, arrays, an enum, a nullable field, a $ref.
const SCHEMA = {
  type: 'object',
  properties: {
    title: { type: 'string' },
    year: { type: 'integer', minimum: 1900 },
    score: { type: 'number' },
    draft: { type: 'boolean' },
    genre: { type: 'string', enum: ['drama', 'comedy'] },
    subtitle: { anyOf: [{ type: 'string' }, { type: 'null' }] },
    tags: { type: 'array', items: { type: 'string' } },
    author: { $ref: '#/$defs/person' },
    reviews: { type: 'array', items: { type: 'object', properties: { stars: { type: 'integer', maximum: 5 }, by: { $ref: '#/$defs/person' } }, required: ['stars', 'by'] } },
  },
  required: ['title', 'year', 'score', 'draft', 'genre', 'subtitle', 'tags', 'author', 'reviews'],
  additionalProperties: false,
  $defs: { person: { type: 'object', properties: { name: { type: 'string' }, email: { type: 'string', format: 'email' } }, required: ['name', 'email'] } },
}
const PERSON = { name: 'sample', email: 'sample@example.com' }
const EXPECTED = { title: 'sample', year: 1900, score: 1, draft: false, genre: 'drama', subtitle: 'sample', tags: ['sample'], author: PERSON, reviews: [{ stars: 1, by: PERSON }] }

t.test('chat: a tool call, then a text answer once the conversation ends in its result', async (t) => {
  const sim = await start(t)
  const user = { role: 'user' as const, content: 'weather in Paris?' }
  const first = await openai(sim).chat.completions.create({ model: 'm', messages: [user], tools: [CHAT_TOOL] })
  t.equal(first.choices[0]!.finish_reason, 'tool_calls')
  const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall
  const history: OpenAI.ChatCompletionMessageParam[] = [user, first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny' }]
  const answered = await openai(sim).chat.completions.create({ model: 'm', messages: history, tools: [CHAT_TOOL] })
  t.equal(answered.choices[0]!.finish_reason, 'stop')
  t.match(answered.choices[0]!.message.content, /quick brown fox/)
  const withNote = [...history, { role: 'system' as const, content: 'a reminder' }, { role: 'user' as const, content: 'note beside the result' }]
  const noted = await openai(sim).chat.completions.create({ model: 'm', messages: withNote, tools: [CHAT_TOOL], stream: true })
  let streamedText = ''
  for await (const chunk of noted) streamedText += chunk.choices[0]?.delta.content ?? ''
  t.match(streamedText, /quick brown fox/, 'system and user text after the result: still answered in text')
  const forced = await openai(sim).chat.completions.create({ model: 'm', messages: history, tools: [CHAT_TOOL], tool_choice: 'required' })
  t.equal(forced.choices[0]!.finish_reason, 'tool_calls', 'a forced call is made even after a result')
  const next = await openai(sim).chat.completions.create({ model: 'm', messages: [...history, { role: 'assistant', content: 'sunny' }, user], tools: [CHAT_TOOL] })
  t.equal(next.choices[0]!.finish_reason, 'tool_calls', 'a new question after the answer: a new call')
})

t.test('chat: json_schema answered with a value of the schema, JSON and streamed; json_object with JSON', async (t) => {
  const sim = await start(t)
  const body = { model: 'm', messages: [{ role: 'user' as const, content: 'a film' }], response_format: { type: 'json_schema' as const, json_schema: { name: 'film', strict: true, schema: SCHEMA } } }
  const whole = await openai(sim).chat.completions.create(body)
  t.same(JSON.parse(whole.choices[0]!.message.content!), EXPECTED)
  t.equal(whole.usage!.completion_tokens, Math.ceil(JSON.stringify(EXPECTED).length / 4))
  let streamed = ''
  for await (const chunk of await openai(sim).chat.completions.create({ ...body, stream: true })) streamed += chunk.choices[0]?.delta.content ?? ''
  t.same(JSON.parse(streamed), EXPECTED)
  const mode = await openai(sim).chat.completions.create({ ...body, response_format: { type: 'json_object' } })
  t.same(Object.keys(JSON.parse(mode.choices[0]!.message.content!)), ['answer'])
  const capped = await openai(sim).chat.completions.create({ ...body, max_tokens: 3 })
  t.equal(capped.choices[0]!.finish_reason, 'length')
  t.equal(capped.choices[0]!.message.content, JSON.stringify(EXPECTED).slice(0, 12))
})

t.test('messages: system turns after the tool result, output_config.format, server tools left alone', async (t) => {
  const sim = await start(t)
  const tools = [{ type: 'web_search_20250305' as const, name: 'web_search' as const }, { name: 'get_weather', input_schema: PARAMS as Anthropic.Tool.InputSchema }]
  const user = { role: 'user' as const, content: 'weather in Paris?' }
  const first = await anthropic(sim).messages.create({ model: 'm', max_tokens: 100, messages: [user], tools })
  const use = first.content[0] as Anthropic.ToolUseBlock
  t.equal(use.name, 'get_weather', 'the client tool is called, not the server tool')
  t.same(use.input, { city: 'sample' })
  const messages = [
    user,
    { role: 'assistant' as const, content: first.content },
    { role: 'user' as const, content: [{ type: 'tool_result' as const, tool_use_id: use.id, content: 'sunny' }, { type: 'text' as const, text: '<reminder/>' }] },
    { role: 'system', content: 'mid-conversation system turn' },
  ] as Anthropic.MessageParam[]
  const answered = await anthropic(sim).messages.stream({ model: 'm', max_tokens: 100, messages, tools }).finalMessage()
  t.equal(answered.stop_reason, 'end_turn')
  const format = { output_config: { format: { type: 'json_schema', schema: SCHEMA } } }
  const json = await anthropic(sim).messages.create({ model: 'm', max_tokens: 1000, messages: [user], ...format } as Anthropic.MessageCreateParamsNonStreaming)
  t.same(JSON.parse((json.content[0] as Anthropic.TextBlock).text), EXPECTED)
  const streamed = await anthropic(sim).messages.stream({ model: 'm', max_tokens: 1000, messages: [user], ...format } as Anthropic.MessageStreamParams).finalMessage()
  t.same(JSON.parse((streamed.content[0] as Anthropic.TextBlock).text), EXPECTED)
})

t.test('responses: function tools only, text after any tool output, text.format json_schema and json_object', async (t) => {
  const sim = await start(t)
  const tools = [
    { type: 'web_search' },
    { type: 'namespace', name: 'agents', tools: [{ type: 'function', name: 'spawn', parameters: PARAMS }] },
    { type: 'custom', name: 'apply_patch' },
    { type: 'function', name: 'get_weather', parameters: PARAMS, strict: true },
  ] as OpenAI.Responses.Tool[]
  const first = await openai(sim).responses.create({ model: 'm', input: 'weather?', tools })
  const fc = first.output[0] as OpenAI.Responses.ResponseFunctionToolCall
  t.equal(fc.name, 'get_weather')
  const input = [
    { role: 'user' as const, content: 'weather?' },
    { type: 'custom_tool_call', call_id: 'c1', name: 'apply_patch', input: 'x' },
    { type: 'custom_tool_call_output', call_id: 'c1', output: 'done' },
    { role: 'user' as const, content: 'beside the output' },
  ] as OpenAI.Responses.ResponseInput
  const answered = await openai(sim).responses.create({ model: 'm', input, tools })
  t.equal(answered.output[0]!.type, 'message')
  const text = { format: { type: 'json_schema' as const, name: 'film', schema: SCHEMA, strict: true } }
  const json = await openai(sim).responses.create({ model: 'm', input: 'a film', text })
  t.same(JSON.parse(json.output_text), EXPECTED)
  let deltas = ''
  let done = ''
  for await (const ev of await openai(sim).responses.create({ model: 'm', input: 'a film', text, stream: true })) {
    if (ev.type === 'response.output_text.delta') deltas += ev.delta
    if (ev.type === 'response.output_text.done') done = ev.text
  }
  t.same(JSON.parse(deltas), EXPECTED)
  t.equal(done, deltas)
  const mode = await openai(sim).responses.create({ model: 'm', input: 'json please', text: { format: { type: 'json_object' } } })
  t.type(JSON.parse(mode.output_text).answer, 'string')
})
