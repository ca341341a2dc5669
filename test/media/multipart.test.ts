/**
 * The multipart surfaces through the real router: images.edit with an image and a mask and
 * audio.transcriptions.create with a WAV file from the real `openai` client, every transcription format, billing
 * by hand, failover from memory and from the spool file, the 413 cap, a missing model, a client that stops
 * sending mid-upload (the router's memory under large uploads: upload-rss.test.ts).
 */
import { Readable } from 'node:stream'
import OpenAI, { toFile } from 'openai'
import t from 'tap'
import { request } from 'undici'
import { formatUsd } from '../../src/billing/money.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { startStack, type Stack } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'
import { A, atto, AUDIO_MODEL, B, charges, IMAGE_MODEL, mediaProviders, mp3, PRICE_SORT, wav } from './fixtures.js'

const BOUNDARY = 'svc-test-boundary'

function client(stack: Stack): OpenAI {
  return new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0, defaultHeaders: PRICE_SORT })
}

/** A multipart body: fields in order, then one file. */
function form(fields: [string, string][], file?: { field: string; name: string; bytes: Buffer }): Buffer {
  const parts: Buffer[] = []
  for (const [name, value] of fields) parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`))
  if (file !== undefined) {
    parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${file.field}"; filename="${file.name}"\r\nContent-Type: application/octet-stream\r\n\r\n`))
    parts.push(file.bytes, Buffer.from('\r\n'))
  }
  parts.push(Buffer.from(`--${BOUNDARY}--\r\n`))
  return Buffer.concat(parts)
}

async function postForm(stack: Stack, path: string, body: Buffer | Readable, extra: Record<string, string> = {}) {
  const res = await request(stack.url + path, {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth, ...PRICE_SORT, ...extra },
    body,
  })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) }
}

t.test('images.edit with an image and a mask: streamed to the provider, billed per image', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const image = await toFile(wav(0.1), 'image.png', { type: 'image/png' })
  const mask = await toFile(Buffer.alloc(2048, 7), 'mask.png', { type: 'image/png' })
  const { data, response } = await client(stack).images.edit({ model: IMAGE_MODEL, image, mask, prompt: 'add a hat', n: 2 }).withResponse()
  t.equal(data.data?.length, 2)
  const trace = (data as any).x_svc_trace
  t.equal(trace.provider, A)
  t.equal(trace.billing.total_cost, '0.006', '2 images × 0.003')
  t.match(response.headers.get('svc-res-key'), /^img-/)
  t.ok(response.headers.get('x-ratelimit-limit-requests'))
  const received = stack.sims.get(A)!.stats.lastForm!
  t.same(received.files.map((f) => [f.field, f.bytes]).sort(), [['image', 3244], ['mask', 2048]])
  t.equal(received.fields.prompt, 'add a hat')
  t.equal((await charges(stack))[0]!.amount, atto('0.006'))
})

t.test('audio.transcriptions.create with a WAV file: seconds × price, every response format', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const file = await toFile(wav(2.5), 'speech.wav', { type: 'audio/wav' })
  const { data, response } = await client(stack).audio.transcriptions.create({ model: AUDIO_MODEL, file }).withResponse()
  t.match(data.text, /quick brown fox/)
  const trace = (data as any).x_svc_trace
  t.equal(trace.billing.total_cost, '0.00025', '2.5 s × 0.0001')
  t.same(trace.usage, { seconds: 2.5 })
  t.match(response.headers.get('svc-res-key'), /^req_/)
  const verbose = await client(stack).audio.transcriptions.create({ model: AUDIO_MODEL, file, response_format: 'verbose_json' })
  t.equal(verbose.duration, 2.5)
  t.equal((verbose as any).x_svc_trace.billing.total_cost, '0.00025')
  for (const format of ['text', 'srt', 'vtt'] as const) {
    const res = await postForm(stack, '/v1/audio/transcriptions', form([['model', AUDIO_MODEL], ['response_format', format]], { field: 'file', name: 'a.wav', bytes: wav(2.5) }))
    t.equal(res.status, 200, format)
    t.notMatch(res.text, /x_svc_trace/, `${format}: the body is relayed as it is`)
    const headerTrace = JSON.parse(res.headers['x-svc-trace'] as string)
    t.equal(headerTrace.billing.total_cost, '0.00025', `${format}: the trace is in a header`)
    t.same(headerTrace.usage, { seconds: 2.5, estimated: true }, `${format}: no duration from the provider, so the WAV header's`)
    t.ok(res.headers['svc-res-key'])
  }
  const billed = await charges(stack)
  t.equal(billed.length, 5)
  for (const c of billed) t.equal(c.amount, atto('0.00025'))
  const usage = await stack.router.store.ledger.usage(stack.account, { fromDay: '2000-01-01', toDay: '2999-12-31' })
  t.equal(usage[0]!.audioMs, 5 * 2500, 'the usage roll-up counts audio milliseconds')
})

