/**
 * Uploads streamed through pooled memory (src/upstream/chunk-pool.ts), through the real router to real http
 * providers that hash what they receive: many uploads at once in chunks of every size, to a provider that reads
 * slowly (so the router's socket writes queue while the pool reuses memory), past the replay buffer and inside
 * it, a failover that sends the upload again, and clients that leave mid-upload. Every provider must receive
 * exactly the bytes the client sent, and every hold on the pool must be given back.
 */
import { createHash, randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { SLAB_BYTES, uploadChunks } from '../../src/upstream/chunk-pool.js'
import { startStack, type Stack, type TestModel, type TestProvider } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'
import { A, AUDIO_MODEL, B, PRICE_SORT, wav } from './fixtures.js'

const BOUNDARY = 'svc-pool-boundary'
const MIB = 1024 * 1024

interface Behaviour {
  /** Milliseconds between two reads of the request body (a slow reader). */
  readonly pauseMs?: number
  /** Reset the connection after this many bytes of body. */
  readonly resetAfter?: number
  /** Stop reading for `stallMs` once this many bytes came (the router's writes then queue in its socket). */
  readonly stallAfter?: number
  readonly stallMs?: number
  /** Answer this status as soon as the request head arrives, reading none of the body. */
  readonly answerAtOnce?: number
  /** With answerAtOnce: close the connection after the answer (unread upload bytes turn the close into a reset). */
  readonly closeAfterAnswer?: boolean
  /** Destroy the connection as soon as the request head arrives. */
  readonly hangUpAtOnce?: boolean
}

/** A speech-to-text provider that answers the sha256 of the raw request body as the transcript. */
async function hashingProvider(t: Test, behaviour: Behaviour = {}): Promise<{ url: string; answered: () => number }> {
  let answered = 0
  const server = createServer((req: IncomingMessage, res) => {
    if (behaviour.hangUpAtOnce === true) return req.socket.destroy()
    if (behaviour.answerAtOnce !== undefined) {
      answered++
      res.writeHead(behaviour.answerAtOnce, { 'content-type': 'application/json', ...(behaviour.closeAfterAnswer === true ? { connection: 'close' } : {}) })
      return res.end(JSON.stringify(behaviour.answerAtOnce === 200 ? { text: 'early' } : { error: { message: 'early refusal' } }))
    }
    const hash = createHash('sha256')
    let n = 0
    req.on('data', (c: Buffer) => {
      hash.update(c)
      n += c.length
      if (behaviour.resetAfter !== undefined && n >= behaviour.resetAfter) return req.socket.destroy()
      if (behaviour.stallAfter !== undefined && n - c.length < behaviour.stallAfter && n >= behaviour.stallAfter) {
        req.pause()
        setTimeout(() => req.resume(), behaviour.stallMs)
      } else if (behaviour.pauseMs !== undefined) {
        req.pause()
        setTimeout(() => req.resume(), behaviour.pauseMs)
      }
    })
    req.on('end', () => {
      answered++
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ text: hash.digest('hex') }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, answered: () => answered }
}

function providers(a: string, b?: string): TestProvider[] {
  const model = (price: string): TestModel => ({ id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: price } })
  return b === undefined ? [{ address: A, url: a, models: [model('0.0001')] }] : [
    { address: A, url: a, models: [model('0.0001')] },
    { address: B, url: b, models: [model('0.0002')] },
  ]
}

/** A transcription form around a WAV of `bytes` bytes whose samples are random. */
function upload(bytes: number, model = AUDIO_MODEL): Buffer {
  const file = wav((bytes - 44) / 32_000)
  randomBytes(file.length - 44).copy(file, 44)
  return Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${model}\r\n`),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    file,
    Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
  ])
}

/** `body` in pieces of random sizes (1 byte to `max`), one per turn: uWS's chunks fall anywhere. */
function pieces(body: Buffer, max = 300 * 1024): Readable {
  let at = 0
  return new Readable({
    read() {
      if (at >= body.length) return void this.push(null)
      const n = 1 + Math.floor(Math.random() * Math.min(max, body.length - at))
      const piece = body.subarray(at, at + n)
      at += n
      setImmediate(() => this.push(piece))
    },
  })
}

async function send(stack: Stack, body: Buffer, signal?: AbortSignal, max?: number, length = true) {
  const res = await request(stack.url + '/v1/audio/transcriptions', {
    method: 'POST',
    headers: {
      'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
      ...(length ? { 'content-length': String(body.length) } : {}),
      ...stack.auth,
      ...PRICE_SORT,
    },
    body: pieces(body, max),
    signal,
  })
  const text = await res.body.text()
  return { status: res.statusCode, text }
}

function sha(body: Buffer): string {
  return createHash('sha256').update(body).digest('hex')
}

/** Every hold on the pool given back (the router's last releases follow its answers by a turn or two). */
async function allReleased(t: Test): Promise<void> {
  await eventually(() => uploadChunks.live === 0, 5000)
  t.equal(uploadChunks.live, 0, 'every pooled chunk was released')
}

t.test('many uploads at once, inside and past the replay buffer, to a slow reader: every byte arrives as sent', async (t) => {
  const slow = await hashingProvider(t, { pauseMs: 2 })
  const stack = await startStack(t, providers(slow.url), { upstream: { replay_buffer_bytes: MIB }, server: { upload_memory_bytes: MIB } })
  const sizes = Array.from({ length: 16 }, (_, i) => (i % 2 === 0 ? 200 * 1024 + i * 37_000 : 2 * MIB + i * 311_111))
  const bodies = sizes.map((n) => upload(n))
  const madeBefore = uploadChunks.made
  const results = await Promise.all(bodies.map((body) => send(stack, body)))
  for (const [i, r] of results.entries()) {
    t.equal(r.status, 200, `upload ${i} (${bodies[i]!.length} bytes) answered`)
    t.equal(JSON.parse(r.text).text, sha(bodies[i]!), `upload ${i}: the provider received exactly the bytes sent`)
  }
  const sentMiB = bodies.reduce((n, b) => n + b.length, 0) / MIB
  const made = uploadChunks.made - madeBefore
  t.ok(made * SLAB_BYTES < sentMiB * MIB, `${made} slabs for ${sentMiB.toFixed(0)} MiB of uploads: memory was reused`)
  await allReleased(t)
})

t.test('chunks queued in a stalled socket are not reused while other uploads take memory from the pool', async (t) => {
  // Past its replay buffer an upload's small chunks are handed to undici's socket, which takes them while the
  // provider reads nothing: only the socket's hold keeps their memory from the uploads running beside it.
  const stalled = await hashingProvider(t, { stallAfter: MIB, stallMs: 400 })
  const fast = await hashingProvider(t)
  const stt = (id: string): TestModel => ({ id, type: 'speech-to-text', price: { audio_second: '0.0001' } })
  const stack = await startStack(
    t,
    [
      { address: A, url: stalled.url, models: [stt(AUDIO_MODEL)] },
      { address: B, url: fast.url, models: [stt('stt-beside')] },
    ],
    { upstream: { replay_buffer_bytes: 256 * 1024 } },
  )
  const slow = upload(8 * MIB)
  const beside = Array.from({ length: 24 }, () => upload(2 * MIB, 'stt-beside'))
  const slowAnswer = send(stack, slow, undefined, 12 * 1024)
  const besideAnswers = (async () => {
    const out = []
    for (let i = 0; i < beside.length; i += 4) out.push(...(await Promise.all(beside.slice(i, i + 4).map((b) => send(stack, b)))))
    return out
  })()
  const [r, others] = await Promise.all([slowAnswer, besideAnswers])
  t.equal(r.status, 200)
  t.equal(JSON.parse(r.text).text, sha(slow), 'the stalled upload arrived exactly as sent')
  for (const [i, o] of others.entries()) t.equal(JSON.parse(o.text).text, sha(beside[i]!), `upload ${i} beside it arrived as sent`)
  await allReleased(t)
})

t.test('a failover inside the replay buffer sends the pooled upload again, byte for byte', async (t) => {
  const broken = await hashingProvider(t, { resetAfter: 700 * 1024 })
  const good = await hashingProvider(t)
  const stack = await startStack(t, providers(broken.url, good.url), { upstream: { replay_buffer_bytes: 4 * MIB } })
  const bodies = Array.from({ length: 6 }, (_, i) => upload(MIB + i * 400_000))
  const results = await Promise.all(bodies.map((body) => send(stack, body)))
  for (const [i, r] of results.entries()) {
    t.equal(r.status, 200)
    const answer = JSON.parse(r.text)
    t.equal(answer.text, sha(bodies[i]!), `upload ${i}: the second provider received every byte`)
    t.equal(answer.x_svc_trace.provider, B)
    t.equal(answer.x_svc_trace.attempts.length, 2, 'after the first provider broke off')
  }
  t.equal(good.answered(), 6)
  await allReleased(t)
})

t.test('clients that leave mid-upload give back what their uploads held; others are not disturbed', async (t) => {
  const slow = await hashingProvider(t, { pauseMs: 5 })
  const stack = await startStack(t, providers(slow.url), { upstream: { replay_buffer_bytes: MIB } })
  const leaving = Array.from({ length: 6 }, () => {
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 40 + Math.random() * 80)
    return send(stack, upload(8 * MIB), controller.signal).then(
      () => 'finished',
      () => 'left',
    )
  })
  const staying = upload(3 * MIB)
  const [kept, ...outcomes] = await Promise.all([send(stack, staying), ...leaving])
  t.ok(outcomes.includes('left'), 'clients left mid-upload')
  t.equal(kept!.status, 200)
  t.equal(JSON.parse(kept!.text).text, sha(staying), 'the upload beside them arrived whole')
  await allReleased(t)
})

t.test('providers that answer before reading or hang up, and uploads without a length: every request ends and gives back its holds', async (t) => {
  const cases: [string, Behaviour, number[]][] = [
    ['answers 200 before reading the upload', { answerAtOnce: 200 }, [200]],
    ['answers 400 before reading the upload', { answerAtOnce: 400 }, [400]],
    // The reset may reach the router before the answer does: then all it can say is that the provider failed.
    ['answers 400 and closes before reading the upload', { answerAtOnce: 400, closeAfterAnswer: true }, [400, 502]],
    ['hangs up on the request head', { hangUpAtOnce: true }, [502]],
  ]
  for (const [what, behaviour, statuses] of cases) {
    const provider = await hashingProvider(t, behaviour)
    const stack = await startStack(t, providers(provider.url), { upstream: { replay_buffer_bytes: MIB } })
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => send(stack, upload((i + 1) * 1.5 * MIB))))
    for (const r of results) t.ok(statuses.includes(r.status), `${what}: answered ${r.status}`)
    await allReleased(t)
  }
  // Chunked uploads (no Content-Length) to a provider that reads them all.
  const good = await hashingProvider(t)
  const stack = await startStack(t, providers(good.url), { upstream: { replay_buffer_bytes: MIB } })
  const bodies = [upload(300 * 1024), upload(3 * MIB)]
  const results = await Promise.all(bodies.map((b) => send(stack, b, undefined, undefined, false)))
  for (const [i, r] of results.entries()) {
    t.equal(r.status, 200)
    t.equal(JSON.parse(r.text).text, sha(bodies[i]!), `chunked upload ${i} arrived as sent`)
  }
  await allReleased(t)
})
