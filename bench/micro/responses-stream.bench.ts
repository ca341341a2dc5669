/**
 * The OpenAI chat → Responses stream translator's cost per upstream chunk (src/codecs/responses-stream-translation.ts):
 * one OpenAI content chunk in, numbered Responses delta events out, against forwarding the Buffer (the floor),
 * the native chat codec's relay of the same chunk (what a chat request pays) and the Anthropic translator (what
 * /v1/messages pays), for a typical text chunk, a four-event chunk and a tool-call argument chunk.
 */
import { Bench } from 'tinybench'
import { AnthropicTranslatedStreamCodec } from '../../src/codecs/anthropic-stream-translation.js'
import { OpenAiSseCodec } from '../../src/codecs/openai-sse.js'
import { ResponsesTranslatedStreamCodec } from '../../src/codecs/responses-stream-translation.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary } from './measure.js'

const HEAD = `{"id":"chatcmpl-8f3a2b1c9d4e","object":"chat.completion.chunk","created":1732147200,"model":"qwen-2.5-7b-instruct","system_fingerprint":"fp_bench"`
const chunk = (delta: string): string => `data: ${HEAD},"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":null}],"usage":null}\n\n`
const content = (text: string): string => chunk(`{"content":"${text}"}`)
const ROLE = Buffer.from(chunk('{"role":"assistant","content":""}'))
const TYPICAL = Buffer.from(content(' quick'))
const FOUR = Buffer.from(content(' quick') + content(' brown') + content(' fox') + content(' jumps'))
const TOOL_START = Buffer.from(chunk('{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}'))
const TOOL_ARGS = Buffer.from(chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": \\"Par"}}]}'))
const META = { id: 'resp_bench', createdAt: 1732147200, model: 'qwen-2.5-7b-instruct', echo: { store: true, previous_response_id: null } }

let sink: Buffer | null = null
let emitted = 0
function emit(bytes: Buffer): void {
  sink = bytes
  emitted += bytes.length
}

function primed(first: Buffer): ResponsesTranslatedStreamCodec {
  const codec = new ResponsesTranslatedStreamCodec(META)
  codec.push(first, emit)
  return codec
}

// Right answers first.
const codec = primed(ROLE)
check(sink!.toString().startsWith('event: response.created\n'), 'the first chunk starts the response')
codec.push(TYPICAL, emit)
check(sink!.toString().includes('event: response.output_item.added\n'), 'the first text opens an item')
codec.push(TYPICAL, emit)
check(/^event: response\.output_text\.delta\ndata: \{"type":"response\.output_text\.delta","sequence_number":5,"item_id":"msg_[0-9a-f]{48}","output_index":0,"content_index":0,"delta":" quick","logprobs":\[\]\}\n\n$/.test(sink!.toString()), 'a numbered text delta')
codec.push(FOUR, emit)
check(sink!.toString().split('event: response.output_text.delta').length === 5, 'four chunks, four deltas')
const tool = primed(TOOL_START)
tool.push(TOOL_ARGS, emit)
check(sink!.toString().includes('"delta":"{\\"city\\": \\"Par"'), 'tool arguments as function_call_arguments.delta')

interface Kind {
  readonly name: string
  readonly first: Buffer
  readonly chunk: Buffer
  readonly events: number
}
const KINDS: readonly Kind[] = [
  { name: 'text chunk', first: Buffer.concat([ROLE, TYPICAL]), chunk: TYPICAL, events: 1 },
  { name: 'four-event chunk', first: Buffer.concat([ROLE, TYPICAL]), chunk: FOUR, events: 4 },
  { name: 'tool-arguments chunk', first: TOOL_START, chunk: TOOL_ARGS, events: 1 },
]

const BATCH = 1000
const bench = new Bench({ name: 'responses-stream', time: 500, warmupTime: 100 })
for (const kind of KINDS) {
  const translator = primed(kind.first)
  const anthropic = new AnthropicTranslatedStreamCodec('claude-x', new Map())
  anthropic.push(kind.first, emit)
  const relay = new OpenAiSseCodec(false)
  relay.push(kind.first, emit)
  bench.add(`${kind.name}: forward Buffer (baseline)`, batched(BATCH, () => emit(kind.chunk)))
  bench.add(`${kind.name}: OpenAiSseCodec.push (chat relay)`, batched(BATCH, () => relay.push(kind.chunk, emit)))
  bench.add(`${kind.name}: AnthropicTranslatedStreamCodec.push`, batched(BATCH, () => anthropic.push(kind.chunk, emit)))
  bench.add(`${kind.name}: ResponsesTranslatedStreamCodec.push`, batched(BATCH, () => translator.push(kind.chunk, emit)))
}
await bench.run()
console.table(bench.table())
check(emitted > 0, 'something was emitted')

const ns = (name: string): number => nsPerOp(bench.getTask(name))
const findings = KINDS.map((kind) => {
  const t = ns(`${kind.name}: ResponsesTranslatedStreamCodec.push`)
  const relay = ns(`${kind.name}: OpenAiSseCodec.push (chat relay)`)
  const anthropic = ns(`${kind.name}: AnthropicTranslatedStreamCodec.push`)
  const perEvent = kind.events > 1 ? ` (${formatNs(t / kind.events)} per OpenAI chunk)` : ''
  return {
    label: `${kind.name} (${kind.chunk.length} B): Responses translation per chunk`,
    value: `${formatNs(t)}${perEvent}, ${ratio(t, relay)} the chat relay (${formatNs(relay)}), ${ratio(t, anthropic)} the Anthropic translation (${formatNs(anthropic)})`,
  }
})
recordSummary(bench, findings)