t.test('an MP3 whose provider reports no duration is billed from its frame header, marked estimated; price headers are inert', async (t) => {
  const stack = await startStack(t, mediaProviders({ fault: 'no-usage' }))
  const body = form([['model', AUDIO_MODEL]], { field: 'file', name: 'a.mp3', bytes: mp3(1000) })
  const res = await postForm(stack, '/v1/audio/transcriptions', body, {
    'X-SVC-Provider-Max-Price-Usd-Image': '0',
    'X-SVC-Provider-Max-Price-Usd-Prompt': '0',
  })
  t.equal(res.status, 200)
  t.equal(stack.sims.get(A)!.stats.lastForm!.files[0]!.bytes, 417_000)
  // The estimate: the upload's bytes (the file and its small multipart envelope) at the 128 kbit/s of the header.
  const seconds = body.length / 16_000
  t.ok(seconds > 26.0625 && seconds < 26.1, 'about the 26.0625 s of 1000 frames')
  const trace = res.json().x_svc_trace
  t.same(trace.usage, { seconds, estimated: true })
  t.equal(trace.billing.total_cost, formatUsd(BigInt(Math.ceil(seconds * 1000)) * atto('0.0001') / 1000n), 'ms × 0.0001 / 1000')
})

t.test('failover resends the whole upload, in memory or past its memory bound from the spool file; attempts say so', async (t) => {
  const stack = await startStack(t, mediaProviders({ fault: 'status-500' }))
  const small = await postForm(stack, '/v1/audio/transcriptions', form([['model', AUDIO_MODEL]], { field: 'file', name: 'a.wav', bytes: wav(2) }))
  t.equal(small.status, 200)
  t.same(small.json().x_svc_trace.attempts.map((a: any) => [a.provider, a.status]), [[A, 500], [B, 200]])
  t.equal(stack.sims.get(B)!.stats.lastForm!.files[0]!.bytes, wav(2).length, 'B got every byte')
  t.equal(small.json().x_svc_trace.billing.total_cost, '0.0004', '2 s × B 0.0002')

  // 150 s of WAV, 4.8 MB: past the 4 MiB an upload keeps in memory by default (and the 4 MiB replay buffer of
  // old), so B's copy is read back from the upload's file.
  const big = await postForm(stack, '/v1/audio/transcriptions', form([['model', AUDIO_MODEL]], { field: 'file', name: 'a.wav', bytes: wav(150) }))
  t.equal(big.status, 200, big.text)
  const trace = big.json().x_svc_trace
  t.same(trace.attempts.map((a: any) => [a.provider, a.status, a.error ?? null]), [[A, 500, 'http_500'], [B, 200, null]])
  t.equal(stack.sims.get(B)!.stats.lastForm!.files[0]!.bytes, wav(150).length, 'B got every byte of the 4.8 MB file')
  t.equal(trace.billing.total_cost, '0.03', '150 s × B 0.0002')
  t.equal((await charges(stack)).length, 2, 'both served requests are billed, once each')
})

