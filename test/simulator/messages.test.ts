/**
 * The simulator's native Anthropic endpoint, with the real @anthropic-ai/sdk client: JSON and streams, tools,
 * usage, and the faults it shares with the chat endpoint.
 */
import Anthropic from '@anthropic-ai/sdk'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from '../../src/simulator/simulator.js'

async function start(tt: Test, options?: SimulatorOptions): Promise<SimulatorHandle> {
  const sim = await startSimulator(options)
  tt.teardown(() => sim.close())
  return sim
}

function client(sim: SimulatorHandle): Anthropic {
  return new Anthropic({ baseURL: sim.url, apiKey: 'x', maxRetries: 0 })
}

const HELLO = { model: 'm', max_tokens: 100, system: 'Be brief.', messages: [{ role: 'user' as const, content: 'hello world!' }] }
// ceil(9/4) + 4 + ceil(12/4) + 4, as the chat endpoint counts
const PROMPT_TOKENS = 14

t.test('native JSON message: text, stop reason, usage', async (t) => {
  const sim = await start(t)
  const msg = await client(sim).messages.create(HELLO)
  t.match(msg.id, /^msg_/)
  t.equal((msg.content[0] as Anthropic.TextBlock).text, ' The quick brown fox jumps over the lazy dog while the simulated provider streams filler tokens')
  t.equal(msg.stop_reason, 'end_turn')
  t.same(msg.usage, { input_tokens: PROMPT_TOKENS, output_tokens: 16 })
  const capped = await client(sim).messages.create({ ...HELLO, max_tokens: 3 })
  t.equal(capped.stop_reason, 'max_tokens')
  t.equal(capped.usage.output_tokens, 3)
})

t.test('native stream: the SDK assembles text and tool input; a tool result ends the exchange', async (t) => {
  const sim = await start(t)
  const msg = await client(sim).messages.stream(HELLO).finalMessage()
  t.equal((msg.content[0] as Anthropic.TextBlock).text.split(' ').length, 17)
  t.same(msg.usage.output_tokens, 16)
  const tools = [{ name: 'get_weather', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }]
  const called = await client(sim).messages.stream({ ...HELLO, tools }).finalMessage()
  t.equal(called.stop_reason, 'tool_use')
  const use = called.content[0] as Anthropic.ToolUseBlock
  t.same(use.input, { city: 'sample' })
  const answered = await client(sim).messages.create({
    ...HELLO,
    tools,
    messages: [...HELLO.messages, { role: 'assistant', content: called.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }],
  })
  t.equal(answered.stop_reason, 'end_turn')
})

t.test('faults are the chat endpoint faults', async (t) => {
  const sim = await start(t, { fault: 'status-500' })
  const res = await request(sim.url + '/v1/messages', { method: 'POST', body: JSON.stringify(HELLO), headers: { 'content-type': 'application/json' } })
  t.equal(res.statusCode, 500)
  await res.body.text()
  sim.setOptions({ fault: 'no-usage' })
  const res2 = await request(sim.url + '/v1/messages', { method: 'POST', body: JSON.stringify(HELLO), headers: { 'content-type': 'application/json' } })
  t.notOk('usage' in (await res2.body.json() as object))
  t.equal(sim.stats.lastPath, '/v1/messages')
  const bad = await request(sim.url + '/v1/messages', { method: 'POST', body: JSON.stringify({ model: 'm', messages: HELLO.messages }) })
  t.equal(bad.statusCode, 400)
  await bad.body.text()
})
