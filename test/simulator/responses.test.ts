/**
 * The simulator's native Responses endpoint, with the real `openai` client: JSON and streams (the documented
 * event sequence, numbered), a function call and its output, the output bound, and refusals of what a
 * stateless provider cannot do.
 */
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from '../../src/simulator/simulator.js'

async function start(tt: Test, options?: SimulatorOptions): Promise<SimulatorHandle> {
  const sim = await startSimulator(options)
  tt.teardown(() => sim.close())
  return sim
}

function client(sim: SimulatorHandle): OpenAI {
  return new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 })
}

const TOOL = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }

t.test('JSON: text, usage, the output bound, a function call and its output', async (t) => {
  const sim = await start(t)
  const resp = await client(sim).responses.create({ model: 'm', input: 'hello world!', instructions: 'Be brief.' })
  t.match(resp.id, /^resp_/)
  t.equal(resp.status, 'completed')
  t.equal(resp.output_text, ' The quick brown fox jumps over the lazy dog while the simulated provider streams filler tokens')
  t.equal(resp.usage!.output_tokens, 16)
  t.equal(resp.usage!.input_tokens, 14, 'as the chat endpoint counts: ceil(9/4) + 4 + ceil(12/4) + 4')
  const capped = await client(sim).responses.create({ model: 'm', input: 'hi', max_output_tokens: 3 })
  t.equal(capped.status, 'incomplete')
  t.equal(capped.usage!.output_tokens, 3)
  const call = await client(sim).responses.create({ model: 'm', input: 'weather?', tools: [TOOL] })
  const fc = call.output[0] as OpenAI.Responses.ResponseFunctionToolCall
  t.equal(fc.type, 'function_call')
  t.same(JSON.parse(fc.arguments), { city: 'sample' })
  const after = await client(sim).responses.create({
    model: 'm',
    tools: [TOOL],
    input: [{ role: 'user', content: 'weather?' }, { type: 'function_call', call_id: fc.call_id, name: fc.name, arguments: fc.arguments }, { type: 'function_call_output', call_id: fc.call_id, output: 'sunny' }],
  })
  t.equal(after.output[0]!.type, 'message', 'a function output is answered in text')
})

t.test('stream: the documented events, numbered from 0, for text and for a function call', async (t) => {
  const sim = await start(t)
  const text: any[] = []
  for await (const ev of await client(sim).responses.create({ model: 'm', input: 'hello', stream: true })) text.push(ev)
  t.same(text.map((e) => e.sequence_number), text.map((_, i) => i))
  t.same([...new Set(text.map((e) => e.type))], [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
  ])
  t.equal(text.at(-1).response.usage.output_tokens, 16)
  const tool: any[] = []
  for await (const ev of await client(sim).responses.create({ model: 'm', input: 'w?', tools: [TOOL], stream: true })) tool.push(ev)
  t.same(tool.map((e) => e.sequence_number), tool.map((_, i) => i))
  const args = tool.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('')
  t.same(JSON.parse(args), { city: 'sample' })
  t.equal(tool.at(-1).response.output[0].arguments, args)
})

t.test('refusals: no input, previous_response_id (it stores nothing), an unknown model', async (t) => {
  const sim = await start(t, { models: ['m'] })
  for (const [body, status] of [
    [{ model: 'm' }, 400],
    [{ model: 'm', input: 'x', previous_response_id: 'resp_1' }, 400],
    [{ model: 'other', input: 'x' }, 404],
  ] as const) {
    const res = await request(sim.url + '/v1/responses', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    t.equal(res.statusCode, status)
    t.ok(((await res.body.json()) as any).error.message)
  }
  t.equal(sim.stats.lastPath, '/v1/responses')
})
