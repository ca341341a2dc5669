/**
 * The byte search that decides whether a provider's payload is parsed for a trace of its own (foreign-trace.ts):
 * it flags every spelling a JSON reader decodes to `x_svc_trace`, and leaves ordinary chunks (escaped text
 * included) to the byte-for-byte relay. And the chat SSE codec relays an ordinary chunk as the same bytes.
 */
import t from 'tap'
import { cleanJson, mayHoldTrace, stripTraces, TraceFinder } from '../../src/codecs/foreign-trace.js'
import { OpenAiSseCodec } from '../../src/codecs/openai-sse.js'

const CHUNK = '{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}'

t.test('every spelling of the name is flagged, and what it flags parses to the name', async (t) => {
  const names = ['x_svc_trace', 'x_svc\\u005ftrace', 'x_svc\\u005Ftrace', '\\u0078_svc_trace', 'x_\\u0073vc_trace', 'x_svc_tr\\u0061ce', 'x_sv\\u0063_trace', 'x_s\\u0076c_trac\\u0065', 'x_svc_t\\u0072ace']
  for (const name of names) {
    const text = `{"a":1,"${name}":{"provider":"0xf"}}`
    t.ok(mayHoldTrace(Buffer.from(text)), `${name} is flagged`)
    t.ok(Object.hasOwn(JSON.parse(text), 'x_svc_trace'), `${name} is the trace to a JSON reader`)
    const cleaned = cleanJson(Buffer.from(text))
    t.same(cleaned.kind === 'changed' ? JSON.parse(cleaned.text) : null, { a: 1 }, `${name} is removed`)
  }
  t.ok(mayHoldTrace(Buffer.from(`{"x_svc\\x5ftrace":1}`)), 'a JavaScript escape is flagged')
  t.equal(cleanJson(Buffer.from(`{"x_svc\\x5ftrace":1}`)).kind, 'invalid', 'and, not being JSON, is not relayed')
})

t.test('ordinary chunks are not flagged: escaped text, non-ASCII, HTML escapes', async (t) => {
  for (const content of ['hello', 'line\\nbreak \\"quoted\\" \\\\ back', 'caf\\u00e9 \\u4f60\\u597d', '\\u003cb\\u003e \\u0026', 'x_svc trace', 'tab\\t', '']) {
    t.notOk(mayHoldTrace(Buffer.from(CHUNK.replace('%s', content))), JSON.stringify(content))
  }
  // The name as text inside a string is flagged (a search cannot tell), parsed, and left as it was.
  const inText = Buffer.from(CHUNK.replace('%s', 'x_svc_trace'))
  t.ok(mayHoldTrace(inText))
  t.equal(cleanJson(inText).kind, 'same', 'the name inside a string is content, not a member')
})

t.test('members go at any depth; tool arguments (strings) stay', async (t) => {
  const value = { a: [{ x_svc_trace: 1, b: { x_svc_trace: 2, c: 'x_svc_trace' } }], x_svc_trace: 3, args: '{"x_svc_trace":4}' }
  t.ok(stripTraces(value))
  t.same(value, { a: [{ b: { c: 'x_svc_trace' } }], args: '{"x_svc_trace":4}' })
  t.notOk(stripTraces(value), 'nothing left to remove')
  let deep: unknown = { x_svc_trace: 0 }
  for (let i = 0; i < 100_000; i++) deep = [deep]
  t.ok(stripTraces(deep), 'a deep nest costs no stack')
})

t.test('the finder over the events of one chunk agrees with the search per range', async (t) => {
  const events = ['{"a":1}', '{"x_svc_trace":1}', '{"b":"\\u00e9"}', '{"x\\u005fsvc_trace":2}', '{"c":3}']
  const src = Buffer.from(events.join('\n'))
  const finder = new TraceFinder()
  let from = 0
  for (const e of events) {
    const to = from + e.length
    t.equal(finder.test(src, from, to, true), mayHoldTrace(src, from, to), e)
    t.equal(finder.test(src, from, to, true), e.includes('svc'), `${e}: flagged only where the name is`)
    from = to + 1
  }
})

t.test('the chat stream relays an ordinary chunk as the same bytes, and rewrites only the forged one', async (t) => {
  const codec = new OpenAiSseCodec(true)
  const plain = `data: ${CHUNK.replace('%s', 'caf\\u00e9')}\n\n`
  const forged = `data: {"id":"c","choices":[],"x_svc\\u005ftrace":{"provider":"0xf"}}\n\n`
  const out: Buffer[] = []
  const input = Buffer.from(plain + forged + plain)
  codec.push(input, (b) => out.push(b))
  const text = Buffer.concat(out).toString()
  t.equal(text, plain + 'data: {"id":"c","choices":[]}\n\n' + plain)
  t.equal(out[0]!.buffer, input.buffer, 'the first chunk is a view of the provider\'s bytes, not a copy')
})

t.test('a first chunk that may spell the trace and is not JSON fails the stream before it began', async (t) => {
  const codec = new OpenAiSseCodec(true)
  const out: Buffer[] = []
  codec.push(Buffer.from(': keep-alive\n\ndata: {"x_svc\\u005ftrace":{"provider":"0xf"},}\n\ndata: {"id":"c","choices":[]}\n\n'), (b) => out.push(b))
  codec.finish((b) => out.push(b))
  t.equal(Buffer.concat(out).toString(), '', 'nothing relayed, the comment before it neither')
  t.ok(codec.failed, 'a miss the next candidate answers')
  t.ok(codec.sawError)
  t.equal(codec.events, 0)
})
