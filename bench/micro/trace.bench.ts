/**
 * Adding `x_svc_trace` to a non-streamed JSON answer: spliceTrace (a byte splice before the closing brace)
 * against JSON.parse + add the field + JSON.stringify, for a 1 KB and a 64 KB body. Both variants build the
 * trace from the same fields each time, as a request does. A third variant is the chat JSON codec as the engine
 * runs it on every JSON answer (read: one JSON.parse for the id and usage; complete: the splice).
 */
import { Bench } from 'tinybench'
import type { TraceFields } from '../../src/billing/trace.js'
import { traceMember, traceObject } from '../../src/billing/trace.js'
import { ChatJsonCodec } from '../../src/codecs/openai-chat.js'
import { spliceTrace } from '../../src/codecs/trace-splice.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary, type Finding } from './measure.js'

const FIELDS: TraceFields = {
  requestId: 'req_88dfd4a7c577000001',
  provider: '0x1111111111111111111111111111111111111111',
  model: 'qwen-2.5-7b-instruct',
  cost: { input: 51_200_000_000_000n, output: 38_400_000_000_000n },
  usage: { prompt_tokens: 512, completion_tokens: 128, total_tokens: 640 },
  attempts: [{ provider: '0x1111111111111111111111111111111111111111', status: 200 }],
  startedAt: performance.now(),
}

/** A chat.completion body of about `bytes` bytes (the message content fills it up). */
function completionBody(bytes: number): Buffer {
  const shell = (content: string): string =>
    JSON.stringify({
      id: 'chatcmpl-8f3a2b1c9d4e',
      object: 'chat.completion',
      created: 1732147200,
      model: 'qwen-2.5-7b-instruct',
      system_fingerprint: 'fp_bench',
      choices: [{ index: 0, message: { role: 'assistant', content, refusal: null }, logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: 512, completion_tokens: 128, total_tokens: 640 },
    })
  const words = ' The quick brown fox jumps over the lazy dog.'
  const room = bytes - shell('').length
  return Buffer.from(shell(words.repeat(Math.ceil(room / words.length)).slice(0, room)))
}

function naive(body: Buffer): Buffer {
  const parsed = JSON.parse(body.toString('utf8')) as Record<string, unknown>
  parsed.x_svc_trace = traceObject(FIELDS)
  return Buffer.from(JSON.stringify(parsed))
}

function spliced(body: Buffer): Buffer {
  return spliceTrace(body, traceMember(FIELDS))!
}

function routerPath(body: Buffer): Buffer | string {
  const codec = new ChatJsonCodec()
  codec.read(body)
  return codec.complete(traceObject(FIELDS))
}

const SIZES = [
  { label: '1 KB', body: completionBody(1024) },
  { label: '64 KB', body: completionBody(64 * 1024) },
]

// Right answers first: the splice parses back to the body plus the trace, exactly like the naive way.
for (const { label, body } of SIZES) {
  const member = traceMember(FIELDS)
  const out = spliceTrace(body, member)
  check(out !== null, `splice accepts a JSON object (${label})`)
  const expected = { ...(JSON.parse(body.toString('utf8')) as object), x_svc_trace: JSON.parse(member.slice(',"x_svc_trace":'.length)) }
  check(JSON.stringify(JSON.parse(out!.toString('utf8'))) === JSON.stringify(expected), `splice result (${label})`)
  check(out!.subarray(0, body.length - 1).equals(body.subarray(0, body.length - 1)), `the body's bytes are untouched (${label})`)
  check(Object.keys(JSON.parse(naive(body).toString('utf8')) as object).includes('x_svc_trace'), `naive result (${label})`)
}
check(spliceTrace(Buffer.from('{}'), ',"a":1')?.toString() === '{"a":1}', 'empty object')

const bench = new Bench({ name: 'trace', time: 500, warmupTime: 100 })
bench.add('traceMember alone (part of every variant but the naive one)', batched(500, () => traceMember(FIELDS)))
for (const { label, body } of SIZES) {
  const count = body.length > 10_000 ? 20 : 500
  bench.add(`${label}: spliceTrace`, batched(count, () => spliced(body)))
  bench.add(`${label}: JSON.parse + field + JSON.stringify`, batched(count, () => naive(body)))
  bench.add(`${label}: JSON.parse + spliceTrace (chat JSON codec)`, batched(count, () => routerPath(body)))
}
await bench.run()
console.table(bench.table())

const findings: Finding[] = SIZES.map(({ label }) => {
  const splice = nsPerOp(bench.getTask(`${label}: spliceTrace`))
  const parse = nsPerOp(bench.getTask(`${label}: JSON.parse + field + JSON.stringify`))
  const today = nsPerOp(bench.getTask(`${label}: JSON.parse + spliceTrace (chat JSON codec)`))
  return {
    label: `${label} body: splice vs parse+stringify`,
    value: `${formatNs(splice)} vs ${formatNs(parse)} (${ratio(parse, splice)} faster); the whole chat JSON codec (read + complete): ${formatNs(today)}`,
  }
})
const member = nsPerOp(bench.getTask('traceMember alone (part of every variant but the naive one)'))
findings.push({ label: 'building the trace member (traceObject + JSON.stringify)', value: formatNs(member) })
recordSummary(bench, findings)
