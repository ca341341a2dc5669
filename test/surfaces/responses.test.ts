/**
 * POST /v1/responses through the real router to real simulated providers, with the real `openai` client: a
 * native Responses provider (relayed, our id in place of the provider's) and an openai-only one (translated
 * both ways), streams event by event, a function-tool round trip with previous_response_id and with the whole
 * history, stored state (GET, DELETE, owner-only), failover across formats, billing by hand.
 */
import OpenAI from 'openai'
import t from 'tap'
import { request } from 'undici'
import { parseUsd } from '../../src/billing/money.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-resp'
const N = addr('a') // native: formats [openai, responses]
const O = addr('b') // openai only
const PRICE_N = { prompt: 0.1, completion: 0.2 }
const PRICE_O = { prompt: 0.5, completion: 1.5 }

function stackOf(t: Parameters<typeof startStack>[0], which: 'native' | 'openai' | 'both', simN = {}, simO = {}): Promise<Stack> {
  const providers = []
  if (which !== 'openai') providers.push({ address: N, models: [{ id: MODEL, formats: ['openai', 'responses'], price: PRICE_N }], sim: simN })
  if (which !== 'native') providers.push({ address: O, models: [{ id: MODEL, formats: ['openai'], price: PRICE_O }], sim: simO })
  return startStack(t, providers)
}

function client(stack: Stack, key = stack.key): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: key, maxRetries: 0 })
}

async function post(stack: Stack, body: object, headers: Record<string, string> = stack.auth) {
  const res = await request(stack.url + '/v1/responses', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  })
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() }
}

/** The SSE events of a stream body, names and parsed data. */
function events(text: string): { event: string; data: any }[] {
  return text
    .split('\n\n')
    .filter((e) => e.trim() !== '')
    .map((e) => {
      const name = /^event: (.*)$/m.exec(e)?.[1] ?? ''
      const data = /^data: (.*)$/m.exec(e)?.[1]
      return { event: name, data: data === undefined ? undefined : JSON.parse(data) }
    })
}

/** The cost of `usage` at `price` (USD per 1M tokens), as the exact decimal the trace shows. */
function costOf(price: { prompt: number; completion: number }, input: number, output: number): bigint {
  return (BigInt(input) * parseUsd(String(price.prompt))! + BigInt(output) * parseUsd(String(price.completion))!) / 1_000_000n
}

const WEATHER = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}

