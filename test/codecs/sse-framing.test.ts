import t from 'tap'
import { SseFramer } from '../../src/codecs/sse-framing.js'
import { FIXTURES, bytesOf } from './sse-fixtures.js'
import { everyCut, garbage, randomCuts, seeded } from './split.js'

/** An event as a test compares it (strings are latin1, one char per byte). */
interface Seen {
  bytes: string
  dataLines: number
  data: string
  name: string | null
  commentOnly: boolean
  unterminated: boolean
}

/** Frames the parts and finishes; a continuation's byte is put back with the event it belongs to. */
function frame(parts: readonly (Buffer | string)[]): Seen[] {
  const seen: Seen[] = []
  const framer: SseFramer = new SseFramer((source, start, end) => {
    const bytes = source.toString('latin1', start, end)
    if (framer.continuation) {
      seen[seen.length - 1].bytes += bytes
      return
    }
    seen.push({
      bytes,
      dataLines: framer.dataLines,
      data: framer.dataSource.toString('latin1', framer.dataStart, framer.dataEnd),
      name: framer.nameStart < 0 ? null : source.toString('latin1', framer.nameStart, framer.nameEnd),
      commentOnly: framer.commentOnly,
      unterminated: framer.unterminated,
    })
  })
  for (const part of parts) framer.push(typeof part === 'string' ? Buffer.from(part, 'latin1') : part)
  framer.finish()
  return seen
}

/** The WHATWG algorithm written the plain way, over the whole input at once, keeping each event's bytes. */
function reference(input: Buffer): Seen[] {
  const s = input.toString('latin1')
  const seen: Seen[] = []
  let eventStart = 0
  let values: string[] = []
  let name: string | null = null
  let lines = 0
  let comments = 0
  const dispatch = (end: number, unterminated: boolean): void => {
    seen.push({ bytes: s.slice(eventStart, end), dataLines: values.length, data: values.join('\n'), name, commentOnly: lines > 0 && comments === lines, unterminated })
    eventStart = end
    values = []
    name = null
    lines = comments = 0
  }
  const field = (line: string): void => {
    lines++
    if (line.startsWith(':')) {
      comments++
      return
    }
    const colon = line.indexOf(':')
    const key = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (key === 'data') values.push(value)
    else if (key === 'event') name = value
  }
  let i = 0
  while (i < s.length) {
    let j = i
    while (j < s.length && s[j] !== '\r' && s[j] !== '\n') j++
    if (j === s.length) break
    const next = s[j] === '\r' && s[j + 1] === '\n' ? j + 2 : j + 1
    if (j === i) dispatch(next, false)
    else field(s.slice(i, j))
    i = next
  }
  if (i < s.length) field(s.slice(i))
  if (eventStart < s.length) dispatch(s.length, true)
  return seen
}

t.test('LF, CRLF and CR each end lines, and an empty line ends the event', async (t) => {
  for (const eol of ['\n', '\r\n', '\r']) {
    const seen = frame([`data: a${eol}${eol}data: b${eol}${eol}`])
    t.same(
      seen.map((e) => [e.bytes, e.data]),
      [
        [`data: a${eol}${eol}`, 'a'],
        [`data: b${eol}${eol}`, 'b'],
      ],
      JSON.stringify(eol),
    )
  }
})

t.test('mixed line endings in one event', async (t) => {
  const seen = frame(['event: x\rdata: 1\r\ndata: 2\n\r\n'])
  t.same(seen, [{ bytes: 'event: x\rdata: 1\r\ndata: 2\n\r\n', dataLines: 2, data: '1\n2', name: 'x', commentOnly: false, unterminated: false }])
})

t.test('one space after the colon is removed, and only one', async (t) => {
  const seen = frame(['data:a\n\ndata: a\n\ndata:  a\n\ndata:\n\ndata\n\ndata: \n\n'])
  t.same(
    seen.map((e) => [e.dataLines, e.data]),
    [
      [1, 'a'],
      [1, 'a'],
      [1, ' a'],
      [1, ''],
      [1, ''],
      [1, ''],
    ],
  )
})

t.test('a field whose name only starts with "data" or "event" is another field', async (t) => {
  const seen = frame(['datax: 1\ndata : 2\neventx: y\nevents: z\n\n'])
  t.equal(seen[0].dataLines, 0)
  t.equal(seen[0].name, null)
})

t.test('comments: a comment-only event is flagged, a comment among fields is skipped', async (t) => {
  const seen = frame([': ping\n\n:\n: two\n\n: note\ndata: x\n\n'])
  t.same(
    seen.map((e) => [e.commentOnly, e.dataLines, e.data]),
    [
      [true, 0, ''],
      [true, 0, ''],
      [false, 1, 'x'],
    ],
  )
})

t.test('the last event: line gives the name, an empty one gives an empty name', async (t) => {
  const seen = frame(['event: a\nevent:b\ndata: x\n\nevent\ndata: y\n\ndata: z\n\n'])
  t.same(
    seen.map((e) => e.name),
    ['b', '', null],
  )
})

t.test('eventName() reads the name as UTF-8', async (t) => {
  const names: string[] = []
  const framer = new SseFramer(() => {
    names.push(framer.eventName())
  })
  framer.push(Buffer.from('event: message_stop\ndata: {}\n\nevent: ünï\n\ndata: x\n\n'))
  t.same(names, ['message_stop', 'ünï', ''])
})

