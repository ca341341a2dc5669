/**
 * The OpenAI Agents SDK (@openai/agents, pinned in test/clients) against the router, on its default Responses
 * API: an agent with a function tool, run streamed to its final output (the tool called once, then the
 * answer), then a follow-up that continues with `previousResponseId` (the router keeps the conversation; the
 * provider is stateless). Against a Responses-native model and an OpenAI-chat-only one (translated), within a
 * bounded number of model requests. Tracing (an upload to the vendor) is off.
 */
import t from 'tap'
import { clientSdks, clientsInstalled, clientStack, MODELS, providerRequests } from './harness.js'

const MAX_REQUESTS = 6

for (const [which, model] of [['native Responses', MODELS.responses], ['translated to chat', MODELS.chat]] as const) {
  t.test(`agents sdk against a ${which} model: a function tool, streamed, then previousResponseId`, async (t) => {
    if (!clientsInstalled(t, ['@openai/agents', 'zod'])) return
    const stack = await clientStack(t)
    const { agents, z } = await clientSdks()
    const calls: string[] = []
    const getWeather = agents.tool({
      name: 'get_weather',
      description: 'The weather in a city.',
      parameters: z.object({ city: z.string() }),
      execute: async ({ city }: { city: string }) => {
        calls.push(city)
        return `sunny in ${city}`
      },
    })
    const agent = new agents.Agent({ name: 'weather', instructions: 'Answer about the weather.', model, tools: [getWeather] })
    const modelProvider = new agents.OpenAIProvider({ apiKey: stack.key, baseURL: `${stack.url}/v1`, useResponses: true })
    const runner = new agents.Runner({ modelProvider, tracingDisabled: true })

    const streamed = await runner.run(agent, 'What is the weather in Paris?', { stream: true, maxTurns: 4 })
    let text = ''
    for await (const event of streamed.toTextStream()) text += event
    await streamed.completed
    t.same(calls, ['sample'], 'the tool ran once, with the arguments the model gave')
    t.match(streamed.finalOutput, /quick brown fox/, 'the final output is the answer after the tool result')
    t.equal(text, streamed.finalOutput, 'streamed as it was finally given')
    t.match(streamed.lastResponseId, /^resp_/)

    const followUp = await runner.run(agent, 'And tomorrow?', { previousResponseId: streamed.lastResponseId, maxTurns: 4 })
    t.match(followUp.finalOutput, /quick brown fox/, 'the follow-up is answered')
    const requests = providerRequests(stack)
    t.ok(requests >= 3 && requests <= MAX_REQUESTS, `${requests} model requests (3 to ${MAX_REQUESTS})`)
  })
}
