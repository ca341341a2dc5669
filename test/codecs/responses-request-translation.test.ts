/**
 * A Responses request as a chat request, and as the body a native provider gets (pure functions).
 */
import t from 'tap'
import { outputItems } from '../../src/codecs/responses-json-translation.js'
import { chatMessages, toChatCompletions, toNativeResponses } from '../../src/codecs/responses-request-translation.js'

const CALL = { type: 'function_call', id: 'fc_1', call_id: 'c1', name: 'f', arguments: '{"a":1}' }

t.test('items as chat messages: one assistant turn per run of text and calls, outputs as tool messages', async (t) => {
  t.same(
    chatMessages('rules', [
      { role: 'developer', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] },
      { type: 'message', role: 'user', content: 'hi' },
      { type: 'reasoning', id: 'rs_1', summary: [] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'let me see' }] },
      CALL,
      { ...CALL, call_id: 'c2', name: 'g' },
      { type: 'function_call_output', call_id: 'c1', output: 'one' },
      { type: 'function_call_output', call_id: 'c2', output: [{ type: 'input_text', text: 'two' }] },
      CALL,
    ]),
    [
      { role: 'system', content: 'rules' },
      { role: 'system', content: 'a\nb' },
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: 'let me see',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
          { id: 'c2', type: 'function', function: { name: 'g', arguments: '{"a":1}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'one' },
      { role: 'tool', tool_call_id: 'c2', content: 'two' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
    ],
  )
  t.same(chatMessages(undefined, [{ role: 'user', content: [{ type: 'input_file', file_data: 'data:application/pdf;base64,AA', filename: 'a.pdf' }] }]), [
    { role: 'user', content: [{ type: 'file', file: { file_data: 'data:application/pdf;base64,AA', filename: 'a.pdf' } }] },
  ])
})

t.test('the chat body: fields mapped, streams ask for usage, tools without parameters get an empty schema', async (t) => {
  const body = toChatCompletions({ model: 'm', stream: true, max_output_tokens: 9, top_p: 0.5, tools: [{ type: 'function', name: 'f' }], tool_choice: 'required', store: true, metadata: { a: 'b' } }, [
    { role: 'user', content: 'x' },
  ]).chat
  t.same(body, {
    model: 'm',
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 9,
    stream: true,
    stream_options: { include_usage: true },
    top_p: 0.5,
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
    tool_choice: 'required',
  })
})

t.test('the native body: resolved input, store false, no router members, reasoning only with its encrypted content', async (t) => {
  const body = JSON.parse(
    toNativeResponses({ model: 'm', input: [{ type: 'item_reference', id: 'fc_1' }], previous_response_id: 'resp_1', store: true, provider: { sort: 'price' }, temperature: 0.1 }, [
      { role: 'user', content: 'x' },
      { type: 'reasoning', id: 'rs_1', summary: [] },
      { type: 'reasoning', id: 'rs_2', summary: [], encrypted_content: 'gAAA' },
      CALL,
    ]).toString(),
  )
  t.same(body, {
    model: 'm',
    temperature: 0.1,
    input: [{ role: 'user', content: 'x' }, { type: 'reasoning', id: 'rs_2', summary: [], encrypted_content: 'gAAA' }, CALL],
    store: false,
  })
})

const NAMESPACE = {
  type: 'namespace',
  name: 'multi_agent_v1',
  description: 'Sub-agents',
  tools: [
    { type: 'function', name: 'spawn_agent', description: 'Spawn one', strict: false, parameters: { type: 'object', properties: { task: { type: 'string' } } } },
    { type: 'custom', name: 'sketch', format: { type: 'text' } },
  ],
}
const CODEX_TOOLS = [
  { type: 'function', name: 'exec_command', parameters: { type: 'object', properties: {} } },
  NAMESPACE,
  { type: 'custom', name: 'apply_patch', format: { type: 'grammar', syntax: 'lark', definition: 'start: x' } },
  { type: 'web_search', external_web_access: false },
  { type: 'local_shell' },
]

