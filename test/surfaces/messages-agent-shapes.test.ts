/**
 * /v1/messages takes what Claude Code 2.x and the Anthropic SDK send today (issue 42): `system` turns inside
 * `messages`, adaptive thinking with `output_config`, server tools, fields and betas the router does not know.
 * A capturing provider shows what each candidate gets: a native one the client's bytes, a translated one the
 * mapped chat request (system turns in place, reasoning_effort / response_format where advertised, server
 * tools left out with a note in the trace); the answer comes back through the real @anthropic-ai/sdk client.
 */
import type { IncomingHttpHeaders } from 'node:http'
import Anthropic from '@anthropic-ai/sdk'
import t from 'tap'
import { request } from 'undici'
import { fakeProvider } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'

const MODEL = 'm-agent'
const N = addr('a') // native: formats [anthropic]
const O = addr('b') // openai only

interface Seen {
  path: string
  headers: IncomingHttpHeaders
  raw: string
  body: any
}

const CHAT_ANSWER = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 0,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'done' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
}

function chatStream(): string {
  const base = { id: 'chatcmpl-2', object: 'chat.completion.chunk', created: 0, model: MODEL }
  const chunks = [
    { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'do' }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: { content: 'ne' }, finish_reason: 'stop' }] },
    { ...base, choices: [], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } },
  ]
  return chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n'
}

const NATIVE_ANSWER = {
  id: 'msg_native',
  type: 'message',
  role: 'assistant',
  model: MODEL,
  content: [{ type: 'text', text: 'native done' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 9, output_tokens: 2 },
}

/** A provider that keeps every request it gets and answers in the format of the path asked. */
async function capturing(t: Parameters<typeof startStack>[0], seen: Seen[]): Promise<string> {
  const { url } = await fakeProvider(t, (req, res, raw) => {
    const body = JSON.parse(raw)
    seen.push({ path: req.url ?? '', headers: req.headers, raw, body })
    if (req.url === '/v1/chat/completions' && body.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      return res.end(chatStream())
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(req.url === '/v1/messages' ? NATIVE_ANSWER : CHAT_ANSWER))
  })
  return url
}

async function stackOf(
  t: Parameters<typeof startStack>[0],
  which: 'native' | 'openai' | 'both',
  seen: Seen[],
  params = ['tools', 'tool_choice', 'reasoning', 'response_format'],
  config = {},
): Promise<Stack> {
  const url = await capturing(t, seen)
  const providers = []
  if (which !== 'openai') providers.push({ address: N, url, models: [{ id: MODEL, formats: ['anthropic'], supported_parameters: params, price: { prompt: 0.5, completion: 1 } }] })
  if (which !== 'native') providers.push({ address: O, url, models: [{ id: MODEL, formats: ['openai'], supported_parameters: params, price: { prompt: 0.1, completion: 0.2 } }] })
  return startStack(t, providers, config)
}

function client(stack: Stack, headers: Record<string, string> = {}): Anthropic {
  return new Anthropic({ baseURL: stack.url, apiKey: stack.key, maxRetries: 0, defaultHeaders: headers })
}

async function post(stack: Stack, raw: string, headers: Record<string, string> = {}) {
  const res = await request(stack.url + '/v1/messages?beta=true', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': stack.key, ...headers },
    body: raw,
  })
  return { status: res.statusCode, json: (await res.body.json()) as any }
}

const BETAS = 'claude-code-20250219,interleaved-thinking-2025-05-14,mid-conversation-system-2026-04-07,effort-2025-11-24'
const BASH = { name: 'Bash', description: 'Run a command', input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } }
const WEB_SEARCH = { type: 'web_search_20250305', name: 'web_search', max_uses: 3 }

