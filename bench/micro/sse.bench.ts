/**
 * The OpenAI SSE codec's push per upstream chunk (src/codecs/openai-sse.ts), against today's relay
 * (kept as bench/micro/old-sse-relay.ts, a baseline measured in the same run), forwarding the Buffer untouched (the floor:
 * no scanning at all) and the naive relay (JSON.parse + JSON.stringify of every event), for: a typical
 * content chunk (one ~250-byte event), the same over CRLF, a short ~60-byte event, a chunk of four events,
 * a Python-spaced (vLLM) chunk, and the chunk that carries the usage event.
 */
import { Bench } from 'tinybench'
import { OpenAiSseCodec, type StreamUsage } from '../../src/codecs/openai-sse.js'
import { SseRelay } from './old-sse-relay.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary } from './measure.js'

const ID = 'chatcmpl-8f3a2b1c9d4e'
const HEAD = `{"id":"${ID}","object":"chat.completion.chunk","created":1732147200,"model":"qwen-2.5-7b-instruct","system_fingerprint":"fp_bench"`
const content = (text: string): string =>
  `data: ${HEAD},"choices":[{"index":0,"delta":{"content":"${text}"},"logprobs":null,"finish_reason":null}],"usage":null}\n\n`
const ROLE = Buffer.from(`data: ${HEAD},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}\n\n`)
const TYPICAL = Buffer.from(content(' quick'))
const CRLF = Buffer.from(content(' quick').replaceAll('\n', '\r\n'))
const ROLE_CRLF = Buffer.from(ROLE.toString().replaceAll('\n', '\r\n'))
const SHORT = Buffer.from(`data: {"id":"${ID}","choices":[{"delta":{"content":" fox"}}]}\n\n`)
const FOUR = Buffer.from(content(' quick') + content(' brown') + content(' fox') + content(' jumps'))
const SPACED = Buffer.from(
  `data: {"id": "${ID}", "object": "chat.completion.chunk", "created": 1732147200, "model": "qwen-2.5-7b-instruct", "choices": [{"index": 0, "delta": {"content": " quick"}, "logprobs": null, "finish_reason": null}], "usage": null}\n\n`,
)
const USAGE_EVENT = { prompt_tokens: 512, completion_tokens: 128, total_tokens: 640 }
const USAGE = Buffer.from(`data: ${HEAD},"choices":[],"usage":${JSON.stringify(USAGE_EVENT)}}\n\n`)

let sink: Buffer | null = null
let emitted = 0
function emit(bytes: Buffer): void {
  sink = bytes
  emitted += bytes.length
}

/** The last emitted Buffer (a function, so checks re-read it after each push). */
function last(): Buffer {
  if (sink === null) throw new Error('nothing emitted')
  return sink
}

/** The relay the router avoids: every event parsed and written back, usage picked from the object. */
function naiveRelay(chunk: Buffer, out: (bytes: Buffer) => void): StreamUsage | null {
  let usage: StreamUsage | null = null
  let text = ''
  for (const event of chunk.toString('utf8').split('\n\n')) {
    if (event === '') continue
    if (!event.startsWith('data: ') || event === 'data: [DONE]') {
      text += event + '\n\n'
      continue
    }
    const parsed = JSON.parse(event.slice(6)) as { usage?: StreamUsage }
    if (parsed.usage !== undefined) usage = parsed.usage
    text += 'data: ' + JSON.stringify(parsed) + '\n\n'
  }
  out(Buffer.from(text))
  return usage
}

/** A codec past the stream's first event, as it is for every chunk but the first. */
function primedCodec(first: Buffer = ROLE): OpenAiSseCodec {
  const codec = new OpenAiSseCodec(false)
  codec.push(first, emit)
  return codec
}

function primedRelay(first: Buffer = ROLE): SseRelay {
  const relay = new SseRelay(false)
  relay.push(first, emit)
  return relay
}

