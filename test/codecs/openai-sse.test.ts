import t from 'tap'
import { OpenAiSseCodec } from '../../src/codecs/openai-sse.js'
import { FIXTURES, bytesOf, dataEvents, expectedOutput } from './sse-fixtures.js'
import { everyCut, garbage, randomCuts, seeded } from './split.js'

interface Run {
  readonly out: string
  readonly emits: number
  /** The chat id as the codec reported it when the first byte went out. */
  readonly idAtFirstEmit: string | null
  readonly codec: OpenAiSseCodec
}

function run(parts: readonly (Buffer | string)[], withholdUsage = false): Run {
  const codec = new OpenAiSseCodec(withholdUsage)
  const out: Buffer[] = []
  let idAtFirstEmit: string | null = null
  const emit = (bytes: Buffer): void => {
    if (out.length === 0) idAtFirstEmit = codec.chatId
    out.push(Buffer.from(bytes))
  }
  for (const part of parts) codec.push(typeof part === 'string' ? Buffer.from(part) : part, emit)
  codec.finish(emit)
  return { out: Buffer.concat(out).toString(), emits: out.length, idAtFirstEmit, codec }
}

/** Everything a caller can observe, to compare one way of cutting a stream with another. */
function observed(r: Run): string {
  const c = r.codec
  return JSON.stringify({ out: r.out, chatId: c.chatId, usage: c.usage, sawDone: c.sawDone, events: c.events, bytes: c.forwardedBytes, id: r.idAtFirstEmit })
}

const ID = 'chatcmpl-abc123'
const chunk = (delta: string, extra = ',"usage":null'): string =>
  `data: {"id":"${ID}","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${delta}"},"finish_reason":null}]${extra}}\n\n`
const USAGE = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 }
const USAGE_EVENT = `data: {"id":"${ID}","object":"chat.completion.chunk","choices":[],"usage":${JSON.stringify(USAGE)}}\n\n`

t.test('regression: a provider writing "id": "…" with a space (Python json.dumps) gives its chat id', async (t) => {
  const r = run(['data: {"id": "chatcmpl-py", "object": "chat.completion.chunk", "choices": [], "usage": null}\n\n'])
  t.equal(r.codec.chatId, 'chatcmpl-py')
})

t.test('regression: data:[DONE] without a space is not relayed, so the router trace comes before the only [DONE]', async (t) => {
  for (const done of ['data:[DONE]\n\n', 'data:[DONE]\r\n\r\n']) {
    const r = run([chunk('a') + done])
    t.equal(r.out, chunk('a'), JSON.stringify(done))
    t.ok(r.codec.sawDone)
  }
})

t.test('regression: a CRLF stream whose first chunk is a fragment is forwarded as events complete, not at the end', async (t) => {
  const crlf = (s: string): string => s.replaceAll('\n', '\r\n')
  const codec = new OpenAiSseCodec(false)
  const out: string[] = []
  const emit = (b: Buffer): void => {
    out.push(b.toString())
  }
  const first = crlf(chunk('a'))
  codec.push(Buffer.from(first.slice(0, 10)), emit)
  t.same(out, [], 'nothing complete yet')
  codec.push(Buffer.from(first.slice(10) + crlf(chunk('b')).slice(0, 20)), emit)
  t.same(out, [first], 'the first event goes out once complete')
  codec.push(Buffer.from(crlf(chunk('b')).slice(20) + 'data: [DONE]\r\n\r\n'), emit)
  t.same(out, [first, crlf(chunk('b'))])
  codec.finish(emit)
  t.equal(out.join(''), first + crlf(chunk('b')), 'no [DONE] relayed')
  t.ok(codec.sawDone)
  t.equal(codec.chatId, ID)
})

t.test('regression: a tool call id ahead of the top-level id is not taken for the chat id', async (t) => {
  const r = run([
    'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"f","arguments":""}}]}}],"id":"chatcmpl-top"}\n\n',
  ])
  t.equal(r.codec.chatId, 'chatcmpl-top')
})

