/**
 * The Vercel AI SDK's default OpenAI provider (`ai` 5, `@ai-sdk/openai` 2: `openai(model)` calls
 * POST /v1/responses) through the router, to a native Responses provider and to a chat-only one: text, a
 * stream, and tools over two steps (the second step sends the first one's items back as item_reference,
 * since the SDK stores by default, and with `store: false` as whole items).
 */
import { createOpenAI } from '@ai-sdk/openai'
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai'
import t from 'tap'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-resp'
const N = addr('a')
const O = addr('b')

function stackOf(t: Parameters<typeof startStack>[0], which: 'native' | 'openai'): Promise<Stack> {
  const formats = which === 'native' ? ['openai', 'responses'] : ['openai']
  return startStack(t, [{ address: which === 'native' ? N : O, models: [{ id: MODEL, formats }] }])
}

/** The provider, and the bodies it sent (to see what the SDK asks of the router). */
function provider(stack: Stack, sent: any[] = []) {
  const capture: typeof fetch = (input, init) => {
    if (typeof init?.body === 'string') sent.push(JSON.parse(init.body))
    return fetch(input, init)
  }
  return createOpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, fetch: capture })
}

const weather = tool({
  description: 'Weather of a city',
  inputSchema: jsonSchema<{ city: string }>({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false }),
  execute: async ({ city }) => ({ city, forecast: 'sunny' }),
})

for (const which of ['native', 'openai'] as const) {
  const address = which === 'native' ? N : O

  t.test(`ai sdk openai(model) generateText against a ${which} provider`, async (t) => {
    const stack = await stackOf(t, which)
    const result = await generateText({ model: provider(stack)(MODEL), prompt: 'hello there', system: 'be brief', maxRetries: 0 })
    t.match(result.text, /^ The quick brown fox/)
    t.equal(result.finishReason, 'stop')
    t.equal(result.usage.outputTokens, 16)
    t.ok((result.usage.inputTokens ?? 0) > 0)
    const meta = result.providerMetadata?.openai as Record<string, unknown>
    t.match(meta.responseId, /^resp_/)
    t.equal(stack.sims.get(address)!.stats.lastPath, which === 'native' ? '/v1/responses' : '/v1/chat/completions')
    const body = result.response.body as any
    t.equal(body.x_svc_trace.provider, address, 'the trace rides along in the response body')
  })

  t.test(`ai sdk streamText against a ${which} provider`, async (t) => {
    const stack = await stackOf(t, which)
    const result = streamText({ model: provider(stack)(MODEL), prompt: 'hello there', maxRetries: 0 })
    let text = ''
    for await (const delta of result.textStream) text += delta
    t.match(text, /^ The quick brown fox/)
    t.equal(await result.finishReason, 'stop')
    t.equal((await result.usage).outputTokens, 16)
  })

  for (const store of [true, false]) {
    t.test(`ai sdk tools over two steps against a ${which} provider (store ${store})`, async (t) => {
      const stack = await stackOf(t, which)
      const asked: any[] = []
      const result = await generateText({
        model: provider(stack, asked)(MODEL),
        prompt: 'weather in Paris?',
        tools: { get_weather: weather },
        stopWhen: stepCountIs(2),
        providerOptions: { openai: { store } },
        maxRetries: 0,
      })
      t.equal(result.steps.length, 2)
      const references = asked[1].input.filter((i: any) => i.type === 'item_reference')
      if (store) t.ok(references.length > 0, 'the SDK sent the first step back as item_reference')
      else t.equal(references.length, 0)
      const first = result.steps[0]!
      t.equal(first.finishReason, 'tool-calls')
      t.equal(first.toolCalls[0]!.toolName, 'get_weather')
      t.same(first.toolResults[0]!.output, { city: 'sample', forecast: 'sunny' })
      const sent = stack.sims.get(address)!.stats.lastBody
      if (which === 'openai') {
        t.equal(sent.messages.at(-2).role, 'assistant')
        t.equal(sent.messages.at(-2).tool_calls[0].id, first.toolCalls[0]!.toolCallId)
        t.same(sent.messages.at(-1), { role: 'tool', tool_call_id: first.toolCalls[0]!.toolCallId, content: JSON.stringify({ city: 'sample', forecast: 'sunny' }) })
      } else {
        const types = sent.input.map((i: any) => i.type ?? 'message')
        t.same(types.slice(-2), ['function_call', 'function_call_output'], 'references resolved: the provider gets whole items')
        t.equal(sent.input.at(-2).call_id, first.toolCalls[0]!.toolCallId)
        t.notOk(JSON.stringify(sent.input).includes('item_reference'))
      }
      t.ok(result.steps[1]!.finishReason === 'stop' || result.steps[1]!.finishReason === 'tool-calls')
    })
  }
}

t.test('ai sdk streamText with tools over two steps against a native and a translated provider', async (t) => {
  for (const which of ['native', 'openai'] as const) {
    const stack = await stackOf(t, which)
    const result = streamText({ model: provider(stack)(MODEL), prompt: 'weather in Paris?', tools: { get_weather: weather }, stopWhen: stepCountIs(2), maxRetries: 0 })
    const parts: string[] = []
    for await (const part of result.fullStream) parts.push(part.type)
    t.ok(parts.includes('tool-call'), `${which}: a tool call streamed`)
    t.ok(parts.includes('tool-result'), `${which}: and its result`)
    t.notOk(parts.includes('error'), `${which}: no error part`)
    const steps = await result.steps
    t.equal(steps.length, 2)
    t.same(steps[0]!.toolCalls[0]!.input, { city: 'sample' })
  }
})

t.test('ai sdk streamText over a stream that breaks midway reports an error, never a clean finish', async (t) => {
  for (const which of ['native', 'openai'] as const) {
    const formats = which === 'native' ? ['openai', 'responses'] : ['openai']
    const stack = await startStack(t, [{ address: which === 'native' ? N : O, models: [{ id: MODEL, formats }], sim: { fault: 'reset-mid-stream' } }])
    const errors: unknown[] = []
    const result = streamText({ model: provider(stack)(MODEL), prompt: 'hello', maxRetries: 0, onError: ({ error }) => void errors.push(error) })
    const parts: string[] = []
    for await (const part of result.fullStream) parts.push(part.type)
    t.ok(parts.includes('text-delta'), `${which}: what was produced arrived`)
    t.ok(parts.includes('error'), `${which}: then an error part`)
    t.equal(errors.length, 1)
    t.not(await result.finishReason, 'stop', `${which}: not a clean finish`)
  }
})
