/**
 * The Anthropic → OpenAI chat request translation on its own (issue 42): system turns kept in place, thinking
 * and output_config as reasoning_effort / response_format, server tools and members with no chat equivalent
 * left out with notes, a forced server tool as a refusal.
 */
import t from 'tap'
import { outputFormatOf, reasoningEffortOf, toOpenAiChat } from '../../src/codecs/messages-request-translation.js'

const BASE = { model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }

t.test('reasoning_effort of thinking and output_config.effort', async (t) => {
  const cases: [object, string | null][] = [
    [{}, null],
    [{ thinking: { type: 'disabled' } }, null],
    [{ thinking: { type: 'disabled' }, output_config: { effort: 'high' } }, null],
    [{ thinking: { type: 'adaptive' } }, 'high'],
    [{ thinking: { type: 'adaptive' }, output_config: { effort: 'low' } }, 'low'],
    [{ output_config: { effort: 'medium' } }, 'medium'],
    [{ output_config: { effort: 'max' } }, 'high'],
    [{ thinking: { type: 'enabled', budget_tokens: 1024 } }, 'low'],
    [{ thinking: { type: 'enabled', budget_tokens: 4096 } }, 'medium'],
    [{ thinking: { type: 'enabled', budget_tokens: 16384 } }, 'high'],
    [{ thinking: { type: 'enabled', budget_tokens: 2048 }, output_config: { effort: 'high' } }, 'high'],
  ]
  for (const [extra, effort] of cases) t.equal(reasoningEffortOf({ ...BASE, ...extra }), effort, JSON.stringify(extra))
})

t.test('output format: output_config.format or the older output_format, json_schema only', async (t) => {
  const schema = { type: 'object', properties: {} }
  t.same(outputFormatOf({ output_config: { format: { type: 'json_schema', schema } } }), { type: 'json_schema', schema })
  t.same(outputFormatOf({ output_format: { type: 'json_schema', schema } }), { type: 'json_schema', schema })
  t.equal(outputFormatOf({ output_config: { format: { type: 'text' } } }), null)
  t.equal(outputFormatOf({ output_config: { format: { type: 'json_schema' } } }), null)
  const tr = toOpenAiChat({ ...BASE, output_config: { format: { type: 'json_schema', schema } } })
  t.same(tr.responseFormat, { type: 'json_schema', json_schema: { name: 'response', schema } })
  t.equal(tr.chat.response_format, undefined, 'set per candidate, by what it advertises')
})

t.test('system turns stay where they are; the top-level system comes first', async (t) => {
  const tr = toOpenAiChat({
    ...BASE,
    system: 'rules',
    messages: [
      { role: 'user', content: 'a' },
      { role: 'system', content: [{ type: 'text', text: 'mid' }, { type: 'text', text: 'way' }] },
      { role: 'assistant', content: 'b' },
      { role: 'system', content: 'late' },
      { role: 'user', content: 'c' },
    ],
  })
  t.same(tr.chat.messages, [
    { role: 'system', content: 'rules' },
    { role: 'user', content: 'a' },
    { role: 'system', content: 'mid\nway' },
    { role: 'assistant', content: 'b' },
    { role: 'system', content: 'late' },
    { role: 'user', content: 'c' },
  ])
  t.same(tr.notes, [])
})

t.test('server tools, unknown blocks and members: not sent, each noted; forcing a server tool is a refusal', async (t) => {
  const tools = [
    { name: 'Read', input_schema: { type: 'object' } },
    { type: 'custom', name: 'Write', input_schema: { type: 'object' } },
    { type: 'web_search_20250305', name: 'web_search' },
    { type: 'bash_20250124', name: 'bash' },
  ]
  const messages = [
    { role: 'user', content: 'a' },
    { role: 'assistant', content: [{ type: 'server_tool_use', id: 's1', name: 'web_search', input: {} }] },
    { role: 'user', content: [{ type: 'web_search_tool_result', tool_use_id: 's1', content: [] }, { type: 'text', text: 'go' }] },
  ]
  const tr = toOpenAiChat({ ...BASE, messages, tools, context_management: {}, mcp_servers: [] })
  t.same(
    tr.chat.tools.map((x: any) => x.function.name),
    ['Read', 'Write'],
  )
  t.same(tr.notes, [
    'content blocks of type server_tool_use, web_search_tool_result have no chat equivalent and were not sent',
    'members with no chat equivalent were not sent: context_management, mcp_servers',
    'Anthropic server tools are not available from a chat provider and were not sent: web_search (web_search_20250305), bash (bash_20250124)',
  ])
  t.equal(tr.refusal, null)
  t.match(toOpenAiChat({ ...BASE, tools, tool_choice: { type: 'tool', name: 'bash' } }).refusal, /server tool "bash" \(bash_20250124\)/)
  t.match(toOpenAiChat({ ...BASE, tools: tools.slice(2), tool_choice: { type: 'any' } }).refusal, /"any" forces a tool/)
  t.same(toOpenAiChat({ ...BASE, tools, tool_choice: { type: 'tool', name: 'Read' } }).chat.tool_choice, { type: 'function', function: { name: 'Read' } })
  const auto = toOpenAiChat({ ...BASE, tools: tools.slice(2), tool_choice: { type: 'auto' } })
  t.equal(auto.refusal, null)
  t.equal(auto.chat.tools, undefined)
  t.equal(auto.chat.tool_choice, undefined, 'no tool_choice without tools')
})