t.test('[DONE] in every form is withheld and marks the end', async (t) => {
  const forms = ['data: [DONE]\n\n', 'data:[DONE]\n\n', 'data: [DONE]\r\n\r\n', 'data:[DONE]\r\n\r\n', 'data: [DONE]\r\r', 'data: [DONE]   \n\n', 'data: [DONE]\t\r\n\r\n', 'data: [DONE]\r\n\n']
  for (const done of forms) {
    const body = Buffer.from(chunk('a') + done)
    const whole = run([body])
    t.equal(whole.out, chunk('a'), JSON.stringify(done))
    t.ok(whole.codec.sawDone, JSON.stringify(done))
    t.equal(whole.codec.events, 1, 'events exclude [DONE]')
    for (const { label, parts } of everyCut(body)) {
      const r = run(parts)
      if (r.out !== chunk('a') || !r.codec.sawDone) t.fail(`${JSON.stringify(done)} ${label}: ${JSON.stringify(r.out)}`)
    }
  }
})

t.test('an unterminated [DONE] at the end of the body still counts and is not relayed', async (t) => {
  for (const done of ['data: [DONE]', 'data:[DONE]', 'data: [DONE]\n', 'data: [DONE]\r', 'data: [DONE] \r\n']) {
    const r = run([chunk('a') + done])
    t.equal(r.out, chunk('a'), JSON.stringify(done))
    t.ok(r.codec.sawDone)
  }
})

t.test('nothing after the provider\'s [DONE] is relayed or read, whatever read it comes in', async (t) => {
  const r = run([chunk('a') + 'data: [DONE]\n\n' + ': bye\n\n' + chunk('extra') + 'data: {"id":"x","choices":[],"usage":{"prompt_tokens":999999,"completion_tokens":999999}}\n\n'])
  t.equal(r.out, chunk('a'), 'the events after it, in the same read, are dropped')
  t.ok(r.codec.sawDone)
  t.equal(r.codec.usage, null, 'a usage chunk after it is not read')
  t.equal(r.codec.events, 1)
  const split = run([chunk('a') + 'data: [DONE]\n\n', chunk('extra') + USAGE_EVENT])
  t.equal(split.out, chunk('a'), 'nor in a later read')
  t.equal(split.codec.usage, null)
})

t.test('content that merely mentions [DONE] is relayed; a payload that only looks like it is no end, and no chunk', async (t) => {
  const body = chunk('[DONE]') + 'data: [DONE] now\n\n' + 'data: [done]\n\n'
  const r = run([body])
  t.equal(r.out, chunk('[DONE]'))
  t.notOk(r.codec.sawDone)
  t.equal(r.codec.events, 1)
  t.ok(r.codec.sawError, 'neither a chunk nor the end: the provider failed')
})

t.test('comments before the first data event are held and go out with it, once the chat id is known', async (t) => {
  const codec = new OpenAiSseCodec(false)
  const out: Buffer[] = []
  let idAtFirstEmit = ''
  const emit = (b: Buffer): void => {
    if (out.length === 0) idAtFirstEmit = codec.chatId
    out.push(Buffer.from(b))
  }
  codec.push(Buffer.from(': ping\n\n'), emit)
  codec.push(Buffer.from('event: open\n\n: ping\n\n'), emit)
  t.equal(out.length, 0, 'nothing before the first data event')
  t.equal(codec.bufferedBytes, 29, 'held bytes are reported')
  codec.push(Buffer.from(chunk('a')), emit)
  t.equal(idAtFirstEmit, ID)
  t.equal(Buffer.concat(out).toString(), ': ping\n\nevent: open\n\n: ping\n\n' + chunk('a'))
  t.equal(codec.bufferedBytes, 0)
  codec.push(Buffer.from(': ping\n\n' + chunk('b')), emit)
  t.equal(Buffer.concat(out).toString(), ': ping\n\nevent: open\n\n: ping\n\n' + chunk('a') + ': ping\n\n' + chunk('b'), 'later comments are relayed in place')
})

t.test('comments and the first data event in one chunk go out as that chunk', async (t) => {
  const input = Buffer.from(': ping\n\n' + chunk('a'))
  const seen: Buffer[] = []
  new OpenAiSseCodec(false).push(input, (b) => seen.push(b))
  t.equal(seen.length, 1)
  t.equal(seen[0], input, 'the very same Buffer')
})

t.test('a stream of comments only is relayed at the end', async (t) => {
  const r = run([': ping\n\n', ': ping\n\n'])
  t.equal(r.out, ': ping\n\n: ping\n\n')
  t.equal(r.codec.events, 0)
})