/** A request as Claude Code 2.1 sends it (trimmed): a system turn last, adaptive thinking, output_config, context_management. */
const CLAUDE_CODE = {
  model: MODEL,
  max_tokens: 4096,
  system: [
    { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.197' },
    { type: 'text', text: 'You are a Claude agent.', cache_control: { type: 'ephemeral' } },
  ],
  messages: [
    { role: 'user', content: [{ type: 'text', text: 'say hi', cache_control: { type: 'ephemeral' } }] },
    { role: 'system', content: 'Available agent types: claude, Explore.' },
  ],
  tools: [BASH, WEB_SEARCH],
  metadata: { user_id: '{"device_id":"d1"}' },
  thinking: { type: 'adaptive' },
  context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
  output_config: { effort: 'high' },
  some_future_field: { on: true },
}

t.test("Claude Code's request reaches a native provider byte for byte, betas and all", async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, 'native', seen)
  const raw = JSON.stringify({ ...CLAUDE_CODE, messages: [...CLAUDE_CODE.messages, { role: 'assistant', content: [{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'x' } }, { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [] }] }, { role: 'user', content: 'go on' }] })
  const res = await post(stack, raw, { 'anthropic-version': '2023-06-01', 'anthropic-beta': BETAS })
  t.equal(res.status, 200, JSON.stringify(res.json))
  t.equal(res.json.content[0].text, 'native done')
  t.equal(seen.length, 1)
  t.equal(seen[0]!.path, '/v1/messages')
  t.equal(seen[0]!.raw, raw, 'the bytes as sent')
  t.equal(seen[0]!.headers['anthropic-beta'], BETAS)
  t.notOk(res.json.x_svc_trace.notes, 'nothing left out')
})

t.test('a translated provider gets system turns in place, reasoning_effort and response_format, no server tools (noted)', async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, 'openai', seen)
  const anthropic = client(stack, { 'anthropic-beta': BETAS })
  const format = { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] } }
  const body = { ...CLAUDE_CODE, output_config: { effort: 'max', format } } as any
  const { data: msg, response } = await anthropic.messages.create(body).withResponse()
  t.equal(response.status, 200)
  t.same(msg.content, [{ type: 'text', text: 'done' }])
  t.equal(msg.stop_reason, 'end_turn')
  const chat = seen[0]!.body
  t.equal(seen[0]!.path, '/v1/chat/completions')
  t.same(
    chat.messages.map((m: any) => [m.role, typeof m.content === 'string' ? m.content : m.content.map((p: any) => p.text).join('|')]),
    [
      ['system', 'x-anthropic-billing-header: cc_version=2.1.197\nYou are a Claude agent.'],
      ['user', 'say hi'],
      ['system', 'Available agent types: claude, Explore.'],
    ],
    'the system turn stays after the user turn it followed',
  )
  t.same(chat.tools.map((x: any) => x.function.name), ['Bash'], 'the server tool is not sent')
  t.equal(chat.reasoning_effort, 'high', 'effort max is the highest reasoning_effort')
  t.same(chat.response_format, { type: 'json_schema', json_schema: { name: 'response', schema: format.schema } })
  t.equal(chat.thinking, undefined)
  t.equal(chat.output_config, undefined)
  t.equal(seen[0]!.headers['anthropic-beta'], undefined)
  t.same((msg as any).x_svc_trace.notes, [
    'members with no chat equivalent were not sent: context_management, some_future_field',
    'Anthropic server tools are not available from a chat provider and were not sent: web_search (web_search_20250305)',
  ])

  // Streamed, the same request: the answer's events mapped back, the note in message_stop's trace.
  const stream = anthropic.messages.stream({ ...CLAUDE_CODE, output_config: { effort: 'low' } } as any)
  let stop: any
  for await (const event of stream) if (event.type === 'message_stop') stop = event
  const final = await stream.finalMessage()
  t.same(final.content, [{ type: 'text', text: 'done' }])
  t.equal(seen[1]!.body.reasoning_effort, 'low')
  t.equal(seen[1]!.body.stream, true)
  t.equal(seen[1]!.body.messages[2].role, 'system')
  t.match(stop.x_svc_trace.notes, [/context_management/, /web_search/])
})

