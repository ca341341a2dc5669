/**
 * /v1/responses takes what the Codex CLI 0.171 sends by default (issue 42): function tools grouped in a
 * `namespace`, a free-form `custom` tool, built-in tools (web_search, tool_search, local_shell), `include`,
 * `prompt_cache_key`, `client_metadata`, `text.verbosity`, `store: false`. A capturing provider shows what each
 * candidate gets: a Responses-native one the body as sent, a chat one the namespace flattened, the custom tool
 * as a function of one string, the built-ins left out (noted in the trace); the provider's calls come back to
 * the real openai client under the client's names, namespace included, custom calls as custom_tool_call, JSON
 * and streamed, and through an Anthropic-only provider too.
 */
import OpenAI from 'openai'
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-codex'
const N = addr('a') // native: formats [openai, responses]
const O = addr('b') // openai only
const C = addr('c') // anthropic only

interface Seen {
  path: string
  body: any
}

const FLAT = 'multi_agent_v1__spawn_agent'
const NAMESPACE = {
  type: 'namespace',
  name: 'multi_agent_v1',
  description: 'Tools for spawning and managing sub-agents.',
  tools: [
    { type: 'function', name: 'spawn_agent', description: 'Spawn a sub-agent.', strict: false, parameters: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'], additionalProperties: false } },
    { type: 'function', name: 'wait_agent', description: 'Wait for one.', strict: false, parameters: { type: 'object', properties: {} } },
  ],
}
const EXEC = { type: 'function', name: 'exec_command', description: 'Run a command.', strict: false, parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } }

/** The request Codex 0.171 sends (tools and members as captured; texts shortened). */
const CODEX = {
  model: MODEL,
  instructions: '',
  input: [
    { type: 'message', id: 'msg_dev', role: 'developer', content: [{ type: 'input_text', text: 'You are Codex.' }] },
    { type: 'message', id: 'msg_user', role: 'user', content: [{ type: 'input_text', text: 'say hi' }] },
  ],
  tools: [
    EXEC,
    NAMESPACE,
    { type: 'custom', name: 'apply_patch', description: 'Edit files.', format: { type: 'grammar', syntax: 'lark', definition: 'start: begin_patch hunk+ end_patch' } },
    { type: 'tool_search', execution: 'client', description: 'Find tools.', parameters: { type: 'object', properties: { query: { type: 'string' } } } },
    { type: 'web_search', external_web_access: false, search_content_types: ['text', 'image'] },
  ],
  tool_choice: 'auto',
  parallel_tool_calls: true,
  reasoning: { effort: 'medium', summary: 'auto' },
  store: false,
  stream: false,
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: '01a2-session',
  text: { verbosity: 'low' },
  client_metadata: { 'x-codex-installation-id': 'i1', turn_id: 't1' },
}

function chatCall(stream: boolean): string {
  const call = { id: 'call_1', type: 'function', function: { name: FLAT, arguments: '{"message":"look"}' } }
  if (!stream) {
    return JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 0,
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [call] }, finish_reason: 'tool_calls' }],
      usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 },
    })
  }
  const base = { id: 'chatcmpl-2', object: 'chat.completion.chunk', created: 0, model: MODEL }
  const chunks = [
    { ...base, choices: [{ index: 0, delta: { role: 'assistant', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: FLAT, arguments: '' } }] }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"message":"look"}' } }] }, finish_reason: 'tool_calls' }] },
    { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 } },
  ]
  return chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n'
}

const NATIVE_ANSWER = {
  id: 'resp_provider',
  object: 'response',
  created_at: 1,
  status: 'completed',
  model: MODEL,
  output: [{ id: 'fc_1', type: 'function_call', status: 'completed', call_id: 'call_n', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"message":"x"}' }],
  usage: { input_tokens: 9, output_tokens: 3, total_tokens: 12, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
}

const ANTHROPIC_ANSWER = {
  id: 'msg_1',
  type: 'message',
  role: 'assistant',
  model: MODEL,
  content: [{ type: 'tool_use', id: 'toolu_1', name: FLAT, input: { message: 'look' } }],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: { input_tokens: 9, output_tokens: 3 },
}

async function stackOf(t: Parameters<typeof startStack>[0], which: Array<'native' | 'openai' | 'anthropic'>, seen: Seen[], answer = chatCall): Promise<Stack> {
  const { url } = await fakeProvider(t, (req, res, raw) => {
    const body = JSON.parse(raw)
    seen.push({ path: req.url ?? '', body })
    if (req.url === '/v1/chat/completions') {
      res.writeHead(200, { 'content-type': body.stream === true ? 'text/event-stream' : 'application/json' })
      return res.end(answer(body.stream === true))
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(req.url === '/v1/messages' ? ANTHROPIC_ANSWER : NATIVE_ANSWER))
  })
  const params = ['tools', 'tool_choice', 'parallel_tool_calls', 'reasoning']
  const formats = { native: ['openai', 'responses'], openai: ['openai'], anthropic: ['anthropic'] }
  const address = { native: N, openai: O, anthropic: C }
  const price = { native: { prompt: 0.5, completion: 1 }, openai: { prompt: 0.1, completion: 0.2 }, anthropic: { prompt: 0.1, completion: 0.2 } }
  return startStack(
    t,
    which.map((w) => ({ address: address[w], url, models: [{ id: MODEL, formats: formats[w], supported_parameters: params, price: price[w] }] })),
  )
}

function client(stack: Stack): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0 })
}