t.test('the usage-only chunk is withheld when the router asked for usage on the client\'s behalf', async (t) => {
  const body = chunk('a') + USAGE_EVENT + 'data: [DONE]\n\n'
  const withheld = run([body], true)
  t.equal(withheld.out, chunk('a'))
  t.same(withheld.codec.usage, USAGE, 'usage is still read for billing')
  t.equal(withheld.codec.events, 2, 'a withheld event is counted')
  const forwarded = run([body], false)
  t.equal(forwarded.out, chunk('a') + USAGE_EVENT)
  t.same(forwarded.codec.usage, USAGE)
})

t.test('usage inside a content chunk is read but never withheld', async (t) => {
  const body = chunk('x', `,"usage":${JSON.stringify(USAGE)}`)
  const r = run([body], true)
  t.equal(r.out, body)
  t.same(r.codec.usage, USAGE)
})

t.test('the last non-null usage wins; a later "usage": null does not clear it', async (t) => {
  const second = { prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 }
  const body = USAGE_EVENT + chunk('x', `, "usage" : ${JSON.stringify(second)}`) + chunk('y')
  const r = run([body])
  t.same(r.codec.usage, second)
})

t.test('an event ending in "usage":null reads as JSON.parse reads it, whatever comes before', async (t) => {
  const duplicate = run([`data: {"id":"${ID}","usage":${JSON.stringify(USAGE)},"choices":[],"usage":null}\n\n`], true)
  t.equal(duplicate.codec.usage, null, 'the last of duplicate keys wins, as in JSON.parse')
  t.equal(duplicate.codec.events, 1)
  t.not(duplicate.out, '', 'so it is no usage chunk and is forwarded')
  const escapedKey = run([`data: {"id":"${ID}","usage":${JSON.stringify(USAGE)},"my\\"usage": null }\n\n`])
  t.same(escapedKey.codec.usage, USAGE, 'a key that merely ends in usage" is not the usage member')
  const spaced = run([`data: {"id": "${ID}", "choices": [], "usage" : null }  \n\n`], true)
  t.equal(spaced.codec.usage, null)
})

t.test('usage: null chunks are not parsed: only the first data event (for the id) and the usage event are', async (t) => {
  const parse = JSON.parse
  let calls = 0
  JSON.parse = function counted(this: unknown, text: string, reviver?: (key: string, value: unknown) => unknown): unknown {
    calls++
    return parse.call(JSON, text, reviver)
  } as typeof JSON.parse
  try {
    const body = Array.from({ length: 50 }, (_, i) => chunk(`t${i}`)).join('') + chunk('x', ', "usage" :null') + USAGE_EVENT + 'data: [DONE]\n\n'
    const r = run([body])
    t.equal(r.codec.chatId, ID)
    t.same(r.codec.usage, USAGE)
    t.equal(calls, 2)
  } finally {
    JSON.parse = parse
  }
})

t.test('escaped "usage" text inside content is not taken for usage', async (t) => {
  const tricky = chunk('he said \\"usage\\":{\\"x\\":1}') + 'data: [DONE]\n\n'
  const r = run([tricky], true)
  t.equal(r.out, tricky.slice(0, -'data: [DONE]\n\n'.length))
  t.equal(r.codec.usage, null)
})

t.test('the chat id is the first data event that is a JSON object with a string id', async (t) => {
  const later = run([': ping\n\n', 'data: {"object":"chat.completion.chunk","choices":[]}\n\n', 'data: not json\n\n', 'data: [1,2]\n\n', chunk('a'), 'data: {"id":"chatcmpl-other"}\n\n'])
  t.equal(later.codec.chatId, ID, 'found in a later event when the first ones have none')
  t.equal(later.idAtFirstEmit, '', 'the first emit does not wait for it')
  const numeric = run(['data: {"id":12345}\n\n', 'data: {"id":"chatcmpl-str"}\n\n'])
  t.equal(numeric.codec.chatId, 'chatcmpl-str', 'a non-string id is no id')
})

t.test('the chat id is looked for in the first 16 data events only', async (t) => {
  const parse = JSON.parse
  let calls = 0
  JSON.parse = function counted(this: unknown, text: string, reviver?: (key: string, value: unknown) => unknown): unknown {
    calls++
    return parse.call(JSON, text, reviver)
  } as typeof JSON.parse
  try {
    const unusable = (i: number): string => `data: {"id":"","choices":[{"index":0,"delta":{"content":"${i}"}}]}\n\n`
    const r = run([Array.from({ length: 40 }, (_, i) => unusable(i)).join('') + chunk('late')])
    t.equal(calls, 16, 'a provider sending "id":"" on every chunk costs 16 parses, not one per chunk')
    t.equal(r.codec.chatId, '')
    t.equal(run([Array.from({ length: 15 }, (_, i) => unusable(i)).join('') + chunk('16th')]).codec.chatId, ID)
  } finally {
    JSON.parse = parse
  }
})

