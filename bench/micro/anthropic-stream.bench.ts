/**
 * The OpenAI → Anthropic stream translator's cost per upstream chunk (src/codecs/anthropic-stream-translation.ts):
 * one OpenAI content chunk in, Anthropic content_block_delta events out, against forwarding the Buffer (the
 * floor) and the native chat codec's relay of the same chunk (what a chat request pays), for: a typical text
 * chunk, a four-event chunk, a tool-call argument chunk, and the same text chunk over CRLF.
 */
import { Bench } from 'tinybench'
import { AnthropicTranslatedStreamCodec } from '../../src/codecs/anthropic-stream-translation.js'
import { OpenAiSseCodec } from '../../src/codecs/openai-sse.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary } from './measure.js'

const ID = 'chatcmpl-8f3a2b1c9d4e'
const HEAD = `{"id":"${ID}","object":"chat.completion.chunk","created":1732147200,"model":"qwen-2.5-7b-instruct","system_fingerprint":"fp_bench"`
const chunk = (delta: string): string => `data: ${HEAD},"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":null}],"usage":null}\n\n`
const content = (text: string): string => chunk(`{"content":"${text}"}`)
const ROLE = Buffer.from(chunk('{"role":"assistant","content":""}'))
const TYPICAL = Buffer.from(content(' quick'))
const CRLF = Buffer.from(content(' quick').replaceAll('\n', '\r\n'))
const FOUR = Buffer.from(content(' quick') + content(' brown') + content(' fox') + content(' jumps'))
const TOOL_START = Buffer.from(chunk('{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}'))
const TOOL_ARGS = Buffer.from(chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": \\"Par"}}]}'))

let sink: Buffer | null = null
let emitted = 0
function emit(bytes: Buffer): void {
  sink = bytes
  emitted += bytes.length
}

function primed(first: Buffer): AnthropicTranslatedStreamCodec {
  const codec = new AnthropicTranslatedStreamCodec('claude-x', new Map())
  codec.push(first, emit)
  return codec
}

// Right answers first.
const codec = primed(ROLE)
codec.push(TYPICAL, emit)
check(sink!.toString().startsWith('event: content_block_start\n'), 'the first text opens a block')
codec.push(TYPICAL, emit)
check(sink!.toString() === 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" quick"}}\n\n', 'a text delta')
codec.push(FOUR, emit)
check(sink!.toString().split('event: content_block_delta').length === 5, 'four events, four deltas')
const tool = primed(TOOL_START)
tool.push(TOOL_ARGS, emit)
check(sink!.toString().includes('"partial_json":"{\\"city\\": \\"Par"'), 'tool arguments as input_json_delta')

interface Kind {
  readonly name: string
  readonly first: Buffer
  readonly chunk: Buffer
  readonly events: number
}
const KINDS: readonly Kind[] = [
  { name: 'text chunk', first: Buffer.concat([ROLE, TYPICAL]), chunk: TYPICAL, events: 1 },
  { name: 'text CRLF chunk', first: Buffer.concat([ROLE, TYPICAL]), chunk: CRLF, events: 1 },
  { name: 'four-event chunk', first: Buffer.concat([ROLE, TYPICAL]), chunk: FOUR, events: 4 },
  { name: 'tool-arguments chunk', first: TOOL_START, chunk: TOOL_ARGS, events: 1 },
]

const BATCH = 1000
const bench = new Bench({ name: 'anthropic-stream', time: 500, warmupTime: 100 })
for (const kind of KINDS) {
  const translator = primed(kind.first)
  const relay = new OpenAiSseCodec(false)
  relay.push(kind.first, emit)
  bench.add(`${kind.name}: forward Buffer (baseline)`, batched(BATCH, () => emit(kind.chunk)))
  bench.add(`${kind.name}: OpenAiSseCodec.push (chat relay)`, batched(BATCH, () => relay.push(kind.chunk, emit)))
  bench.add(`${kind.name}: AnthropicTranslatedStreamCodec.push`, batched(BATCH, () => translator.push(kind.chunk, emit)))
}
await bench.run()
console.table(bench.table())
check(emitted > 0, 'something was emitted')

const ns = (name: string): number => nsPerOp(bench.getTask(name))
const findings = KINDS.map((kind) => {
  const t = ns(`${kind.name}: AnthropicTranslatedStreamCodec.push`)
  const relay = ns(`${kind.name}: OpenAiSseCodec.push (chat relay)`)
  const perEvent = kind.events > 1 ? ` (${formatNs(t / kind.events)} per OpenAI chunk)` : ''
  return {
    label: `${kind.name} (${kind.chunk.length} B): translation per chunk`,
    value: `${formatNs(t)}${perEvent}, ${ratio(t, relay)} the chat relay (${formatNs(relay)}), forward ${formatNs(ns(`${kind.name}: forward Buffer (baseline)`))}`,
  }
})
recordSummary(bench, findings)
