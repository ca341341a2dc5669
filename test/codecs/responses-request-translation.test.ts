/**
 * A Responses request as a chat request, and as the body a native provider gets (pure functions).
 */
import t from 'tap'
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
  const body = JSON.parse(
    toChatCompletions({ model: 'm', stream: true, max_output_tokens: 9, top_p: 0.5, tools: [{ type: 'function', name: 'f' }], tool_choice: 'required', store: true, metadata: { a: 'b' } }, [
      { role: 'user', content: 'x' },
    ]).toString(),
  )
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