t.test('an id that could not go in a header is ignored', async (t) => {
  for (const bad of ['chat\\r\\nSet-Cookie: x=1', 'has space', '', 'ü-id', 'x'.repeat(257)]) {
    const r = run([`data: {"id":"${bad}"}\n\n`, chunk('a')])
    t.equal(r.codec.chatId, ID, JSON.stringify(bad))
  }
})

t.test('an event that lacked its blank line at the end of the body is relayed and terminated', async (t) => {
  const cases: [string, string][] = [
    ['data: {"id":"chatcmpl-end"}', '\n\n'],
    ['data: {"id":"chatcmpl-end"}\n', '\n'],
    ['data: {"id":"chatcmpl-end"}\r\n', '\n'],
    ['data: {"id":"chatcmpl-end"}\r', '\n\n'],
    [': trailing comment', '\n\n'],
  ]
  for (const [tail, terminator] of cases) {
    const r = run([chunk('a') + tail])
    t.equal(r.out, chunk('a') + tail + terminator, JSON.stringify(tail))
    t.notOk(r.codec.sawDone)
  }
  const usageTail = run([chunk('a') + USAGE_EVENT.trimEnd()], true)
  t.equal(usageTail.out, chunk('a'), 'a trailing withheld usage chunk gets no terminator')
  t.same(usageTail.codec.usage, USAGE)
})

t.test('multi-line data is joined with LF and parsed', async (t) => {
  const body = 'data: {"id":"chatcmpl-ml",\ndata: "choices":[],\ndata: "usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}\n\n'
  const r = run([body], true)
  t.equal(r.codec.chatId, 'chatcmpl-ml')
  t.same(r.codec.usage, { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 })
  t.equal(r.out, '', 'a usage-only chunk split over lines is withheld too')
})

t.test('a payload that is not a JSON object is dropped and fails the stream; a blank one is only dropped', async (t) => {
  for (const bad of ['{"id":"chatcmpl-x","usage":{"prompt_tokens":1', 'not json', '[1,2]', '"text"', '\u0000\u0001garbage', '{"a":1}x']) {
    const r = run([chunk('a') + `data: ${bad}\n\n` + chunk('b')])
    t.equal(r.out, chunk('a') + chunk('b'), `${JSON.stringify(bad)} is not relayed`)
    t.equal(r.codec.usage, null)
    t.equal(r.codec.events, 2)
    t.ok(r.codec.sawError, `${JSON.stringify(bad)} fails the stream`)
    t.notOk(r.codec.failed, 'after a chunk: the stream began')
  }
  const blank = run(['data: \n\ndata\n\ndata:\t \n\n' + chunk('a')])
  t.equal(blank.out, chunk('a'))
  t.equal(blank.codec.chatId, ID)
  t.equal(blank.codec.events, 1)
  t.notOk(blank.codec.sawError, 'a blank payload is no failure')
  const padded = run(['data:  \t{"id":"chatcmpl-p","choices":[]} \t\n\n' + chunk('a')])
  t.equal(padded.codec.events, 2, 'JSON whitespace around the object is allowed')
  t.notOk(padded.codec.sawError)
})

t.test('an error object or a payload that is not one as the first data event fails the stream before it began', async (t) => {
  for (const first of ['{"error":{"message":"overloaded","code":503}}', 'not json', '{"choices":[{"delta":{"content":"x"}]]']) {
    const r = run([': ping\n\n' + `data: ${first}\n\n`, chunk('a') + USAGE_EVENT + 'data: [DONE]\n\n'])
    t.equal(r.out, '', `${JSON.stringify(first)}: nothing is relayed, not even the comment before it`)
    t.ok(r.codec.failed, 'failed before it began')
    t.ok(r.codec.sawError)
    t.equal(r.codec.events, 0, 'nothing after it is read')
    t.equal(r.codec.usage, null)
  }
  const doneFirst = run([': ping\n\ndata: [DONE]\n\n'])
  t.equal(doneFirst.out, '', '[DONE] before any chunk: nothing relayed')
  t.ok(doneFirst.codec.failed, 'no answer at all')
  t.notOk(doneFirst.codec.sawDone, 'not an answer that ended')
  t.notOk(doneFirst.codec.sawError, 'no error either: a stream that ended empty')
  const late = run([chunk('a') + 'data: {"error":{"message":"overloaded"}}\n\n'])
  t.equal(late.out, chunk('a') + 'data: {"error":{"message":"overloaded"}}\n\n', 'after a chunk, an error object is relayed as before')
  t.ok(late.codec.sawError)
  t.notOk(late.codec.failed)
})