async function post(stack: Stack, body: unknown, headers: Record<string, string> = {}) {
  const res = await request(stack.url + '/v1/responses', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth, ...headers },
    body: JSON.stringify(body),
  })
  return { status: res.statusCode, json: (await res.body.json()) as any }
}

t.test("Codex's request reaches a Responses-native provider as sent, its namespaced call relayed", async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, ['native'], seen)
  const res = await post(stack, CODEX)
  t.equal(res.status, 200, JSON.stringify(res.json))
  t.same(seen[0]!.body, CODEX, 'every member as sent, namespace and built-in tools included')
  t.equal(seen[0]!.path, '/v1/responses')
  t.match(res.json.output, [{ type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1' }])
  t.notOk(res.json.x_svc_trace.notes)
})

t.test('a chat provider gets the namespace flattened, the custom tool as a function, no built-in; the call comes back under its namespace', async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, ['openai'], seen)
  const openai = client(stack)
  const response = (await openai.responses.create(CODEX as any)) as any
  const chat = seen[0]!.body
  t.equal(seen[0]!.path, '/v1/chat/completions')
  t.same(
    chat.tools.map((x: any) => x.function.name),
    ['exec_command', FLAT, 'multi_agent_v1__wait_agent', 'apply_patch'],
  )
  t.equal(chat.tools[1].function.description, 'Spawn a sub-agent.')
  t.same(chat.tools[3].function.parameters.required, ['input'], 'the custom tool as a function of one string')
  t.equal(chat.tool_choice, 'auto')
  t.equal(chat.reasoning_effort, 'medium')
  t.same(
    chat.messages.map((m: any) => m.role),
    ['system', 'user'],
  )
  for (const member of ['include', 'prompt_cache_key', 'client_metadata', 'text', 'store']) t.equal(chat[member], undefined, member)
  t.match(response.output, [{ type: 'function_call', call_id: 'call_1', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"message":"look"}' }])
  t.same(response.x_svc_trace.notes, [
    'members with no chat equivalent were not sent: include, prompt_cache_key, client_metadata, text.verbosity',
    'tools with no chat equivalent were not sent: tool_search, web_search',
  ])

  // The next turn, as Codex sends it (store false, the whole history): the namespaced call is flattened again.
  const next = {
    ...CODEX,
    stream: true,
    input: [
      ...CODEX.input,
      { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'gAAA' },
      { type: 'function_call', call_id: 'call_1', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"message":"look"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'agent a1 started' },
      { type: 'custom_tool_call', call_id: 'call_0', name: 'apply_patch', input: '*** Begin Patch' },
      { type: 'custom_tool_call_output', call_id: 'call_0', output: 'done' },
    ],
  }
  const stream = await openai.responses.create(next as any)
  const added: any[] = []
  let completed: any
  for await (const event of stream as any) {
    if (event.type === 'response.output_item.added') added.push(event.item)
    if (event.type === 'response.completed') completed = event.response
  }
  const second = seen[1]!.body
  t.same(second.messages[2], { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: FLAT, arguments: '{"message":"look"}' } }] })
  t.same(second.messages[3], { role: 'tool', tool_call_id: 'call_1', content: 'agent a1 started' })
  t.same(second.messages[4], { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'apply_patch', arguments: '{"input":"*** Begin Patch"}' } }] })
  t.same(second.messages[5], { role: 'tool', tool_call_id: 'call_0', content: 'done' })
  t.match(added, [{ type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1' }])
  t.match(completed.output, [{ type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"message":"look"}' }])
  t.match(completed.x_svc_trace.notes, [/include/, /tool_search, web_search/])
})

t.test('through an Anthropic-only provider the flattened name comes back under its namespace too', async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, ['anthropic'], seen)
  const res = await post(stack, CODEX)
  t.equal(res.status, 200, JSON.stringify(res.json))
  t.equal(seen[0]!.path, '/v1/messages')
  t.same(
    seen[0]!.body.tools.map((x: any) => x.name),
    ['exec_command', FLAT, 'multi_agent_v1__wait_agent', 'apply_patch'],
  )
  t.match(res.json.output, [{ type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"message":"look"}' }])
  t.match(res.json.x_svc_trace.notes, [/include/, /web_search/])
})

t.test('a forced built-in tool: refused by a chat candidate, served by a native one', async (t) => {
  const forced = { ...CODEX, tool_choice: { type: 'web_search' } }
  const seen: Seen[] = []
  const only = await stackOf(t, ['openai'], seen)
  const refused = await post(only, forced)
  t.equal(refused.status, 400)
  t.equal(refused.json.error.code, 'invalid_request')
  t.match(refused.json.error.message, /built-in tool "web_search"/)
  t.equal(seen.length, 0)

  const seenBoth: Seen[] = []
  const both = await stackOf(t, ['native', 'openai'], seenBoth)
  const served = await post(both, forced, { 'x-svc-provider-sort': 'price' })
  t.equal(served.status, 200)
  t.equal(served.json.x_svc_trace.provider, N)
  t.same(
    served.json.x_svc_trace.attempts.map((a: any) => [a.provider, a.status, a.error]),
    [
      [O, null, 'invalid_request'],
      [N, 200, undefined],
    ],
  )
  t.same(seenBoth.map((s) => s.path), ['/v1/responses'])
})

/** A streamed answer with two calls whose chunks interleave: the custom apply_patch and a namespaced function. */
function patchAndWait(): string {
  const base = { id: 'chatcmpl-3', object: 'chat.completion.chunk', created: 0, model: MODEL }
  const call = (index: number, fn: object, id?: string) => ({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index, ...(id === undefined ? {} : { id, type: 'function' }), function: fn }] }, finish_reason: null }] })
  const chunks = [
    call(0, { name: 'apply_patch', arguments: '{"input":"*** Begin' }, 'call_p'),
    call(1, { name: 'multi_agent_v1__wait_agent', arguments: '{}' }, 'call_w'),
    call(0, { arguments: ' Patch\\n*** End Patch\\n"}' }),
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
    { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 } },
  ]
  return chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n'
}

