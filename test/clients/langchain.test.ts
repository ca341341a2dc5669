/**
 * LangChain's ChatOpenAI (@langchain/openai, pinned in test/clients) against the router: a `bindTools` round
 * trip (a tool call, its result sent back, a text answer), `withStructuredOutput` with json_schema (the value
 * the schema asks for, parsed and validated by LangChain), with function calling and with json_mode (parsed), and the same chat and
 * tools over the Responses API (`useResponsesApi: true`). Against a model whose provider speaks both formats
 * natively, an OpenAI-chat-only one (the Responses API translated) and an Anthropic-native one (both
 * translated).
 */
import t from 'tap'
import { clientSdks, clientsInstalled, clientStack, MODELS } from './harness.js'

const PACKAGES = ['@langchain/openai', '@langchain/core', 'zod']

const TARGETS = [
  ['native', MODELS.responses],
  ['chat-only (Responses translated)', MODELS.chat],
  ['Anthropic-native (both translated)', MODELS.anthropic],
] as const

for (const [which, model] of TARGETS) {
  t.test(`langchain against a ${which} model: bindTools, withStructuredOutput, useResponsesApi`, async (t) => {
    if (!clientsInstalled(t, PACKAGES)) return
    const stack = await clientStack(t)
    const { langchain, messages, z } = await clientSdks()
    const chat = (extra: object = {}) => new langchain.ChatOpenAI({ model, apiKey: stack.key, configuration: { baseURL: `${stack.url}/v1` }, maxRetries: 0, ...extra })
    const weather = { type: 'function', function: { name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }

    for (const [api, extra] of [['chat completions', {}], ['responses', { useResponsesApi: true }]] as const) {
      const withTools = chat(extra).bindTools([weather])
      const question = new messages.HumanMessage('What is the weather in Paris?')
      const call = await withTools.invoke([question])
      t.equal(call.tool_calls?.length, 1, `${api}: one tool call`)
      t.same(call.tool_calls?.[0]?.args, { city: 'sample' }, `${api}: its arguments parsed`)
      const result = new messages.ToolMessage({ tool_call_id: call.tool_calls[0].id, content: 'sunny' })
      const answer = await withTools.invoke([question, call, result])
      t.same(answer.tool_calls, [], `${api}: after the result, no call`)
      t.match(answer.text, /quick brown fox/, `${api}: a text answer`)
    }

    const Film = z.object({ title: z.string(), year: z.number().int(), genre: z.enum(['drama', 'comedy']), cast: z.array(z.object({ name: z.string() })), sequel: z.string().nullable() })
    const film = await chat().withStructuredOutput(Film, { method: 'jsonSchema', name: 'film' }).invoke('Name a film.')
    t.same(film, { title: 'sample', year: 1, genre: 'drama', cast: [{ name: 'sample' }], sequel: 'sample' }, 'json_schema: the schema value, parsed')
    const viaResponses = await chat({ useResponsesApi: true }).withStructuredOutput(Film, { method: 'jsonSchema', name: 'film' }).invoke('Name a film.')
    t.same(viaResponses, film, 'json_schema over the Responses API')
    const called = await chat().withStructuredOutput(Film, { method: 'functionCalling', name: 'film' }).invoke('Name a film.')
    t.same(called, film, 'function calling: the forced tool call, its arguments parsed')
    // JSON mode carries no schema: the simulated model answers {"answer": text} (README), which this schema reads.
    // Anthropic has no JSON mode (its format always carries a schema): there the prompt alone asks for JSON,
    // which a simulated model does not read.
    if (model === MODELS.anthropic) return
    const loose = await chat().withStructuredOutput(z.object({ answer: z.string() }), { method: 'jsonMode' }).invoke('Answer in JSON.')
    t.match(loose.answer, /quick brown fox/, 'json_mode: JSON, parsed')
  })
}