// Right answers first: bytes through unchanged (the same Buffer, no copy), usage and chat id read.
const codec = primedCodec()
check(codec.chatId === ID, 'chat id read from the first event')
for (const chunk of [TYPICAL, SHORT, FOUR, SPACED]) {
  codec.push(chunk, emit)
  check(last() === chunk, 'a chunk ending on an event boundary is forwarded as the same Buffer')
}
check(codec.usage === null, 'no usage from "usage":null chunks')
codec.push(USAGE, emit)
check(last() === USAGE, 'the usage chunk is forwarded byte for byte')
check(JSON.stringify(codec.usage) === JSON.stringify(USAGE_EVENT), 'usage read from the usage event')
check(codec.events === 9 && !codec.sawDone, 'events counted')
const crlfCodec = primedCodec(ROLE_CRLF)
crlfCodec.push(CRLF, emit)
check(last() === CRLF && crlfCodec.chatId === ID, 'CRLF chunks are forwarded as the same Buffer')
const withheld = new OpenAiSseCodec(true)
withheld.push(Buffer.concat([TYPICAL, USAGE]), emit)
check(last().equals(TYPICAL) && withheld.usage !== null, 'the usage-only chunk is withheld when asked')
const relay = primedRelay()
relay.push(TYPICAL, emit)
check(last() === TYPICAL, 'the old relay forwards the same Buffer too')
relay.push(USAGE, emit)
check(JSON.stringify(relay.usage) === JSON.stringify(USAGE_EVENT), 'the old relay reads the same usage')
const naiveUsage = naiveRelay(USAGE, emit)
check(last().equals(USAGE) && JSON.stringify(naiveUsage) === JSON.stringify(USAGE_EVENT), 'the naive relay agrees')

interface Kind {
  readonly name: string
  readonly chunk: Buffer
  readonly events: number
  readonly first?: Buffer
  readonly naive?: boolean
}
const KINDS: readonly Kind[] = [
  { name: 'typical chunk', chunk: TYPICAL, events: 1, naive: true },
  { name: 'typical CRLF chunk', chunk: CRLF, events: 1, first: ROLE_CRLF },
  { name: 'short chunk', chunk: SHORT, events: 1 },
  { name: 'four-event chunk', chunk: FOUR, events: 4 },
  { name: 'vLLM-spaced chunk', chunk: SPACED, events: 1 },
  { name: 'usage chunk', chunk: USAGE, events: 1, naive: true },
]

const BATCH = 1000
const bench = new Bench({ name: 'sse', time: 500, warmupTime: 100 })
for (const kind of KINDS) {
  const newCodec = primedCodec(kind.first)
  const oldRelay = primedRelay(kind.first)
  bench.add(`${kind.name}: forward Buffer (baseline)`, batched(BATCH, () => emit(kind.chunk)))
  bench.add(`${kind.name}: OpenAiSseCodec.push`, batched(BATCH, () => newCodec.push(kind.chunk, emit)))
  bench.add(`${kind.name}: SseRelay.push (old)`, batched(BATCH, () => oldRelay.push(kind.chunk, emit)))
  if (kind.naive === true) bench.add(`${kind.name}: parse + reserialise`, batched(BATCH, () => naiveRelay(kind.chunk, emit)))
}
await bench.run()
console.table(bench.table())
check(emitted > 0, 'something was emitted')

const ns = (name: string): number => nsPerOp(bench.getTask(name))
const findings = KINDS.map((kind) => {
  const newNs = ns(`${kind.name}: OpenAiSseCodec.push`)
  const oldNs = ns(`${kind.name}: SseRelay.push (old)`)
  const baseNs = ns(`${kind.name}: forward Buffer (baseline)`)
  const naive = kind.naive === true ? `; naive parse + reserialise ${formatNs(ns(`${kind.name}: parse + reserialise`))}` : ''
  const perEvent = kind.events > 1 ? ` (${formatNs(newNs / kind.events)} per event)` : ''
  return {
    label: `${kind.name} (${kind.chunk.length} B, ${kind.events} event${kind.events > 1 ? 's' : ''}): codec no slower than the old relay`,
    value: `${formatNs(newNs)}${perEvent} vs ${formatNs(oldNs)}, ${ratio(newNs, oldNs)} (forward ${formatNs(baseNs)}${naive})`,
    pass: newNs <= oldNs,
  }
})
recordSummary(bench, findings)