t.test("Codex's tools: namespace functions flattened, custom tools as one-string functions, built-ins left out with a note", async (t) => {
  const chat = toChatCompletions({ model: 'm', tools: CODEX_TOOLS, tool_choice: 'auto' }, [
    { type: 'message', role: 'user', content: 'x' },
    { type: 'function_call', call_id: 'c1', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{}' },
    { type: 'function_call_output', call_id: 'c1', output: 'ok' },
    { type: 'custom_tool_call', call_id: 'c2', name: 'apply_patch', input: '*** Begin Patch' },
    { type: 'custom_tool_call_output', call_id: 'c2', output: 'patched' },
    { type: 'web_search_call', id: 'ws_1', status: 'completed' },
  ])
  const body = chat.chat
  t.same(
    body.tools.map((x: any) => x.function.name),
    ['exec_command', 'multi_agent_v1__spawn_agent', 'multi_agent_v1__sketch', 'apply_patch'],
  )
  t.equal(body.tools[1].function.description, 'Spawn one')
  t.same(body.tools[3].function.parameters.required, ['input'])
  t.match(body.tools[3].function.parameters.properties.input.description, /lark grammar:\nstart: x/)
  t.equal(body.tool_choice, 'auto')
  t.same(body.messages[1].tool_calls[0].function.name, 'multi_agent_v1__spawn_agent', 'a namespaced call in the history is flattened the same way')
  t.same(body.messages[3], { role: 'assistant', content: null, tool_calls: [{ id: 'c2', type: 'function', function: { name: 'apply_patch', arguments: '{"input":"*** Begin Patch"}' } }] })
  t.same(body.messages[4], { role: 'tool', tool_call_id: 'c2', content: 'patched' })
  t.same(chat.names.get('multi_agent_v1__spawn_agent'), { name: 'spawn_agent', namespace: 'multi_agent_v1' })
  t.same(chat.names.get('apply_patch'), { name: 'apply_patch', custom: true })
  t.equal(chat.refusal, null)
  t.same(chat.notes, [
    'input items of type web_search_call have no chat equivalent and were not sent',
    'tools with no chat equivalent were not sent: web_search, local_shell',
  ])
  // The answer: the provider's names come back as the client's tools, in their namespace, custom ones as custom calls.
  const items = outputItems(
    {
      choices: [
        {
          message: {
            tool_calls: [
              { id: 'c3', type: 'function', function: { name: 'multi_agent_v1__spawn_agent', arguments: '{"task":"t"}' } },
              { id: 'c4', type: 'function', function: { name: 'apply_patch', arguments: '{"input":"*** Begin Patch\\n*** End Patch"}' } },
              { id: 'c5', type: 'function', function: { name: 'multi_agent_v1__sketch', arguments: 'not json' } },
            ],
          },
          finish_reason: 'tool_calls',
        },
      ],
    },
    chat.names,
  )
  t.match(items, [
    { type: 'function_call', call_id: 'c3', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{"task":"t"}' },
    { type: 'custom_tool_call', status: 'completed', call_id: 'c4', name: 'apply_patch', input: '*** Begin Patch\n*** End Patch' },
    { type: 'custom_tool_call', call_id: 'c5', name: 'sketch', namespace: 'multi_agent_v1', input: 'not json' },
  ])
  t.equal(items[1]!.arguments, undefined)
})

t.test('tool_choice: a forced built-in or missing tool is a refusal; required with no chat tool too; auto with none is left out', async (t) => {
  const web = [{ type: 'web_search' }]
  t.match(toChatCompletions({ model: 'm', tools: web, tool_choice: { type: 'web_search' } }, []).refusal, /built-in tool "web_search"/)
  t.match(toChatCompletions({ model: 'm', tools: web, tool_choice: { type: 'custom', name: 'apply_patch' } }, []).refusal, /custom tool "apply_patch"/)
  t.match(toChatCompletions({ model: 'm', tools: web, tool_choice: 'required' }, []).refusal, /required/)
  t.match(toChatCompletions({ model: 'm', tools: CODEX_TOOLS, tool_choice: { type: 'function', name: 'nope' } }, []).refusal, /"nope"/)
  const auto = toChatCompletions({ model: 'm', tools: web, tool_choice: 'auto' }, [])
  t.equal(auto.refusal, null)
  t.equal(auto.chat.tool_choice, undefined)
  t.equal(auto.chat.tools, undefined)
  const forced = toChatCompletions({ model: 'm', tools: CODEX_TOOLS, tool_choice: { type: 'function', name: 'spawn_agent', namespace: 'multi_agent_v1' } }, [])
  t.same(forced.chat.tool_choice, { type: 'function', function: { name: 'multi_agent_v1__spawn_agent' } })
  const patch = toChatCompletions({ model: 'm', tools: CODEX_TOOLS, tool_choice: { type: 'custom', name: 'apply_patch' } }, [])
  t.same(patch.chat.tool_choice, { type: 'function', function: { name: 'apply_patch' } })
})

t.test('names OpenAI refuses are renamed and mapped back, in a namespace or not', async (t) => {
  const long = 'a_function_name_that_is_well_past_the_sixty_four_characters_openai_allows'
  const chat = toChatCompletions({ model: 'm', tools: [{ type: 'function', name: long }, { type: 'namespace', name: 'mcp.server', tools: [{ type: 'function', name: 'read' }] }] }, [])
  const sent = chat.chat.tools.map((x: any) => x.function.name)
  for (const name of sent) t.match(name, /^[a-zA-Z0-9_-]{1,64}$/)
  t.same(
    sent.map((n: string) => chat.names.get(n)),
    [{ name: long }, { name: 'read', namespace: 'mcp.server' }],
  )
})
