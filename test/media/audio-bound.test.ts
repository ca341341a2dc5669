/**
 * The reservation of a transcription bounds the audio before it is heard, and the bill is capped at it, so the
 * bound must not be something the client states freely: a WAV whose byte-rate field or `data` size is written
 * to make the file seem short is still billed for what the provider heard.
 */
import { Readable } from 'node:stream'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { audioRate } from '../../src/codecs/audio-duration.js'
import { fakeProvider, type FakeHandler } from '../helpers/fake-provider.js'
import { addr, startStack, type Stack } from '../helpers/stack.js'
import { atto, AUDIO_MODEL, mp3, wav } from './fixtures.js'

const BOUNDARY = 'svc-audio-bound'

function upload(file: Buffer): Buffer {
  return Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${AUDIO_MODEL}\r\n`),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    file,
    Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
  ])
}

/** A 60-second 16 kHz 16-bit WAV with one header field overwritten. */
function forged(offset: number, value: number): Buffer {
  const b = wav(60)
  b.writeUInt32LE(value, offset)
  return b
}

/** A router whose one speech-to-text provider (0.01 USD a second) answers every upload as `respond` does. */
async function routerWith(t: Test, respond: FakeHandler): Promise<Stack> {
  const provider = await fakeProvider(t, respond)
  return startStack(t, [
    { address: addr('a'), url: provider.url, models: [{ id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.01' } }] },
  ])
}

/** routerWith a provider that says it heard `seconds` of every upload. */
function hearing(t: Test, seconds: number): Promise<Stack> {
  return routerWith(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ text: 'hello', usage: { type: 'duration', seconds } }))
  })
}

/** A transcription of `body` (a form of upload()) with `auth`. */
async function transcribe(stack: Stack, auth: Record<string, string>, body: Buffer | Readable): Promise<{ status: number; body: any }> {
  const res = await request(stack.url + '/v1/audio/transcriptions', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...auth },
    body,
  })
  return { status: res.statusCode, body: await res.body.json() }
}

t.test('audioRate: a byte-rate field larger than the audio it describes is not believed', async (t) => {
  t.equal(audioRate(wav(1))!.bytesPerSecond, 32_000)
  t.equal(audioRate(forged(28, 0xffffffff))!.bytesPerSecond, 32_000, 'sample rate × block align')
  const noAlign = wav(1)
  noAlign.writeUInt32LE(0xffffffff, 28)
  noAlign.writeUInt16LE(0, 32)
  t.equal(audioRate(noAlign)!.bytesPerSecond, 32_000, 'sample rate × channels × bytes per sample, for PCM')
  t.equal(audioRate(mp3(1))!.slowestBytesPerSecond, 4_000, 'an MPEG-1 MP3 may drop to 32 kbit/s after its first frame')
  // A-law, 16 kHz mono 8-bit, with its byte-rate and block-align fields written as large as they go.
  const alaw = wav(1)
  alaw.writeUInt16LE(6, 20)
  alaw.writeUInt32LE(0xffffffff, 28)
  alaw.writeUInt16LE(0xffff, 32)
  alaw.writeUInt16LE(8, 34)
  t.equal(audioRate(alaw)!.slowestBytesPerSecond, 16_000, 'A-law: sample rate × channels × 1 byte')
  const adpcm = wav(1)
  adpcm.writeUInt16LE(0x11, 20)
  adpcm.writeUInt16LE(4, 34)
  t.equal(audioRate(adpcm)!.bytesPerSecond, 8_000, 'IMA ADPCM: 4 bits a sample')
  t.equal(audioRate(adpcm)!.slowestBytesPerSecond, 1_000, 'a packed coding bounds nothing: 8 kbit/s')
})

t.test('a WAV written to seem short is billed for the 60 s its provider heard', async (t) => {
  // A provider that decodes the whole upload, as a decoder reading to the end of the file does: 60 s each time.
  const stack = await hearing(t, 60)
  const cases: [string, Buffer][] = [
    ['honest', wav(60)],
    ['byte-rate field 0xFFFFFFFF', forged(28, 0xffffffff)],
    ['data size 2', forged(40, 2)],
    ['data size 2, sent chunked', forged(40, 2)],
  ]
  for (const [what, file] of cases) {
    const { status, body } = await transcribe(stack, stack.auth, what.endsWith('chunked') ? Readable.from([upload(file)]) : upload(file))
    t.equal(status, 200, what)
    t.same(body.x_svc_trace.usage, { seconds: 60 }, `${what}: the provider's 60 s`)
    t.equal(body.x_svc_trace.billing.total_cost, '0.6', `${what}: 60 s × 0.01, not capped at the forged header's length`)
    t.notOk(body.x_svc_trace.billing.capped, `${what}: not capped`)
  }
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})

t.test('a small file sent without a Content-Length is held for what it is, not for the largest upload', async (t) => {
  const stack = await hearing(t, 0.125)
  // Five 128 kbit/s frames: 0.13 s. 1 USD: 100 s of audio at this price. A 2 KB MP3 bounded by the largest
  // upload (100 MiB at 32 kbit/s) would need 262 USD held.
  const capped = await stack.newApiKey({ creditLimit: atto('1') })
  const file = mp3(5)
  for (const [what, body] of [
    ['chunked', () => Readable.from([upload(file)])],
    ['with a Content-Length', () => upload(file)],
  ] as const) {
    const out = await transcribe(stack, capped.auth, body())
    t.equal(out.status, 200, `${what}: ${JSON.stringify(out.body.error ?? '')}`)
    t.equal(out.body.x_svc_trace?.billing.total_cost, '0.00125', `${what}: the 0.125 s heard, billed`)
  }
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})

t.test('a provider that reports no duration: a data size written far below what was sent is not believed', async (t) => {
  const stack = await routerWith(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/vtt' })
    res.end('WEBVTT\n\n00:00.000 --> 00:01.000\nhello\n')
  })
  const vtt = (file: Buffer): Buffer =>
    Buffer.concat([Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="response_format"\r\n\r\nvtt\r\n`), upload(file)])
  for (const [what, file] of [
    ['honest', wav(60)],
    ['data size 2', forged(40, 2)],
  ] as const) {
    const res = await request(stack.url + '/v1/audio/transcriptions', {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth },
      body: vtt(file),
    })
    await res.body.text()
    t.equal(res.statusCode, 200, what)
    const trace = JSON.parse(String(res.headers['x-svc-trace']))
    t.equal(trace.usage.estimated, true, `${what}: estimated from the header`)
    t.ok(trace.usage.seconds >= 60 && trace.usage.seconds < 60.05, `${what}: about 60 s (got ${trace.usage.seconds})`)
  }
})
