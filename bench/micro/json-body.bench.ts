/**
 * The request body guard (codecs/json-body.ts) that every JSON inference request passes: one byte scan for
 * UTF-8, depth, duplicate and __proto__ keys, plus the JSON.parse the router needs anyway. Measured against the
 * bare JSON.parse it wraps, for a typical 1 KB chat body, a 64 KB one (long context) and one with tools.
 */
import { Bench } from 'tinybench'
import { readJsonBody } from '../../src/codecs/json-body.js'
import { RouterError } from '../../src/errors.js'
import { batched, check, formatNs, nsPerOp, ratio, recordSummary, type Finding } from './measure.js'

function chatBody(contentBytes: number, tools = false): Buffer {
  const words = 'The quick brown fox jumps over the lazy dog. '
  const content = words.repeat(Math.ceil(contentBytes / words.length)).slice(0, contentBytes)
  const body: Record<string, unknown> = {
    model: 'qwen-2.5-7b-instruct',
    messages: [
      { role: 'system', content: 'You are a helpful assistant.' },
      { role: 'user', content },
    ],
    temperature: 0.7,
    max_tokens: 256,
    stream: true,
  }
  if (tools) {
    body.tools = Array.from({ length: 8 }, (_, i) => ({
      type: 'function',
      function: {
        name: `tool_${i}`,
        description: 'Looks something up.',
        parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1 } }, required: ['city'] },
      },
    }))
  }
  return Buffer.from(JSON.stringify(body))
}

const BODIES = [
  { label: '1 KB chat body', body: chatBody(800) },
  { label: '64 KB chat body', body: chatBody(64 * 1024) },
  { label: '3 KB body with 8 tools', body: chatBody(400, true) },
]

for (const { label, body } of BODIES) {
  const read = readJsonBody(body)
  check(!(read instanceof RouterError), `${label} passes the guard`)
  check(JSON.stringify((read as { value: unknown }).value) === body.toString(), `${label} parses to the same object`)
}
check(readJsonBody(Buffer.from('{"a":1,"a":2}')) instanceof RouterError, 'a duplicate key is refused')

const bench = new Bench({ name: 'json-body', time: 500, warmupTime: 100 })
for (const { label, body } of BODIES) {
  const count = body.length > 10_000 ? 20 : 500
  bench.add(`${label}: readJsonBody (guard + parse)`, batched(count, () => readJsonBody(body)))
  bench.add(`${label}: JSON.parse alone`, batched(count, () => JSON.parse(body.toString('utf8'))))
}
await bench.run()
console.table(bench.table())

const findings: Finding[] = BODIES.map(({ label }) => {
  const guarded = nsPerOp(bench.getTask(`${label}: readJsonBody (guard + parse)`))
  const parse = nsPerOp(bench.getTask(`${label}: JSON.parse alone`))
  return { label: `${label}: guard + parse vs parse alone`, value: `${formatNs(guarded)} vs ${formatNs(parse)} (${ratio(guarded, parse)})` }
})
recordSummary(bench, findings)