t.test('multi-line data is joined with LF, a lone data line is read in place', async (t) => {
  const input = Buffer.from('data: {"a":\ndata: 1}\n\ndata: {"b":2}\n\n')
  const seen: [boolean, string][] = []
  const framer: SseFramer = new SseFramer((source) => {
    seen.push([framer.dataSource === source, framer.dataSource.toString('utf8', framer.dataStart, framer.dataEnd)])
  })
  framer.push(input)
  t.same(seen, [
    [false, '{"a":\n1}'],
    [true, '{"b":2}'],
  ])
})

t.test('events within a chunk are ranges of that very chunk, one after another', async (t) => {
  const input = Buffer.from(': ping\n\ndata: a\n\ndata: b\n\n')
  const ranges: [number, number][] = []
  const framer = new SseFramer((source, start, end) => {
    t.equal(source, input)
    ranges.push([start, end])
  })
  framer.push(input)
  t.same(ranges, [
    [0, 8],
    [8, 17],
    [17, 26],
  ])
})

t.test('an event that spans chunks is copied once, and its bytes are never written again', async (t) => {
  const kept: Buffer[] = []
  const framer = new SseFramer((source, start, end) => {
    kept.push(source.subarray(start, end))
  })
  framer.push(Buffer.from('data: hel'))
  t.equal(framer.pendingBytes, 9)
  framer.push(Buffer.from('lo\n'))
  framer.push(Buffer.from('\ndata: wor'))
  t.equal(framer.pendingBytes, 9)
  framer.push(Buffer.from('ld\n\n' + 'data: x'.repeat(300)))
  framer.push(Buffer.from('\n\n'))
  t.same(
    kept.map((b) => b.toString()),
    ['data: hello\n\n', 'data: world\n\n', 'data: x'.repeat(300) + '\n\n'],
  )
  t.equal(framer.pendingBytes, 0)
})

t.test('a CR that ends an event at the end of a chunk hands the event over at once', async (t) => {
  const seen: string[] = []
  const framer: SseFramer = new SseFramer((source, start, end) => {
    seen.push((framer.continuation ? 'continuation ' : '') + JSON.stringify(source.toString('latin1', start, end)))
  })
  framer.push(Buffer.from('data: a\r\n\r'))
  t.same(seen, ['"data: a\\r\\n\\r"'], 'not held back waiting for a possible LF')
  framer.push(Buffer.from('\ndata: b\r\r'))
  t.same(seen.slice(1), ['continuation "\\n"', '"data: b\\r\\r"'], 'the LF that completes the CRLF is marked')
  framer.push(Buffer.from('data: c\r\r'))
  t.same(seen.slice(3), ['"data: c\\r\\r"'], 'a CR followed by anything else is a line ending of its own')
})

t.test('a CRLF split inside an event stays one line ending', async (t) => {
  const seen = frame(['data: a\r', '\n', 'data: b\r', '\n\r', '\n'])
  t.same(seen, [{ bytes: 'data: a\r\ndata: b\r\n\r\n', dataLines: 2, data: 'a\nb', name: null, commentOnly: false, unterminated: false }])
})

t.test('finish hands over an event that lacked its blank line, and its last line if unended', async (t) => {
  t.same(frame(['data: a\n\ndata: b']), [
    { bytes: 'data: a\n\n', dataLines: 1, data: 'a', name: null, commentOnly: false, unterminated: false },
    { bytes: 'data: b', dataLines: 1, data: 'b', name: null, commentOnly: false, unterminated: true },
  ])
  t.same(frame(['data: a\r\ndata: b\r\n'])[0], { bytes: 'data: a\r\ndata: b\r\n', dataLines: 2, data: 'a\nb', name: null, commentOnly: false, unterminated: true })
  t.same(frame(['data: a\n\n']).length, 1, 'nothing more when the stream ended on an event')
})

t.test('stray blank lines are events with no lines', async (t) => {
  t.same(
    frame(['\n\r\n\rdata: a\n\n\n']).map((e) => [e.bytes, e.dataLines, e.commentOnly]),
    [
      ['\n', 0, false],
      ['\r\n', 0, false],
      ['\r', 0, false],
      ['data: a\n\n', 1, false],
      ['\n', 0, false],
    ],
  )
})

for (const fixture of FIXTURES) {
  t.test(`${fixture.name}: the same events as the plain algorithm however the stream is cut`, async (t) => {
    const bytes = bytesOf(fixture)
    const expected = JSON.stringify(reference(bytes))
    t.equal(JSON.stringify(frame([bytes])), expected, 'whole')
    for (const { label, parts } of [...everyCut(bytes), ...randomCuts(bytes, 100, 7)]) {
      const got = JSON.stringify(frame(parts))
      if (got !== expected) {
        t.equal(got, expected, label)
        return
      }
    }
    t.pass('every cut agrees')
  })
}

t.test('random bytes: never a throw, the plain algorithm\'s events, and every byte handed over exactly once', async (t) => {
  const random = seeded(99)
  for (let i = 0; i < 500; i++) {
    const bytes = garbage(random, 1 + Math.floor(random() * 400))
    const expected = JSON.stringify(reference(bytes))
    for (const { label, parts } of randomCuts(bytes, 8, i)) {
      const seen = frame(parts)
      const got = JSON.stringify(seen)
      if (got !== expected || seen.map((e) => e.bytes).join('') !== bytes.toString('latin1')) {
        t.equal(got, expected, `input ${i} (${bytes.toString('base64')}), ${label}`)
        return
      }
    }
  }
  t.pass('500 random streams')
})
