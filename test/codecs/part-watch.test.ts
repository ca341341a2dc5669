/**
 * PartWatch (codecs/multipart.ts): every part name of a streamed multipart upload, over the whole body, whatever
 * the chunk boundaries: a repeat of a watched name is reported, other repeats (array fields) are not, and what
 * follows the closing delimiter is not parts.
 */
import t from 'tap'
import { boundaryOf, PartWatch, RequiredParts, VALUE_BYTES } from '../../src/codecs/multipart.js'
import { RouterError } from '../../src/errors.js'

const BOUNDARY = 'b0UND4ry-x'
const TYPE = `multipart/form-data; boundary=${BOUNDARY}`
const WATCHED = new Set(['model', 'n', 'file'])

type Part = [name: string, value: string] | { file: string; bytes: Buffer }

function form(parts: Part[], epilogue = ''): Buffer {
  const out: Buffer[] = [Buffer.from('preamble, ignored\r\n')]
  for (const p of parts) {
    if (Array.isArray(p)) out.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p[0]}"\r\n\r\n${p[1]}\r\n`))
    else {
      out.push(Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="${p.file}"; filename="a.wav"\r\ncontent-type: audio/wav\r\n\r\n`))
      out.push(p.bytes, Buffer.from('\r\n'))
    }
  }
  out.push(Buffer.from(`--${BOUNDARY}--\r\n${epilogue}`))
  return Buffer.concat(out)
}

/** The watch's verdict on `body` pushed in chunks of `size` bytes: the refusal's message, or '' for none. */
function verdict(body: Buffer, size: number): string {
  const watch = PartWatch.of(TYPE, WATCHED)!
  for (let at = 0; at < body.length; at += size) {
    const err = watch.push(body.subarray(at, at + size))
    if (err !== null) return err.message
  }
  return ''
}

const FILE = { file: 'file', bytes: Buffer.alloc(3000, 0x0d) }
const SIZES = [1, 2, 3, 5, 7, 13, 64, 1000, 1 << 20]

t.test('a watched name that comes twice is found at every chunk size, before or after a file', async (t) => {
  const cases: [string, Part[], string][] = [
    ['model then model', [['model', 'a'], ['model', 'b']], 'model'],
    ['model, file, model', [['model', 'a'], FILE, ['model', 'b']], 'model'],
    ['n before and after the file', [['n', '1'], FILE, ['model', 'a'], ['n', '10']], 'n'],
    ['two files', [['model', 'a'], FILE, FILE], 'file'],
  ]
  for (const [label, parts, name] of cases) {
    for (const size of SIZES) t.equal(verdict(form(parts), size), `the multipart field ${name} may appear only once`, `${label}, chunks of ${size}`)
  }
})

t.test('repeats of other names, one of each watched name, and parts after the closing delimiter pass', async (t) => {
  const cases: [string, Buffer][] = [
    ['array fields', form([['model', 'a'], ['timestamp_granularities[]', 'word'], ['timestamp_granularities[]', 'segment'], FILE])],
    ['every watched name once', form([['n', '2'], ['model', 'a'], FILE])],
    ['a look-alike in a value', form([['model', 'a'], ['prompt', `--${BOUNDARY}x`], FILE])],
    ['the epilogue', form([['model', 'a']], `--${BOUNDARY}\r\ncontent-disposition: form-data; name="model"\r\n\r\nb\r\n`)],
  ]
  for (const [label, body] of cases) for (const size of SIZES) t.equal(verdict(body, size), '', `${label}, chunks of ${size}`)
})

t.test('a part head past 16 KiB is refused: a repeat cannot hide behind it', async (t) => {
  const long = Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="model"\r\nx-pad: ${'p'.repeat(20_000)}\r\n\r\na\r\n--${BOUNDARY}--\r\n`),
  ])
  t.match(verdict(long, 4096), /headers exceed 16384 bytes/)
})

t.test('required parts: each met by any of its names, wherever it comes; one missing is named', async (t) => {
  const required = new RequiredParts({ image: ['image', 'image[]'], prompt: ['prompt'] })
  const missing = (body: Buffer, size: number): string | null => {
    const watch = PartWatch.of(TYPE, WATCHED, required)!
    for (let at = 0; at < body.length; at += size) if (watch.push(body.subarray(at, at + size)) !== null) return 'refused'
    return watch.missing()
  }
  const image = { file: 'image', bytes: Buffer.alloc(3000, 0x2d) }
  const many = { file: 'image[]', bytes: Buffer.alloc(3000, 0x0a) }
  const cases: [string, Buffer, string | null][] = [
    ['both', form([['model', 'a'], ['prompt', 'x'], image]), null],
    ['the image last, after a large part', form([['model', 'a'], FILE, ['prompt', 'x'], image]), null],
    ['image[] twice', form([['prompt', 'x'], many, many]), null],
    ['no image', form([['model', 'a'], ['prompt', 'x'], FILE]), 'image'],
    ['no prompt', form([image]), 'prompt'],
    ['neither', form([['model', 'a']]), 'image'],
    ['a look-alike in a value is no part', form([['model', 'a'], ['prompt', `--${BOUNDARY}\r\ncontent-disposition: form-data; name="image"\r\n\r\n`]]), 'image'],
    ['a part after the closing delimiter is no part', form([['prompt', 'x']], `--${BOUNDARY}\r\ncontent-disposition: form-data; name="image"\r\n\r\nb\r\n`), 'image'],
  ]
  for (const [label, body, want] of cases) for (const size of SIZES) t.equal(missing(body, size), want, `${label}, chunks of ${size}`)
  t.equal(PartWatch.of(TYPE, WATCHED)!.missing(), null, 'nothing required')
})

