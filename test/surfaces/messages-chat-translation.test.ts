/**
 * /v1/chat/completions to a model served only by native-Anthropic providers: the chat request translated to
 * an Anthropic messages request, the answer (JSON and SSE) translated back, with the real openai client.
 */
import OpenAI from 'openai'
import t from 'tap'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-claude-only'
const N = addr('c')

function stackOf(t: Parameters<typeof startStack>[0], sim = {}): Promise<Stack> {
  return startStack(t, [{ address: N, models: [{ id: MODEL, formats: ['anthropic'] }], sim }])
}

function client(stack: Stack): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
}

const TOOL = {
  type: 'function' as const,
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
}

t.test('openai client on chat against an anthropic-only provider: JSON', async (t) => {
  const stack = await stackOf(t)
  const { data, response } = await client(stack)
    .chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'system', content: 'Be terse.' },
        { role: 'user', content: 'hello' },
      ],
    })
    .withResponse()
  t.equal(data.object, 'chat.completion')
  t.match(data.choices[0]!.message.content, /The quick brown fox/)
  t.equal(data.choices[0]!.finish_reason, 'stop')
  t.equal(data.usage!.completion_tokens, 16)
  t.equal(response.headers.get('svc-res-key'), data.id)
  t.equal((data as any).x_svc_trace.provider, N)
  const sim = stack.sims.get(N)!
  t.equal(sim.stats.lastPath, '/v1/messages')
  t.equal(sim.stats.lastBody.system, 'Be terse.')
  t.same(sim.stats.lastBody.messages, [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }])
  t.equal(sim.stats.lastBody.max_tokens, 4096)
})

t.test('openai client on chat against an anthropic-only provider: stream with usage and trace', async (t) => {
  const stack = await stackOf(t)
  const stream = await client(stack).chat.completions.create({
    model: MODEL,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 5,
    messages: [{ role: 'user', content: 'hello' }],
  })
  let text = ''
  let finish: string | null = null
  let usage: OpenAI.CompletionUsage | undefined
  let trace: any
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? ''
    finish = chunk.choices[0]?.finish_reason ?? finish
    usage = chunk.usage ?? usage
    trace = (chunk as any).x_svc_trace ?? trace
  }
  t.equal(text, ' The quick brown fox jumps')
  t.equal(finish, 'length')
  t.equal(usage!.completion_tokens, 5)
  t.equal(trace.provider, N)
  t.equal(trace.usage.completion_tokens, 5)
})

t.test('tool calls cross the translation both ways, streamed and not', async (t) => {
  const stack = await stackOf(t)
  const openai = client(stack)
  const first = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'weather?' }], tools: [TOOL], tool_choice: 'required' })
  t.equal(first.choices[0]!.finish_reason, 'tool_calls')
  const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall
  t.equal(call.function.name, 'get_weather')
  t.same(JSON.parse(call.function.arguments), { city: 'sample' })
  t.same(stack.sims.get(N)!.stats.lastBody.tool_choice, { type: 'any' })

  const second = await openai.chat.completions.create({
    model: MODEL,
    tools: [TOOL],
    messages: [{ role: 'user', content: 'weather?' }, first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny' }],
  })
  t.equal(second.choices[0]!.finish_reason, 'stop', 'the tool result reached the provider as a tool_result block')
  const sent = stack.sims.get(N)!.stats.lastBody
  t.same(sent.messages[2], { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'sunny' }] })

  const stream = await openai.chat.completions.create({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'weather?' }], tools: [TOOL] })
  let args = ''
  let name = ''
  for await (const chunk of stream) {
    const tc = chunk.choices[0]?.delta?.tool_calls?.[0]
    if (tc?.function?.name) name = tc.function.name
    args += tc?.function?.arguments ?? ''
  }
  t.equal(name, 'get_weather')
  t.same(JSON.parse(args), { city: 'sample' })
})