t.test('LF, CRLF, CR and mixed line endings relay the same events', async (t) => {
  const events = [chunk('a'), ': ping\n\n', USAGE_EVENT, 'data: [DONE]\n\n']
  const endings: Record<string, readonly string[]> = {
    LF: ['\n'],
    CRLF: ['\r\n'],
    CR: ['\r'],
    mixed: ['\r\n', '\r', '\n', '\r'],
  }
  for (const [name, eols] of Object.entries(endings)) {
    const ended = events.map((e, i) => e.replaceAll('\n', eols[i % eols.length]))
    const r = run([ended.join('')], true)
    t.equal(r.out, ended[0] + ended[1], name)
    t.equal(r.codec.chatId, ID, name)
    t.same(r.codec.usage, USAGE, name)
    t.ok(r.codec.sawDone, name)
  }
})

t.test('several events in one chunk go out in one emit, as the same Buffer', async (t) => {
  const input = Buffer.from(chunk('a') + chunk('b') + chunk('c'))
  const seen: Buffer[] = []
  const codec = new OpenAiSseCodec(false)
  codec.push(input, (b) => seen.push(b))
  t.equal(seen.length, 1)
  t.equal(seen[0], input)
  t.equal(codec.events, 3)
  t.equal(codec.forwardedBytes, input.length)
})

t.test('a chunk ending mid-event forwards its complete events as a subarray and keeps the rest', async (t) => {
  const whole = chunk('a') + chunk('b')
  const input = Buffer.from(whole + chunk('c').slice(0, 30))
  const seen: Buffer[] = []
  const codec = new OpenAiSseCodec(false)
  codec.push(input, (b) => seen.push(b))
  t.equal(seen.length, 1)
  t.equal(seen[0].buffer, input.buffer, 'no copy')
  t.equal(seen[0].toString(), whole)
  t.equal(codec.bufferedBytes, 30)
})

t.test('events around a withheld one go out as two subarrays', async (t) => {
  const input = Buffer.from(chunk('a') + USAGE_EVENT + ': after\n\n')
  const seen: string[] = []
  new OpenAiSseCodec(true).push(input, (b) => seen.push(b.toString()))
  t.same(seen, [chunk('a'), ': after\n\n'])
})

for (const fixture of FIXTURES) {
  t.test(`${fixture.name}: the same output, id, usage, end and counts however the stream is cut`, async (t) => {
    const bytes = bytesOf(fixture)
    for (const withhold of [false, true]) {
      const whole = run([bytes], withhold)
      t.equal(whole.out, expectedOutput(fixture, withhold), `withhold=${withhold}: the output`)
      t.equal(whole.codec.chatId, fixture.chatId)
      t.equal(whole.idAtFirstEmit, fixture.chatId, 'the chat id is known at the first emit')
      t.same(whole.codec.usage, fixture.usage)
      t.ok(whole.codec.sawDone)
      t.equal(whole.codec.events, dataEvents(fixture))
      t.equal(whole.codec.forwardedBytes, Buffer.byteLength(whole.out))
      const reference = observed(whole)
      let cuts = 0
      for (const { label, parts } of [...everyCut(bytes), ...randomCuts(bytes, 200, bytes.length)]) {
        cuts++
        const got = observed(run(parts, withhold))
        if (got !== reference) {
          t.equal(got, reference, `withhold=${withhold}, ${label}`)
          return
        }
      }
      t.pass(`withhold=${withhold}: ${cuts} ways of cutting ${bytes.length} bytes agree`)
    }
  })
}

t.test('random bytes never throw, and however they are cut the result is the same', async (t) => {
  const random = seeded(20241122)
  for (let i = 0; i < 300; i++) {
    const bytes = garbage(random, 1 + Math.floor(random() * 600))
    const withhold = random() < 0.5
    const reference = observed(run([bytes], withhold))
    for (const { label, parts } of randomCuts(bytes, 10, i)) {
      const got = observed(run(parts, withhold))
      if (got !== reference) {
        t.equal(got, reference, `input ${i} (${bytes.toString('base64')}), ${label}`)
        return
      }
    }
  }
  t.pass('300 random streams')
})