for (const which of ['native', 'openai'] as const) {
  const path = which === 'native' ? '/v1/responses' : '/v1/chat/completions'
  const address = which === 'native' ? N : O
  const price = which === 'native' ? PRICE_N : PRICE_O

  t.test(`client responses.create against a ${which} provider: text, usage, trace, billing, SVC-Res-Key`, async (t) => {
    const stack = await stackOf(t, which)
    const { data: resp, response } = await client(stack).responses.create({ model: MODEL, input: 'hello there', instructions: 'be brief' }).withResponse()
    t.match(resp.id, /^resp_[0-9a-f]{48}$/)
    t.equal(resp.object, 'response')
    t.equal(resp.status, 'completed')
    t.equal(resp.model, MODEL)
    t.match(resp.output_text, /^ The quick brown fox/)
    t.equal(resp.output.length, 1)
    const item = resp.output[0] as OpenAI.Responses.ResponseOutputMessage
    t.equal(item.type, 'message')
    t.equal(item.role, 'assistant')
    t.equal(item.content[0]!.type, 'output_text')
    t.equal(resp.usage!.output_tokens, 16)
    t.ok(resp.usage!.input_tokens > 0)
    t.equal(resp.usage!.total_tokens, resp.usage!.input_tokens + resp.usage!.output_tokens)
    t.equal(resp.usage!.input_tokens_details.cached_tokens, 0)
    t.equal(resp.usage!.output_tokens_details.reasoning_tokens, 0)
    if (which === 'openai') t.equal(resp.instructions, 'be brief')
    t.equal((resp as any).store, true)
    const trace = (resp as any).x_svc_trace
    t.equal(trace.provider, address)
    t.equal(trace.usage.prompt_tokens, resp.usage!.input_tokens)
    t.equal(trace.usage.completion_tokens, 16)
    const cost = costOf(price, resp.usage!.input_tokens, 16)
    t.equal(parseUsd(trace.billing.total_cost), cost, 'billed exactly tokens × price')
    const key = response.headers.get('svc-res-key')!
    t.ok(key.length > 0)
    t.not(key, resp.id, 'SVC-Res-Key is the provider\'s id, the body id the router\'s')
    t.match(key, which === 'native' ? /^resp_/ : /^chatcmpl-/)
    t.ok(response.headers.get('x-ratelimit-limit-requests'))
    t.ok(response.headers.get('x-request-id'))
    const sim = stack.sims.get(address)!
    t.equal(sim.stats.lastPath, path)
    if (which === 'native') {
      t.equal(sim.stats.lastBody.store, false, 'the provider keeps nothing: the router does')
      t.same(sim.stats.lastBody.input, [{ type: 'message', role: 'user', content: 'hello there' }])
      t.equal(sim.stats.lastBody.instructions, 'be brief')
    } else {
      t.same(sim.stats.lastBody.messages, [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello there' },
      ])
    }
    const fetched = await client(stack).responses.retrieve(resp.id)
    t.equal(fetched.id, resp.id)
    t.equal(fetched.output_text, resp.output_text)
  })

  t.test(`client streaming against a ${which} provider: the event sequence, numbered, trace in response.completed`, async (t) => {
    const stack = await stackOf(t, which)
    const stream = await client(stack).responses.create({ model: MODEL, input: 'hello there', stream: true })
    const seen: any[] = []
    for await (const ev of stream) seen.push(ev)
    const types = seen.map((e) => e.type)
    t.same(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'])
    t.same(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed'])
    t.equal(types.filter((x) => x === 'response.output_text.delta').length, 16)
    t.same(seen.map((e) => e.sequence_number), seen.map((_, i) => i), 'sequence numbers count from 0, one per event')
    const created = seen[0].response
    const done = seen.at(-1).response
    t.equal(created.id, done.id, 'one id from created to completed')
    t.match(done.id, /^resp_[0-9a-f]{48}$/)
    t.equal(created.status, 'in_progress')
    t.equal(done.status, 'completed')
    const deltas = seen.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('')
    t.equal(seen.find((e) => e.type === 'response.output_text.done').text, deltas)
    t.equal(done.output[0].content[0].text, deltas)
    t.equal(done.usage.output_tokens, 16)
    t.equal(done.x_svc_trace.provider, address)
    t.equal(parseUsd(done.x_svc_trace.billing.total_cost), costOf(price, done.usage.input_tokens, 16))
    // item ids agree event by event
    const itemId = seen[2].item.id
    t.ok(seen.filter((e) => 'item_id' in e).every((e) => e.item_id === itemId))
    t.equal(seen.at(-2).item.id, itemId)

    const raw = await post(stack, { model: MODEL, input: 'hi', stream: true })
    t.equal(raw.status, 200)
    t.match(raw.headers['content-type'], /text\/event-stream/)
    t.match(raw.headers['svc-res-key'], which === 'native' ? /^resp_/ : /^chatcmpl-/, "the provider's id, on a stream too")
    const evs = events(raw.text)
    t.equal(evs.at(-1)!.event, 'response.completed')
    t.ok(evs.every((e) => e.event === e.data.type), 'every event line names its data\'s type')
    t.ok(raw.text.endsWith('\n\n'))
  })

  t.test(`function tool round trip against a ${which} provider: previous_response_id, then the whole history`, async (t) => {
    const stack = await stackOf(t, which)
    const openai = client(stack)
    const first = await openai.responses.create({ model: MODEL, input: 'weather in Paris?', tools: [WEATHER], tool_choice: 'required' })
    const call = first.output.find((i) => i.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall
    t.ok(call, 'a function_call item')
    t.equal(call.name, 'get_weather')
    t.same(JSON.parse(call.arguments), { city: 'sample' })
    t.ok(call.call_id.length > 0)
    t.match(call.id!, /^fc_/)
    const output = { type: 'function_call_output' as const, call_id: call.call_id, output: 'sunny, 21 C' }

    // 1. By previous_response_id: the router sends the stored history.
    const second = await openai.responses.create({ model: MODEL, previous_response_id: first.id, input: [output], tools: [WEATHER] })
    t.equal(second.status, 'completed')
    t.equal(second.previous_response_id, first.id)
    const sent = stack.sims.get(address)!.stats.lastBody
    if (which === 'openai') {
      t.same(sent.messages, [
        { role: 'user', content: 'weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: call.arguments } }] },
        { role: 'tool', tool_call_id: call.call_id, content: 'sunny, 21 C' },
      ])
      t.equal(second.output[0]!.type, 'message', 'the chat simulator answers a tool result in text')
    } else {
      t.equal(sent.previous_response_id, undefined, 'the provider never sees our ids')
      t.same(sent.input.map((i: any) => i.type ?? 'message'), ['message', 'function_call', 'function_call_output'])
      t.equal(sent.input[1].call_id, call.call_id)
      t.equal(second.output[0]!.type, 'message', 'the native simulator answers a function output in text')
    }

    // 2. With the whole history and store: false: nothing is kept.
    const third = await openai.responses.create({
      model: MODEL,
      store: false,
      tools: [WEATHER],
      input: [{ role: 'user', content: 'weather in Paris?' }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, output],
    })
    t.equal((third as any).store, false)
    const whole = stack.sims.get(address)!.stats.lastBody
    if (which === 'openai') t.same(whole.messages, sent.messages, 'the same chat messages as by previous_response_id')
    else t.same(whole.input.map((i: any) => [i.type ?? 'message', i.call_id]), sent.input.map((i: any) => [i.type ?? 'message', i.call_id]))
    t.equal((await openai.responses.retrieve(third.id).catch((e) => e)).status, 404, 'store: false keeps nothing')
    const gone = await openai.responses.create({ model: MODEL, previous_response_id: third.id, input: 'and?' }).catch((e) => e)
    t.equal(gone.status, 404)
    t.equal(gone.code, 'response_not_found')

    // Streamed tool call: arguments as deltas, the item whole at the end.
    const stream = await openai.responses.create({ model: MODEL, input: 'weather?', tools: [WEATHER], tool_choice: { type: 'function', name: 'get_weather' }, stream: true })
    const seen: any[] = []
    for await (const ev of stream) seen.push(ev)
    const deltas = seen.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('')
    t.same(JSON.parse(deltas), { city: 'sample' })
    t.equal(seen.find((e) => e.type === 'response.function_call_arguments.done').arguments, deltas)
    const done = seen.at(-1)
    t.equal(done.type, 'response.completed')
    t.equal(done.response.output[0].type, 'function_call')
    t.equal(done.response.output[0].arguments, deltas)
  })
}

t.test('stored responses: owner-only GET and DELETE, 404 response_not_found otherwise', async (t) => {
  const stack = await stackOf(t, 'openai')
  const openai = client(stack)
  const resp = await openai.responses.create({ model: MODEL, input: 'remember me' })
  const other = await stack.newApiKey({ account: await stack.newAccount() })
  const sameAccount = await stack.newApiKey()
  t.equal((await client(stack, sameAccount.key).responses.retrieve(resp.id)).id, resp.id, 'another key of the account reads it')
  for (const attempt of [
    () => client(stack, other.key).responses.retrieve(resp.id),
    () => client(stack, other.key).responses.delete(resp.id),
    () => client(stack, other.key).responses.create({ model: MODEL, previous_response_id: resp.id, input: 'x' }),
    () => openai.responses.retrieve('resp_' + '0'.repeat(48)),
  ]) {
    const err = await attempt().catch((e) => e)
    t.equal(err.status, 404)
    t.equal(err.code, 'response_not_found')
    t.equal(err.type, 'not_found_error')
  }
  const raw = await request(stack.url + '/v1/responses/' + resp.id, { headers: stack.auth })
  const body = await raw.body.json() as any
  t.equal(raw.statusCode, 200)
  t.equal(body.x_svc_trace.provider, O, 'GET answers the response as it was sent, trace included')
  t.ok(raw.headers['x-ratelimit-limit-requests'])
  const del = await request(stack.url + '/v1/responses/' + resp.id, { method: 'DELETE', headers: stack.auth })
  t.same(await del.body.json(), { id: resp.id, object: 'response.deleted', deleted: true })
  t.equal((await openai.responses.retrieve(resp.id).catch((e) => e)).status, 404, 'gone once deleted')
  t.equal((await openai.responses.delete(resp.id).catch((e) => e)).status, 404, 'deleted once')
  const mk = await request(stack.url + '/v1/responses/' + resp.id, { headers: stack.mgmtAuth })
  t.equal(mk.statusCode, 403, 'an mk- key cannot read inference state')
  await mk.body.dump()
  const none = await request(stack.url + '/v1/responses/' + resp.id)
  t.equal(none.statusCode, 401)
  await none.body.dump()
})

t.test('billing by hand: each answer, native or translated, JSON or stream, is charged once at its own prices', async (t) => {
  const stack = await stackOf(t, 'both')
  const account = await stack.newAccount('5')
  const key = await stack.newApiKey({ account })
  const expected = new Map<string, bigint>()
  for (const [pin, price] of [[N, PRICE_N], [O, PRICE_O]] as const) {
    for (const stream of [false, true]) {
      const res = await post(stack, { model: MODEL, input: 'count me', stream }, { ...key.auth, 'x-svc-provider-address': pin })
      t.equal(res.status, 200)
      const response = stream ? events(res.text).at(-1)!.data.response : JSON.parse(res.text)
      const usage = response.usage
      t.equal(response.x_svc_trace.provider, pin)
      t.equal(usage.output_tokens, 16)
      const cost = costOf(price, usage.input_tokens, usage.output_tokens)
      t.equal(parseUsd(response.x_svc_trace.billing.total_cost), cost, `${pin.slice(0, 4)} stream=${stream}: the trace's cost`)
      expected.set(res.headers['x-request-id'] as string, cost)
    }
  }
  const charges = (await stack.router.store.ledger.journal(account)).filter((e) => e.kind === 'charge')
  t.equal(charges.length, 4, 'one charge per answer')
  for (const c of charges) t.equal(c.amount, expected.get(c.requestId!), `charge of ${c.requestId}`)
  const totals = await stack.router.store.ledger.totals(account)
  t.equal(totals.spent, [...expected.values()].reduce((a, b) => a + b, 0n))
})

t.test("the client's responses.stream() helper assembles the same response from either path", async (t) => {
  for (const which of ['native', 'openai'] as const) {
    const stack = await stackOf(t, which)
    const openai = client(stack)
    let text = ''
    const stream = openai.responses.stream({ model: MODEL, input: 'hello there' })
    stream.on('response.output_text.delta', (e) => (text += e.delta))
    const final = await stream.finalResponse()
    t.equal(final.status, 'completed')
    t.equal(final.output_text, text, `${which}: the deltas make the final text`)
    t.match(text, /^ The quick brown fox/)
    const tools = await openai.responses.stream({ model: MODEL, input: 'weather?', tools: [WEATHER], tool_choice: 'required' }).finalResponse()
    const call = tools.output.find((i) => i.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall
    t.same(JSON.parse(call.arguments), { city: 'sample' }, `${which}: a streamed function call`)
  }
})

t.test('one stored response continued twice at once: two branches, each with the same history', async (t) => {
  const stack = await stackOf(t, 'both')
  const openai = client(stack)
  const root = await openai.responses.create({ model: MODEL, input: 'root', provider: { address: N } } as any)
  t.equal((root as any).x_svc_trace.provider, N, 'the body provider object pins, as on chat')
  t.notOk('provider' in stack.sims.get(N)!.stats.lastBody, 'and is not sent on')
  const [a, b] = await Promise.all([
    openai.responses.create({ model: MODEL, previous_response_id: root.id, input: 'branch a', store: true }),
    openai.responses.create({ model: MODEL, previous_response_id: root.id, input: 'branch b', store: true }),
  ])
  t.not(a.id, b.id)
  for (const branch of [a, b]) {
    t.equal(branch.previous_response_id, root.id)
    t.equal((await openai.responses.retrieve(branch.id)).id, branch.id)
  }
  const deeper = await openai.responses.create({ model: MODEL, previous_response_id: a.id, input: 'deeper', provider: { address: O } } as any)
  const sent = stack.sims.get(O)!.stats.lastBody.messages.map((m: any) => m.content)
  t.same([sent[0], sent[2], sent[4]], ['root', 'branch a', 'deeper'], 'a branch carries its own history only')
  t.equal(sent.length, 5)
  t.equal(deeper.previous_response_id, a.id)
})
