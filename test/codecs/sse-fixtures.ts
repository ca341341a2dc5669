/**
 * Streams shaped like what real providers send, written out event by event so a test knows what a relay
 * must forward: OpenAI (compact JSON, `"usage":null` on every chunk, a usage-only chunk), vLLM (Python
 * json.dumps spacing), a llama.cpp-style server behind a CRLF front (timings, `data:[DONE]` without a
 * space), a provider that keeps the connection alive with `: ping` comments, and two odd but valid ones
 * (CR-only line endings; mixed endings with multi-line data and `event:` lines).
 */

/** What a relay must do with an event. */
export type Role = 'forward' | 'usage' | 'done'

export interface FixtureEvent {
  readonly raw: string
  readonly role: Role
  /** A data event ([DONE] aside): counted in `events`. */
  readonly data: boolean
}

export interface Fixture {
  readonly name: string
  readonly events: readonly FixtureEvent[]
  readonly chatId: string
  readonly usage: Record<string, unknown> | null
}

export function bytesOf(f: Fixture): Buffer {
  return Buffer.from(f.events.map((e) => e.raw).join(''))
}

/** What the codec forwards: everything but [DONE], and the usage-only chunk when withheld. */
export function expectedOutput(f: Fixture, withholdUsage: boolean): string {
  return f.events
    .filter((e) => e.role === 'forward' || (e.role === 'usage' && !withholdUsage))
    .map((e) => e.raw)
    .join('')
}

export function dataEvents(f: Fixture): number {
  return f.events.filter((e) => e.data && e.role !== 'done').length
}

const data = (json: string, eol = '\n'): FixtureEvent => ({ raw: `data: ${json}${eol}${eol}`, role: 'forward', data: true })
const comment = (text: string, eol = '\n'): FixtureEvent => ({ raw: `:${text}${eol}${eol}`, role: 'forward', data: false })

function openai(): Fixture {
  const id = 'chatcmpl-AZ7q1xYb2c3d4e5f6g7h8i9j0kLmN'
  const head = `{"id":"${id}","object":"chat.completion.chunk","created":1732147200,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0ba0d124f1"`
  const usage = {
    prompt_tokens: 19,
    completion_tokens: 6,
    total_tokens: 25,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  }
  const content = (text: string): FixtureEvent =>
    data(`${head},"choices":[{"index":0,"delta":{"content":"${text}"},"logprobs":null,"finish_reason":null}],"usage":null}`)
  return {
    name: 'openai',
    chatId: id,
    usage,
    events: [
      data(`${head},"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`),
      content('Hello'),
      content('! How'),
      content(' can I'),
      content(' help \\"you\\"'),
      content(' today?'),
      data(`${head},"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`),
      { ...data(`${head},"choices":[],"usage":${JSON.stringify(usage)}}`), role: 'usage' },
      { raw: 'data: [DONE]\n\n', role: 'done', data: true },
    ],
  }
}

function vllm(): Fixture {
  const id = 'chatcmpl-3f1c0f2be6a54d43a9e3b5d0c1a2f8e7'
  const head = `{"id": "${id}", "object": "chat.completion.chunk", "created": 1732147200, "model": "Qwen/Qwen2.5-7B-Instruct"`
  const usage = { prompt_tokens: 31, total_tokens: 39, completion_tokens: 8, prompt_tokens_details: null }
  const content = (text: string): FixtureEvent =>
    data(`${head}, "choices": [{"index": 0, "delta": {"content": "${text}"}, "logprobs": null, "finish_reason": null}], "usage": null}`)
  return {
    name: 'vllm',
    chatId: id,
    usage: usage,
    events: [
      data(`${head}, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}], "usage": null}`),
      content('The'),
      content(' answer'),
      content(' is'),
      content(' 42'),
      content(' — ünïcödé'),
      data(`${head}, "choices": [{"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": "stop", "stop_reason": null}], "usage": null}`),
      { ...data(`${head}, "choices": [], "usage": ${JSON.stringify(usage).replaceAll(':', ': ').replaceAll(',', ', ')}}`), role: 'usage' },
      { raw: 'data: [DONE]\n\n', role: 'done', data: true },
    ],
  }
}