t.test('thinking enabled / disabled: reasoning_effort from the budget, none when disabled', async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, 'openai', seen)
  const anthropic = client(stack)
  const base = { model: MODEL, max_tokens: 20000, messages: [{ role: 'user' as const, content: 'hi' }] }
  await anthropic.messages.create({ ...base, thinking: { type: 'enabled', budget_tokens: 1024 } })
  await anthropic.messages.create({ ...base, thinking: { type: 'enabled', budget_tokens: 10000 } })
  await anthropic.messages.create({ ...base, thinking: { type: 'disabled' } })
  t.same(
    seen.map((s) => s.body.reasoning_effort),
    ['low', 'medium', undefined],
  )
  t.same(seen.map((s) => s.body.reasoning), [undefined, undefined, undefined], 'no reasoning object beside it')
})

t.test('require-parameters: a provider not advertising reasoning / response_format is refused when on, not sent them when off', async (t) => {
  const seen: Seen[] = []
  const stack = await stackOf(t, 'openai', seen, ['tools'])
  const body = JSON.stringify({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'adaptive' }, output_config: { format: { type: 'json_schema', schema: { type: 'object' } } } })
  const strict = await post(stack, body, { 'x-svc-provider-require-parameters': 'true' })
  t.equal(strict.status, 400)
  t.equal(strict.json.error.code, 'model_not_capable')
  t.match(strict.json.error.message, /response_format, reasoning/)
  t.equal(seen.length, 0)
  const lax = await post(stack, body)
  t.equal(lax.status, 200)
  t.equal(seen[0]!.body.reasoning_effort, undefined)
  t.equal(seen[0]!.body.response_format, undefined)
  t.equal(lax.json.x_svc_trace.notes.length, 2)
  t.match(lax.json.x_svc_trace.notes.join(' '), /reasoning_effort.*response_format/)
})

t.test('tool_choice forcing a server tool: refused by a translated candidate, served by a native one', async (t) => {
  const forced = JSON.stringify({ ...CLAUDE_CODE, tool_choice: { type: 'tool', name: 'web_search' } })
  const seen: Seen[] = []
  const only = await stackOf(t, 'openai', seen)
  const refused = await post(only, forced)
  t.equal(refused.status, 400)
  t.equal(refused.json.type, 'error')
  t.equal(refused.json.error.code, 'invalid_request')
  t.match(refused.json.error.message, /web_search/)
  t.equal(seen.length, 0, 'the translated provider got nothing')

  const seenBoth: Seen[] = []
  // One try allowed: the candidate that could not serve was sent nothing, so it is no try.
  const both = await stackOf(t, 'both', seenBoth, undefined, { routing: { max_attempts: 1 } })
  // Sorted by price the translated candidate comes first; it cannot serve, the native one does.
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
  t.equal(seenBoth.length, 1)
  t.equal(seenBoth[0]!.raw, forced)

  // Not forced: the translated candidate serves, without the server tool.
  const auto = await post(both, JSON.stringify(CLAUDE_CODE), { 'x-svc-provider-sort': 'price' })
  t.equal(auto.json.x_svc_trace.provider, O)
})

t.test('malformed shapes still get a clear 400', async (t) => {
  const stack = await stackOf(t, 'native', [])
  const cases: [object, RegExp][] = [
    [{ messages: [{ role: 'tool', content: 'x' }] }, /role must be "user", "assistant" or "system"/],
    [{ messages: [{ role: 'system', content: 5 }] }, /messages\[0\].content must be a string/],
    [{ tools: [{ type: 7 }] }, /tools\[0\].type must be a string/],
    [{ tools: [{ description: 'no name' }] }, /tools\[0\].name/],
    [{ thinking: 'adaptive' }, /thinking must be an object/],
    [{ output_config: 'high' }, /output_config must be an object/],
  ]
  for (const [extra, message] of cases) {
    const res = await post(stack, JSON.stringify({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...extra }))
    t.equal(res.status, 400)
    t.match(res.json.error.message, message)
  }
})