t.test('413 past max_multipart_body_bytes (declared or counted); a missing or late model is a 400; nothing billed', async (t) => {
  const stack = await startStack(t, mediaProviders(), { server: { max_multipart_body_bytes: 1024 * 1024 }, upstream: { replay_buffer_bytes: 128 * 1024 } })
  const tooBig = form([['model', AUDIO_MODEL]], { field: 'file', name: 'a.wav', bytes: wav(40) })
  const declared = await postForm(stack, '/v1/audio/transcriptions', tooBig)
  t.equal(declared.status, 413)
  t.equal(declared.json().error.code, 'request_too_large')
  t.equal(stack.sims.get(A)!.stats.requests, 0, 'refused on its Content-Length, before any attempt')
  const counted = await postForm(stack, '/v1/audio/transcriptions', Readable.from([tooBig.subarray(0, 300_000), tooBig.subarray(300_000)]))
  t.equal(counted.status, 413, 'a chunked upload is counted')
  t.equal(counted.json().error.code, 'request_too_large')

  const noModel = await postForm(stack, '/v1/audio/transcriptions', form([['language', 'en']], { field: 'file', name: 'a.wav', bytes: wav(1) }))
  t.equal(noModel.status, 400)
  t.match(noModel.json().error.message, /model is required/)
  // The scan judges the model's place by the chunks uWS reads (at most 512 KiB each): an image past that puts the
  // model outside the first read, wherever TCP splits the upload (a kept-alive connection may deliver 300 KB whole).
  const late = await postForm(stack, '/v1/images/edits', Buffer.concat([form([], { field: 'image', name: 'a.png', bytes: Buffer.alloc(600_000) }).subarray(0, -(BOUNDARY.length + 6)), Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${IMAGE_MODEL}\r\n--${BOUNDARY}--\r\n`)]))
  t.equal(late.status, 400)
  t.match(late.json().error.message, /must come within the first 131072 bytes/)
  const notForm = await postForm(stack, '/v1/audio/transcriptions', Buffer.from('{}'), { 'content-type': 'application/json' })
  t.equal(notForm.status, 400)
  t.equal((await charges(stack)).length, 0)
})

t.test('an upload declared past max_multipart_body_bytes: the openai client hears the 413, not a broken connection', async (t) => {
  // Refused on its Content-Length before a byte of it was read: unless the router reads the rest (and drops it),
  // the client is still writing when the socket closes and sees EPIPE or a reset instead of the answer (and
  // retries the whole upload). Seen with the router in its own process, as clients meet it.
  const sim = await startSimulator({ name: 'cap' })
  t.teardown(() => sim.close())
  const router = await spawnRouter(
    t,
    [{ address: A, url: sim.url, trust_mode: 'standard', models: [{ id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.0001' } }, { id: IMAGE_MODEL, type: 'text-to-image', price: { image: '0.003' } }] }],
    { server: { max_multipart_body_bytes: 1024 * 1024 } },
  )
  const openai = new OpenAI({ baseURL: router.url + '/v1', apiKey: router.key, maxRetries: 0 })
  const upload = Buffer.alloc(24 * 1024 * 1024)
  const failures = [
    await openai.audio.transcriptions.create({ model: AUDIO_MODEL, file: await toFile(upload, 'speech.wav', { type: 'audio/wav' }) }).then(() => null, (e: unknown) => e),
    await openai.images.edit({ model: IMAGE_MODEL, prompt: 'a hat', image: await toFile(upload, 'image.png', { type: 'image/png' }) }).then(() => null, (e: unknown) => e),
  ]
  for (const [i, err] of failures.entries()) {
    t.notOk(err instanceof OpenAI.APIConnectionError, `${i}: an answer, not a connection error`)
    t.equal((err as InstanceType<typeof OpenAI.APIError>).status, 413, `${i}: the 413 reached the client`)
    t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'request_too_large')
  }
  t.equal(sim.stats.requests, 0, 'the provider saw neither upload')
})

t.test('a client that stops sending mid-upload: the upstream attempt is cancelled and nothing is billed', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const sim = stack.sims.get(A)!
  const head = form([['model', AUDIO_MODEL]], { field: 'file', name: 'a.wav', bytes: wav(30) }).subarray(0, 400_000)
  let sent = false
  const body = new Readable({
    read() {
      if (!sent) {
        sent = true
        this.push(head)
        // Once the router has started the attempt (the provider has the request), break the upload: waited
        // for, not guessed with a sleep (the deadline only bounds a router that never starts it).
        void eventually(() => sim.stats.requests > 0).then(() => this.destroy(new Error('client gave up')))
      }
    },
  })
  await t.rejects(postForm(stack, '/v1/audio/transcriptions', body))
  await eventually(() => sim.stats.aborted > 0)
  t.equal(sim.stats.requests, 1, 'the upload had reached the provider')
  t.equal(sim.stats.aborted, 1, 'and was cancelled there')
  await eventually(() => stack.router.inFlight.count === 0)
  t.equal(stack.router.inFlight.count, 0, 'nothing left in flight')
  t.equal((await charges(stack)).length, 0)
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'the reservation was given back')
})