function llamaCppCrlf(): Fixture {
  const id = 'chatcmpl-Qn5Yx0D3iVb1dKp8R2sLwT4u'
  const head = `{"id":"${id}","object":"chat.completion.chunk","created":1732147200,"model":"llama-3.2-3b-instruct-q4_k_m.gguf","system_fingerprint":"b4273-7736837d"`
  const usage = { completion_tokens: 5, prompt_tokens: 14, total_tokens: 19 }
  const crlf = (json: string): FixtureEvent => data(json, '\r\n')
  const content = (text: string): FixtureEvent => crlf(`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"${text}"}}],"created":1732147200,"id":"${id}","model":"llama","object":"chat.completion.chunk"}`)
  return {
    name: 'llama.cpp over CRLF',
    chatId: id,
    usage,
    events: [
      crlf(`{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1732147200,"id":"${id}","model":"llama","system_fingerprint":"b4273-7736837d","object":"chat.completion.chunk"}`),
      content('Sure'),
      content(','),
      content(' here'),
      content(' it is.'),
      crlf(`{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],${head.slice(1)},"timings":{"prompt_n":14,"prompt_ms":31.2,"predicted_n":5,"predicted_ms":48.9}}`),
      { ...crlf(`{"choices":[],${head.slice(1)},"usage":${JSON.stringify(usage)},"timings":{"prompt_n":14}}`), role: 'usage' },
      { raw: 'data:[DONE]\r\n\r\n', role: 'done', data: true },
    ],
  }
}

function pingingProvider(): Fixture {
  const id = 'gen-1732147200-vQ3bXk9PzLmN2rT5'
  const head = `{"id":"${id}","provider":"Upstream","model":"meta-llama/llama-3.1-8b-instruct","object":"chat.completion.chunk","created":1732147200`
  const usage = { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12, cost: 0.0000024 }
  return {
    name: 'a provider that sends : ping comments',
    chatId: id,
    usage,
    events: [
      comment(' PROCESSING'),
      comment(' ping'),
      comment(' ping'),
      data(`${head},"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}`),
      comment(' ping'),
      data(`${head},"choices":[{"index":0,"delta":{"role":"assistant","content":"!"},"finish_reason":"stop","native_finish_reason":"stop","logprobs":null}]}`),
      { ...data(`${head},"choices":[],"usage":${JSON.stringify(usage)}}`), role: 'usage' },
      { raw: 'data: [DONE]\n\n', role: 'done', data: true },
    ],
  }
}

function crOnly(): Fixture {
  const id = 'chatcmpl-cr-0001'
  const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
  return {
    name: 'CR-only line endings',
    chatId: id,
    usage,
    events: [
      data(`{"id":"${id}","choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}`, '\r'),
      comment(' keep-alive', '\r'),
      data(`{"id":"${id}","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}],"usage":null}`, '\r'),
      { ...data(`{"id":"${id}","choices":[],"usage":${JSON.stringify(usage)}}`, '\r'), role: 'usage' },
      { raw: 'data: [DONE]  \r\r', role: 'done', data: true },
    ],
  }
}

function mixedEndings(): Fixture {
  const id = 'chatcmpl-mixed-42'
  const usage = { prompt_tokens: 8, completion_tokens: 3, total_tokens: 11 }
  return {
    name: 'mixed endings, multi-line data and event names',
    chatId: id,
    usage,
    events: [
      { raw: 'event: open\r\n: hello\n\r\n', role: 'forward', data: false },
      { raw: `event: message\rdata: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_nested_1","type":"function",\r\ndata: "function":{"name":"f","arguments":""}}]}}],\ndata:"id":"${id}"}\n\r`, role: 'forward', data: true },
      { raw: `data:{"id":"${id}","choices":[{"index":0,"delta":{"content":"x"}}],"usage" :\r\ndata: null}\r\n\n`, role: 'forward', data: true },
      { raw: `data: {"id":"${id}","choices":[],\rdata:  "usage"\r\ndata:\n: a comment inside\ndata::\ndata: {"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}}\r\r\n`, role: 'usage', data: true },
      { raw: '\n', role: 'forward', data: false },
      { raw: 'data:[DONE]\r\n\n', role: 'done', data: true },
    ],
  }
}

export const FIXTURES: readonly Fixture[] = [openai(), vllm(), llamaCppCrlf(), pingingProvider(), crOnly(), mixedEndings()]