t.test("a streamed custom tool call comes back as custom_tool_call with its input events, beside a namespaced call", async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, ['openai'], seen, patchAndWait)
  const stream = await client(stack).responses.create({ ...CODEX, stream: true } as any)
  const events: any[] = []
  for await (const event of stream as any) events.push(event)
  const types = events.map((e) => e.type).filter((type) => type !== 'response.created' && type !== 'response.in_progress')
  t.same(types, [
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
  const patch = '*** Begin Patch\n*** End Patch\n'
  t.match(events.find((e) => e.type === 'response.output_item.added').item, { type: 'custom_tool_call', status: 'in_progress', call_id: 'call_p', name: 'apply_patch', input: '' })
  t.equal(events.find((e) => e.type === 'response.custom_tool_call_input.done').input, patch)
  const completed = events.at(-1).response
  t.match(completed.output, [
    { type: 'custom_tool_call', status: 'completed', call_id: 'call_p', name: 'apply_patch', input: patch },
    { type: 'function_call', call_id: 'call_w', name: 'wait_agent', namespace: 'multi_agent_v1', arguments: '{}' },
  ])
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i))
})

t.test("a provider that streams a call's id before its name: the real client still gets a custom_tool_call", async (t) => {
  const base = { id: 'chatcmpl-4', object: 'chat.completion.chunk', created: 0, model: MODEL }
  const delta = (d: object, finish: string | null = null) => ({ ...base, choices: [{ index: 0, delta: d, finish_reason: finish }] })
  const lateName = (): string =>
    [
      delta({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_l', type: 'function', function: { arguments: '' } }] }),
      delta({ tool_calls: [{ index: 0, function: { name: 'apply_patch', arguments: '{"input":"*** Begin Patch\\n' } }] }),
      delta({ tool_calls: [{ index: 0, function: { arguments: '*** End Patch\\n"}' } }] }),
      delta({}, 'tool_calls'),
      { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 } },
    ]
      .map((c) => `data: ${JSON.stringify(c)}\n\n`)
      .join('') + 'data: [DONE]\n\n'
  const stack = await stackOf(t, ['openai'], [], lateName)
  const stream = await client(stack).responses.create({ ...CODEX, stream: true } as any)
  const events: any[] = []
  for await (const event of stream as any) events.push(event)
  t.match(events.find((e) => e.type === 'response.output_item.added').item, { type: 'custom_tool_call', call_id: 'call_l', name: 'apply_patch' })
  t.equal(events.find((e) => e.type === 'response.custom_tool_call_input.done').input, '*** Begin Patch\n*** End Patch\n')
  t.match(events.at(-1).response.output, [{ type: 'custom_tool_call', status: 'completed', call_id: 'call_l', name: 'apply_patch', input: '*** Begin Patch\n*** End Patch\n' }])
})
