/**
 * SseRelay.push per upstream chunk, for a typical chunk (one ~200-byte content event) and for the chunk
 * that carries the usage event, against two references: forwarding the Buffer untouched (the floor: no
 * scanning at all) and the naive relay (JSON.parse + JSON.stringify of every event), which is what the byte
 * scanning saves.
 */
import { Bench } from 'tinybench'
import { SseRelay, type StreamUsage } from '../../src/upstream/sse-relay.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary } from './measure.js'

const ID = 'chatcmpl-8f3a2b1c9d4e'
const HEAD = `{"id":"${ID}","object":"chat.completion.chunk","created":1732147200,"model":"qwen-2.5-7b-instruct","system_fingerprint":"fp_bench"`
const ROLE = Buffer.from(`data: ${HEAD},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`)
const TYPICAL = Buffer.from(`data: ${HEAD},"choices":[{"index":0,"delta":{"content":" quick"},"logprobs":null,"finish_reason":null}]}\n\n`)
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

function primedRelay(): SseRelay {
  const relay = new SseRelay(false)
  relay.push(ROLE, emit)
  return relay
}

// Right answers first: bytes through unchanged (the same Buffer, no copy), usage and chat id read.
const relay = primedRelay()
check(relay.chatId === ID, 'chat id read from the first event')
relay.push(TYPICAL, emit)
check(last() === TYPICAL, 'a chunk ending on an event boundary is forwarded as the same Buffer')
relay.push(USAGE, emit)
check(last().equals(USAGE), 'the usage chunk is forwarded byte for byte')
check(JSON.stringify(relay.usage) === JSON.stringify(USAGE_EVENT), 'usage read from the usage event')
check(relay.events === 3 && !relay.done, 'events counted')
const naiveUsage = naiveRelay(USAGE, emit)
check(last().equals(USAGE) && JSON.stringify(naiveUsage) === JSON.stringify(USAGE_EVENT), 'the naive relay agrees')

const BATCH = 1000
const typicalRelay = primedRelay()
const usageRelay = primedRelay()
const bench = new Bench({ name: 'sse', time: 500, warmupTime: 100 })
bench.add('typical chunk: forward Buffer (baseline)', batched(BATCH, () => emit(TYPICAL)))
bench.add('typical chunk: SseRelay.push', batched(BATCH, () => typicalRelay.push(TYPICAL, emit)))
bench.add('typical chunk: parse + reserialise', batched(BATCH, () => naiveRelay(TYPICAL, emit)))
bench.add('usage chunk: forward Buffer (baseline)', batched(BATCH, () => emit(USAGE)))
bench.add('usage chunk: SseRelay.push', batched(BATCH, () => usageRelay.push(USAGE, emit)))
bench.add('usage chunk: parse + reserialise', batched(BATCH, () => naiveRelay(USAGE, emit)))
await bench.run()
console.table(bench.table())
check(emitted > 0, 'something was emitted')

const ns = (name: string): number => nsPerOp(bench.getTask(name))
const findings = ['typical', 'usage'].map((kind) => {
  const relayNs = ns(`${kind} chunk: SseRelay.push`)
  const naiveNs = ns(`${kind} chunk: parse + reserialise`)
  const baseNs = ns(`${kind} chunk: forward Buffer (baseline)`)
  return {
    label: `${kind} chunk (${kind === 'typical' ? TYPICAL.length : USAGE.length} B): relay vs naive vs forward`,
    value: `${formatNs(relayNs)} vs ${formatNs(naiveNs)} vs ${formatNs(baseNs)}; the relay costs ${ratio(relayNs, naiveNs)} of naive (${formatNs(relayNs - baseNs)} over forwarding)`,
  }
})
recordSummary(bench, findings)