t.test('sawFinish: a string finish_reason in one of the last two data events, however the stream was cut', async (t) => {
  const finish = (reason: string, spacing = ''): string =>
    `data: {"id":"${ID}","choices":[{"index":0,"delta":{},"finish_reason":${spacing}"${reason}"}]}\n\n`
  const cases: [string, string[], boolean][] = [
    ['content only', [chunk('a'), chunk('b')], false],
    ['the finish chunk last', [chunk('a'), finish('stop')], true],
    ['the usage chunk after it', [chunk('a'), finish('length'), USAGE_EVENT], true],
    ['Python spacing', [chunk('a'), `data: {"id": "${ID}", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n`], true],
    ['content after the finish chunk, twice', [finish('stop'), chunk('a'), chunk('b')], false],
    ['the key inside content text (escaped)', [`data: {"choices":[{"delta":{"content":"\\"finish_reason\\":\\"stop\\""},"finish_reason":null}]}\n\n`], false],
    ['a finish chunk over two data lines (the framer scratch), then the usage chunk', [`data: {"id":"${ID}","choices":[{"index":0,\ndata: "delta":{},"finish_reason":"stop"}]}\n\n`, USAGE_EVENT], true],
    ['no data event at all', [': ping\n\n'], false],
  ]
  for (const [label, parts, expected] of cases) {
    t.equal(run(parts).codec.sawFinish, expected, label)
    // Cut at every byte: the answer does not depend on how TCP delivered it.
    const whole = parts.join('')
    let same = true
    for (let cut = 1; cut < whole.length; cut++) {
      if (run([whole.slice(0, cut), whole.slice(cut)]).codec.sawFinish !== expected) same = false
    }
    t.ok(same, `${label}: at every cut`)
  }
})

t.test('sawError: a data event whose payload opens with an "error" key, and only that', async (t) => {
  const cases: [string, string[], boolean][] = [
    ['content only', [chunk('a')], false],
    ['an error object', [chunk('a'), 'data: {"error":{"message":"x","type":"server_error"}}\n\n'], true],
    ['spaced', ['data:  { "error" : {"message":"x"}}\n\n'], true],
    ['an error key that is not first', ['data: {"id":"x","error":null,"choices":[]}\n\n'], false],
    ['"error" in content text', [chunk('{\\"error\\":1}')], false],
    ['finish_reason "error" (OpenRouter)', [chunk('a'), `data: {"id":"x","error":{"message":"x"},"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}\n\n`], true],
    ['finish_reason "error" then the usage chunk', [`data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason": "error"}]}\n\n`, USAGE_EVENT], true],
    ['finish_reason "stop"', [chunk('a'), `data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`], false],
  ]
  for (const [label, parts, expected] of cases) t.equal(run(parts).codec.sawError, expected, label)
})

t.test('content events: a role-only first chunk and an empty-delta finish chunk are not tokens, wherever they are', async (t) => {
  const ev = (delta: string, finish = 'null'): string => `data: {"id":"${ID}","object":"chat.completion.chunk","choices":[{"index":0,"delta":${delta},"finish_reason":${finish}}]}\n\n`
  const standard = run([ev('{"role":"assistant","content":""}'), ev('{"content":"a"}'), ev('{"content":"b"}'), ev('{"content":"c"}'), ev('{}', '"stop"'), 'data: [DONE]\n\n'])
  t.equal(standard.codec.contentEvents, 3, 'OpenAI: role chunk, three contents, finish chunk')
  const merged = run([ev('{"role":"assistant","content":"a"}'), ev('{"content":"b"}'), ev('{"content":"c"}'), ev('{"content":"d"}'), ev('{"content":"e"}')])
  t.equal(merged.codec.contentEvents, 5, 'role with the first content, no finish (a stream cut short): five')
  const finishWithContent = run([ev('{"role":"assistant","content":"a"}'), ev('{"content":"b"}', '"stop"')])
  t.equal(finishWithContent.codec.contentEvents, 2, 'the finish rides the last content')
  const python = run([
    `data: {"id": "${ID}", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}\n\n`,
    `data: {"id": "${ID}", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}\n\n`,
    `data: {"id": "${ID}", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n`,
  ])
  t.equal(python.codec.contentEvents, 1, 'the same with Python json.dumps spacing')
  const tool = run([ev('{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}'), ev('{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}')])
  t.equal(tool.codec.contentEvents, 2, 'a first chunk that opens a tool call is content')
})