t.test('boundaryOf reads the parameter quoted or not, and only as a parameter', async (t) => {
  t.equal(boundaryOf('multipart/form-data; boundary=abc'), 'abc')
  t.equal(boundaryOf('multipart/form-data; charset=utf-8; BOUNDARY=abc ; x=y'), 'abc')
  t.equal(boundaryOf('multipart/form-data; boundary="a b;c\\"d"'), 'a b;c"d')
  t.equal(boundaryOf('multipart/form-data; xboundary=abc'), null)
  t.equal(boundaryOf('multipart/form-data'), null)
  t.equal(boundaryOf('multipart/form-data; boundary='), null)
})

t.test('values of the valued names are read whole at every chunk size, wherever they come', async (t) => {
  const VALUED = new Set(['n', 'prompt', 'response_format'])
  const values = (body: Buffer, size: number): [string, string | null][] => {
    const watch = PartWatch.of(TYPE, WATCHED)!
    const seen: [string, string | null][] = []
    watch.valued(VALUED, (name, value) => {
      seen.push([name, value])
      return null
    })
    for (let at = 0; at < body.length; at += size) {
      const err = watch.push(body.subarray(at, at + size))
      if (err !== null) seen.push(['refused', err.message])
    }
    return seen
  }
  const long = 'p'.repeat(VALUE_BYTES)
  const cases: [string, Buffer, [string, string | null][]][] = [
    ['before and after a file', form([['n', '2'], ['model', 'a'], FILE, ['prompt', 'a hat'], ['response_format', 'url']]), [['n', '2'], ['prompt', 'a hat'], ['response_format', 'url']]],
    ['an empty value', form([['model', 'a'], FILE, ['prompt', '']]), [['prompt', '']]],
    ['CR and LF inside, and a look-alike of the delimiter', form([['prompt', `a\r\nb\r\n--${BOUNDARY.slice(0, -1)}`], FILE]), [['prompt', `a\r\nb\r\n--${BOUNDARY.slice(0, -1)}`]]],
    ['utf-8', form([['prompt', 'un chapeau rouge, très grand ☂']]), [['prompt', 'un chapeau rouge, très grand ☂']]],
    ['at the most a value may hold', form([['prompt', long]]), [['prompt', long]]],
    ['one byte past it', form([['prompt', long + 'p'], ['n', '3']]), [['prompt', null], ['n', '3']]],
    ['far past it', form([['prompt', 'q'.repeat(70_000)], FILE, ['n', '1']]), [['prompt', null], ['n', '1']]],
    ['not after the closing delimiter', form([['n', '1']], `--${BOUNDARY}\r\ncontent-disposition: form-data; name="n"\r\n\r\n9\r\n`), [['n', '1']]],
  ]
  for (const [label, body, want] of cases) for (const size of SIZES) t.same(values(body, size), want, `${label}, chunks of ${size}`)
})

t.test('a value refused by the listener is the watch\'s answer, and over says when the form ended', async (t) => {
  const watch = PartWatch.of(TYPE, WATCHED)!
  watch.valued(new Set(['n']), (name, value) => (value === '11' ? new RouterError('invalid_request', `${name} is out of range`) : null))
  const body = form([['model', 'a'], FILE, ['n', '11']])
  const end = body.indexOf(`\r\n--${BOUNDARY}--`)
  t.equal(watch.push(body.subarray(0, end)), null, 'the value has not ended yet')
  t.notOk(watch.over)
  t.match(watch.push(body.subarray(end))?.message, /n is out of range/, 'refused in the chunk that ends it')
  const whole = PartWatch.of(TYPE, WATCHED)!
  whole.push(form([['model', 'a']]))
  t.ok(whole.over, 'the closing delimiter passed')
})

t.test('names read from heads seen before stay the head\'s own, past the memory of heads and for long heads', async (t) => {
  // One head per filename (each a new entry), more than the watch keeps: the first are read again once emptied.
  const named = (name: string, file: string): Buffer =>
    Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="${name}"; filename="${file}"\r\n\r\nx\r\n`)
  const misread: number[] = []
  for (let i = 0; i < 1_100; i++) {
    const body = Buffer.concat([Buffer.from('\r\n'), named(i % 2 === 0 ? 'file' : 'other', `f${i}.wav`), named('file', `g${i}.wav`), Buffer.from(`--${BOUNDARY}--\r\n`)])
    const expect = i % 2 === 0 ? 'the multipart field file may appear only once' : ''
    if (verdict(body, 1 << 20) !== expect) misread.push(i)
  }
  t.same(misread, [], 'every upload read its own heads')
  // The same head bytes under two boundaries, and a head too long to be kept (a long filename), read alike.
  const other = 'another-b0undary'
  const head = `content-disposition: form-data; name="model"\r\n\r\n`
  const twice = (b: string, h: string): Buffer => Buffer.from(`--${b}\r\n${h}a\r\n--${b}\r\n${h}b\r\n--${b}--\r\n`)
  const watchOf = (b: string): PartWatch => PartWatch.of(`multipart/form-data; boundary=${b}`, WATCHED)!
  t.equal(watchOf(other).push(twice(other, head))?.message, 'the multipart field model may appear only once')
  t.equal(watchOf(BOUNDARY).push(twice(BOUNDARY, head))?.message, 'the multipart field model may appear only once')
  const long = `content-disposition: form-data; name="model"; filename="${'n'.repeat(2_000)}"\r\n\r\n`
  t.equal(watchOf(BOUNDARY).push(twice(BOUNDARY, long))?.message, 'the multipart field model may appear only once')
  t.equal(watchOf(BOUNDARY).push(twice(BOUNDARY, long.replace('name="model"', 'name="notes"'))), null)
})
