/**
 * Image edits stream straight through (issue 30): once the form's `model` is known the router routes and sends,
 * holding the worst case of the fields not seen yet (10 images while `n` may still come), and settles on the
 * images the answer holds. Against real http providers on loopback that record when the upload's bytes arrive:
 * - a client that sent model and prompt, then pauses after 4 MiB of a 20 MiB image, finds those bytes at the
 *   provider, with 10 images held meanwhile;
 * - a client that goes away mid-upload: the provider's request is closed, nothing billed, nothing held;
 * - failover resends the upload byte for byte, from memory and past the memory bound from the spool file;
 * - a field that breaks a rule after the upload started (n out of range, a bad response_format, an empty prompt)
 *   fails the request before any answer is relayed, cancels the provider's request, bills nothing;
 * - a budget that cannot hold 10 images waits for the rest of the form (within the replay buffer), also with
 *   the real `openai` client; clients that leave while it waits hold and pay nothing;
 * - the hold falls to n × price once n came, while the provider works;
 * - a provider that answers before the upload's end: the answer waits for the upload to be judged;
 * - chunked uploads, and a concurrent batch of good and bad edits in pieces of every size.
 */
import { createHash, randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import OpenAI, { toFile } from 'openai'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { SMALL_CHUNK } from '../../src/codecs/body-chunks.js'
import { uploadChunks } from '../../src/upstream/chunk-pool.js'
import { startStack, type Stack, type TestProvider } from '../helpers/stack.js'
import { eventually } from '../helpers/wait.js'
import { A, atto, B, charges, IMAGE_MODEL, PRICE_SORT } from './fixtures.js'

const BOUNDARY = 'svc-edit-stream'
const MIB = 1024 * 1024

interface Behaviour {
  /** Answer this status once the whole upload came (default 200, the edit's images). */
  readonly status?: number
  /** Answer 200 with one image as soon as the request head arrives, reading none of the body first. */
  readonly answerAtOnce?: boolean
  /** Once the whole upload came, answer only when this settles. */
  readonly answerWhen?: Promise<void>
}

/** An image-edit provider that records how much of each upload arrived, and whether its request was cut. */
interface Recorder {
  readonly url: string
  /** Requests whose head arrived. */
  requests: number
  /** Bytes of the current upload received so far. */
  received: number
  /** Requests whose connection closed before their upload ended. */
  cut: number
  /** sha256 of each whole upload, in arrival order. */
  readonly hashes: string[]
}

async function recorder(t: Test, behaviour: Behaviour = {}): Promise<Recorder> {
  const rec: Recorder = { url: '', requests: 0, received: 0, cut: 0, hashes: [] }
  const server = createServer((req: IncomingMessage, res) => {
    // The router's health probes (GET /v1/models) are not uploads.
    if (req.method !== 'POST') {
      res.writeHead(200, { 'content-type': 'application/json' })
      return res.end('{"object":"list","data":[]}')
    }
    rec.requests++
    rec.received = 0
    const hash = createHash('sha256')
    // The form's n, from the bytes as they came (the provider acts on what it was sent): the form's first and
    // last 64 KiB hold every field of these tests.
    let head = Buffer.alloc(0)
    let tail = Buffer.alloc(0)
    let ended = false
    if (behaviour.answerAtOnce === true) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ created: 1, data: [{ b64_json: 'aGk=' }] }))
    }
    req.on('data', (c: Buffer) => {
      rec.received += c.length
      hash.update(c)
      if (head.length < 65_536) head = Buffer.concat([head, c]).subarray(0, 65_536)
      tail = Buffer.concat([tail, c]).subarray(-65_536)
    })
    req.on('end', () => {
      ended = true
      rec.hashes.push(hash.digest('hex'))
      if (behaviour.answerAtOnce === true) return
      const found = /name="n"\r\n\r\n(\d+)\r\n/.exec(head.toString('latin1')) ?? /name="n"\r\n\r\n(\d+)\r\n/.exec(tail.toString('latin1'))
      const n = found === null ? 1 : Number(found[1])
      const status = behaviour.status ?? 200
      void (behaviour.answerWhen ?? Promise.resolve()).then(() => {
        res.writeHead(status, { 'content-type': 'application/json' })
        if (status !== 200) return res.end(JSON.stringify({ error: { message: `status ${status}` } }))
        res.end(JSON.stringify({ created: 1, data: Array.from({ length: n }, () => ({ b64_json: 'aGk=' })) }))
      })
    })
    req.on('close', () => {
      if (!ended) rec.cut++
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return Object.assign(rec, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })
}

/** Providers of the image model: A at 0.003 an image (cheaper, tried first under sort=price), B at 0.005. */
function providers(a: string, b?: string): TestProvider[] {
  const model = (price: string) => ({ id: IMAGE_MODEL, type: 'text-to-image' as const, price: { image: price } })
  const list: TestProvider[] = [{ address: A, url: a, models: [model('0.003')] }]
  if (b !== undefined) list.push({ address: B, url: b, models: [model('0.005')] })
  return list
}

type Field = [name: string, value: string]

/** An edit form: `before` fields, an image of `imageBytes` random bytes, then `after` fields. */
function form(before: Field[], imageBytes: number, after: Field[] = []): { body: Buffer; imageStart: number } {
  const field = ([name, value]: Field) => Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`)
  const head = Buffer.concat([
    ...before.map(field),
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="i.png"\r\nContent-Type: image/png\r\n\r\n`),
  ])
  const body = Buffer.concat([head, randomBytes(imageBytes), Buffer.from('\r\n'), ...after.map(field), Buffer.from(`--${BOUNDARY}--\r\n`)])
  return { body, imageStart: head.length }
}

/**
 * A client upload of `body` in 256 KiB pieces that sends its first `pauseAt` bytes, then waits for `resume` (or
 * `abandon`, which breaks the upload) before it sends the rest.
 */
function pausing(body: Buffer, pauseAt: number) {
  let release: (go: boolean) => void = () => {}
  const gate = new Promise<boolean>((resolve) => (release = resolve))
  const PIECE = 256 * 1024
  async function* pieces(): AsyncGenerator<Buffer> {
    for (let at = 0; at < pauseAt; at += PIECE) yield body.subarray(at, Math.min(pauseAt, at + PIECE))
    if (!(await gate)) throw new Error('client gave up')
    for (let at = pauseAt; at < body.length; at += PIECE) yield body.subarray(at, at + PIECE)
  }
  return { stream: Readable.from(pieces(), { objectMode: false }), resume: () => release(true), abandon: () => release(false) }
}

async function edit(stack: Stack, body: Buffer | Readable, auth = stack.auth, length?: number) {
  const res = await request(stack.url + '/v1/images/edits', {
    method: 'POST',
    headers: {
      'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
      ...(length === undefined ? {} : { 'content-length': String(length) }),
      ...auth,
      ...PRICE_SORT,
    },
    body,
  })
  const text = await res.body.text()
  return { status: res.statusCode, json: JSON.parse(text) }
}

async function settledBooks(t: Test, stack: Stack): Promise<void> {
  await eventually(() => stack.router.inFlight.count === 0 && uploadChunks.live === 0)
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing left held')
  t.equal(uploadChunks.live, 0, 'every pooled chunk given back')
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex')

t.test('model and prompt first, a pause after 4 MiB of a 20 MiB image: those bytes are at the provider, 10 images held', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  const { body, imageStart } = form([['model', IMAGE_MODEL], ['prompt', 'a hat']], 20 * MIB, [['n', '2']])
  const upload = pausing(body, imageStart + 4 * MIB)
  const answer = edit(stack, upload.stream, stack.auth, body.length)
  // The old router read the form to its end before a byte went on: this would never hold while the client waits.
  // All of it but at most a last short read, which the router gathers with the next before it sends on
  // (codecs/body-chunks.ts ChunkGatherer, under 8 KiB: it stays there while the client pauses).
  t.ok(await eventually(() => provider.received >= imageStart + 4 * MIB - SMALL_CHUNK), 'the first 4 MiB of the image reached the provider while the client paused')
  t.ok(provider.received <= imageStart + 4 * MIB, 'and no more than was sent')
  t.equal(stack.router.ledger.reserved(stack.account), atto('0.03'), 'n may still come: 10 images × 0.003 held')
  upload.resume()
  const res = await answer
  t.equal(res.status, 200)
  t.equal(res.json.data.length, 2, 'the provider read the n that came after the image')
  t.equal(res.json.x_svc_trace.billing.total_cost, '0.006', 'settled on the images of the answer')
  t.same(provider.hashes, [sha(body)], 'the provider got the upload byte for byte')
  t.same((await charges(stack)).map((c) => c.amount), [atto('0.006')])
  await settledBooks(t, stack)
})

t.test('an n sent before the image is held as asked while the image streams', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  const { body, imageStart } = form([['n', '3'], ['model', IMAGE_MODEL], ['prompt', 'a hat']], 8 * MIB)
  const upload = pausing(body, imageStart + 2 * MIB)
  const answer = edit(stack, upload.stream, stack.auth, body.length)
  t.ok(await eventually(() => provider.received >= imageStart + 2 * MIB - SMALL_CHUNK), 'streaming')
  t.equal(stack.router.ledger.reserved(stack.account), atto('0.009'), '3 × 0.003 held')
  upload.resume()
  const res = await answer
  t.equal(res.status, 200)
  t.equal(res.json.x_svc_trace.billing.total_cost, '0.009')
  await settledBooks(t, stack)
})

t.test('a client that goes away mid-upload: the provider request is closed, nothing billed, nothing held', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  const { body, imageStart } = form([['model', IMAGE_MODEL], ['prompt', 'a hat']], 20 * MIB)
  const upload = pausing(body, imageStart + 4 * MIB)
  const answer = edit(stack, upload.stream, stack.auth, body.length)
  t.ok(await eventually(() => provider.received >= imageStart + 4 * MIB - SMALL_CHUNK), 'the upload was under way at the provider')
  upload.abandon()
  await t.rejects(answer, 'the client broke its own request')
  t.ok(await eventually(() => provider.cut === 1), 'the provider saw its request closed before the upload ended')
  t.same(provider.hashes, [], 'and never a whole upload')
  t.same(await charges(stack), [], 'nothing billed')
  await settledBooks(t, stack)
})

t.test('failover resends the upload byte for byte, inside the memory bound and past it from the spool file', async (t) => {
  const failing = await recorder(t, { status: 500 })
  const good = await recorder(t)
  const stack = await startStack(t, providers(failing.url, good.url), { server: { upload_memory_bytes: 4 * MIB } })
  const small = form([['model', IMAGE_MODEL], ['prompt', 'a hat']], 3 * MIB)
  const inside = await edit(stack, small.body)
  t.equal(inside.status, 200)
  t.same(inside.json.x_svc_trace.attempts.map((a: any) => [a.provider, a.status]), [[A, 500], [B, 200]])
  t.same(good.hashes, [sha(small.body)], 'B got the whole upload again')
  t.equal(inside.json.x_svc_trace.billing.total_cost, '0.005', 'one image at B')

  // 6 MiB: past the 4 MiB kept in memory (and past the 4 MiB replay buffer of before), the rest from the file.
  const big = form([['model', IMAGE_MODEL], ['prompt', 'a hat']], 6 * MIB)
  const past = await edit(stack, big.body)
  t.equal(past.status, 200, 'served by B')
  t.same(past.json.x_svc_trace.attempts.map((a: any) => [a.provider, a.status, a.error ?? null]), [[A, 500, 'http_500'], [B, 200, null]])
  t.same(good.hashes, [sha(small.body), sha(big.body)], 'B got the whole 6 MiB upload again, byte for byte')
  t.equal((await charges(stack)).length, 2, 'both served edits are billed, once each')
  await settledBooks(t, stack)
})

t.test('a field that breaks a rule after the upload started fails the request: provider request cancelled, nothing billed', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  const cases: [string, Field[], RegExp][] = [
    ['n past 10', [['n', '11']], /n must be an integer from 1 to 10/],
    ['n not decimal digits', [['n', '+2']], /n must be an integer from 1 to 10/],
    ['n too long to read', [['n', '1'.repeat(5000)]], /n must be an integer from 1 to 10/],
    ['a bad response_format', [['response_format', 'gif']], /response_format must be one of b64_json, url/],
    ['an empty prompt', [['prompt', '']], /prompt must be a non-empty string/],
    ['n twice', [['n', '1'], ['n', '2']], /the multipart field n may appear only once/],
  ]
  for (const [label, after, message] of cases) {
    const { body, imageStart } = form([['model', IMAGE_MODEL], ...(label === 'an empty prompt' ? [] : [['prompt', 'x'] as Field])], 6 * MIB, after)
    const upload = pausing(body, imageStart + 2 * MIB)
    const cutBefore = provider.cut
    const asked = provider.requests + 1
    const answer = edit(stack, upload.stream, stack.auth, body.length)
    t.ok(await eventually(() => provider.requests === asked && provider.received >= imageStart + 2 * MIB - SMALL_CHUNK), `${label}: the upload had started at the provider`)
    upload.resume()
    const res = await answer
    t.equal(res.status, 400, label)
    t.equal(res.json.error.code, 'invalid_request')
    t.match(res.json.error.message, message)
    t.same(res.json.x_svc_trace.billing.total_cost, '0', `${label}: nothing billed`)
    t.ok(await eventually(() => provider.cut === cutBefore + 1), `${label}: the provider's request was cancelled`)
  }
  t.same(provider.hashes, [], 'no provider ever got a whole form')
  t.same(await charges(stack), [])
  await settledBooks(t, stack)
})

t.test('a capped key that cannot hold 10 images waits for the rest of the form; past the replay buffer it is refused', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url), { upstream: { replay_buffer_bytes: 4 * MIB } })
  // 0.01 holds three images at 0.003, not the ten an n still to come would need.
  const capped = await stack.newApiKey({ creditLimit: atto('0.01') })
  const two = await edit(stack, form([['model', IMAGE_MODEL], ['prompt', 'x']], 2 * MIB, [['n', '2']]).body, capped.auth)
  t.equal(two.status, 200, 'n came after the image, within the buffer: held and billed as asked')
  t.equal(two.json.data.length, 2)
  t.equal(two.json.x_svc_trace.billing.total_cost, '0.006')
  const one = await edit(stack, form([['model', IMAGE_MODEL], ['prompt', 'x']], 2 * MIB).body, capped.auth)
  t.equal(one.status, 200, 'no n in a form that ended within the buffer: one image, which 0.004 left can hold')
  t.equal(one.json.x_svc_trace.billing.total_cost, '0.003')
  t.equal(provider.requests, 2)

  const fresh = await stack.newApiKey({ creditLimit: atto('0.01') })
  const past = form([['model', IMAGE_MODEL], ['prompt', 'x']], 6 * MIB, [['n', '1']])
  const refused = await edit(stack, past.body, fresh.auth)
  t.equal(refused.status, 402, 'the buffer filled before n came: ten images are needed, more than the key may spend')
  t.equal(refused.json.error.code, 'credit_limit_exceeded')
  t.equal(provider.requests, 2, 'no provider was asked')
  const rich = await edit(stack, past.body)
  t.equal(rich.status, 200, 'a key that can hold ten is served')
  t.equal(rich.json.x_svc_trace.billing.total_cost, '0.003', 'and billed for the one image of the answer')
  t.same((await charges(stack)).map((c) => c.amount), [atto('0.006'), atto('0.003'), atto('0.003')])
  await settledBooks(t, stack)
})

t.test('a provider that answers before the upload ended: the answer waits until the upload came and passed', async (t) => {
  const provider = await recorder(t, { answerAtOnce: true })
  const stack = await startStack(t, providers(provider.url), { upstream: { replay_buffer_bytes: MIB } })
  const good = form([['model', IMAGE_MODEL], ['prompt', 'x']], 3 * MIB, [['n', '1']])
  const served = await edit(stack, good.body)
  t.equal(served.status, 200, 'relayed once the whole upload passed')
  t.equal(served.json.x_svc_trace.billing.total_cost, '0.003')
  const bad = form([['model', IMAGE_MODEL], ['prompt', 'x']], 3 * MIB, [['n', '11']])
  const refused = await edit(stack, bad.body)
  t.equal(refused.status, 400, 'the late n refused the request: the early answer never went out')
  t.match(refused.json.error.message, /n must be an integer from 1 to 10/)
  t.equal(refused.json.x_svc_trace.billing.total_cost, '0')
  t.same((await charges(stack)).map((c) => c.amount), [atto('0.003')], 'only the edit that passed is billed')
  await settledBooks(t, stack)
})

t.test('clients that leave while their edit waits (for its n, or for the upload behind an early answer): nothing billed or held', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  // A key that cannot hold ten images waits for the n; the client leaves first.
  const capped = await stack.newApiKey({ creditLimit: atto('0.01') })
  const waiting = form([['model', IMAGE_MODEL], ['prompt', 'x']], 6 * MIB, [['n', '1']])
  const upload = pausing(waiting.body, waiting.imageStart + 2 * MIB)
  const answer = edit(stack, upload.stream, capped.auth, waiting.body.length)
  t.ok(await eventually(() => stack.router.inFlight.count === 1), 'admitted, waiting for the rest of the form')
  t.equal(provider.requests, 0, 'nothing sent while the hold could not be made')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'and nothing held')
  upload.abandon()
  await t.rejects(answer)
  await settledBooks(t, stack)
  t.equal(provider.requests, 0, 'the provider never heard of it')

  // A provider that answered at once: its answer waits for the upload, whose client leaves.
  const early = await recorder(t, { answerAtOnce: true })
  const other = await startStack(t, providers(early.url))
  const held = form([['model', IMAGE_MODEL], ['prompt', 'x']], 6 * MIB)
  const second = pausing(held.body, held.imageStart + 2 * MIB)
  const answer2 = edit(other, second.stream, other.auth, held.body.length)
  t.ok(await eventually(() => early.requests === 1), 'the provider answered')
  second.abandon()
  await t.rejects(answer2)
  await settledBooks(t, other)
  t.same(await charges(other), [], 'an answer to an upload that never came whole is not billed')
})

t.test('a chunked upload (no Content-Length) streams through as well, and n after the image is billed as asked', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  const { body, imageStart } = form([['model', IMAGE_MODEL], ['prompt', 'x']], 8 * MIB, [['response_format', 'b64_json'], ['n', '4']])
  const upload = pausing(body, imageStart + 3 * MIB)
  const answer = edit(stack, upload.stream)
  t.ok(await eventually(() => provider.received >= imageStart + 3 * MIB - SMALL_CHUNK), 'the bytes sent so far are at the provider')
  upload.resume()
  const res = await answer
  t.equal(res.status, 200)
  t.equal(res.json.x_svc_trace.billing.total_cost, '0.012', '4 × 0.003')
  t.same(provider.hashes, [sha(body)])
  await settledBooks(t, stack)
})

t.test('the hold follows the worst case down once n comes: the room goes back while the provider works', async (t) => {
  let answer: () => void = () => {}
  const provider = await recorder(t, { answerWhen: new Promise<void>((resolve) => (answer = resolve)) })
  const stack = await startStack(t, providers(provider.url))
  const cases: [string, Field[], string][] = [
    ['n after the image', [['n', '2']], '0.006'],
    ['no n, the form ended', [], '0.003'],
  ]
  const answers = []
  for (const [label, after, held] of cases) {
    const { body, imageStart } = form([['model', IMAGE_MODEL], ['prompt', 'x']], 3 * MIB, after)
    const upload = pausing(body, imageStart + MIB)
    const before = stack.router.ledger.reserved(stack.account)
    const res = edit(stack, upload.stream, stack.auth, body.length)
    t.ok(await eventually(() => stack.router.ledger.reserved(stack.account) === before + atto('0.03')), `${label}: ten images held while n may come`)
    upload.resume()
    const whole = provider.hashes.length + 1
    t.ok(await eventually(() => provider.hashes.length === whole), `${label}: the provider has the whole upload and works on it`)
    t.equal(stack.router.ledger.reserved(stack.account), before + atto(held), `${label}: the hold is down to ${held}`)
    answers.push(res)
  }
  answer()
  const done = await Promise.all(answers)
  t.same(done.map((r) => [r.status, r.json.x_svc_trace.billing.total_cost]), [[200, '0.006'], [200, '0.003']])
  await settledBooks(t, stack)
})

t.test('the openai client, model first and n last: a capped key that cannot hold ten is served the n it asked', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url))
  // 0.02 holds six images at 0.003, not ten: the hold waits for the n at the form's end.
  const capped = await stack.newApiKey({ creditLimit: atto('0.02') })
  const openai = new OpenAI({ baseURL: stack.url + '/v1', apiKey: capped.key, maxRetries: 0, defaultHeaders: PRICE_SORT })
  const image = await toFile(randomBytes(10 * MIB), 'image.png', { type: 'image/png' })
  const res = (await openai.images.edit({ model: IMAGE_MODEL, prompt: 'a hat', image, n: 3 })) as any
  t.equal(res.data.length, 3)
  t.equal(res.x_svc_trace.billing.total_cost, '0.009')
  const over = await openai.images.edit({ model: IMAGE_MODEL, prompt: 'a hat', image: await toFile(randomBytes(MIB), 'i.png'), n: 4 }).then(
    () => null,
    (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
  )
  t.equal(over?.status, 402, 'four more (0.012) would pass the cap after 0.009: refused once n came')
  t.equal(provider.requests, 1, 'the provider was never asked for it')
  await settledBooks(t, stack)
})

t.test('many edits at once in pieces of every size, good and bad, capped and not: every one answered right, books back to zero', async (t) => {
  const provider = await recorder(t)
  const stack = await startStack(t, providers(provider.url), { upstream: { replay_buffer_bytes: 2 * MIB } })
  const capped = await stack.newApiKey({ creditLimit: atto('1') })
  /** `body` in pieces of 1 byte to 200 KiB, one per turn. */
  const pieces = (body: Buffer): Readable => {
    let at = 0
    return new Readable({
      read() {
        if (at >= body.length) return void this.push(null)
        const n = 1 + Math.floor(Math.random() * Math.min(200 * 1024, body.length - at))
        const piece = body.subarray(at, (at += n))
        setImmediate(() => this.push(piece))
      },
    })
  }
  const cases: [Field[], Field[], number, number, string][] = [
    // before the image, after it, image MiB, status, billed
    [[['model', IMAGE_MODEL], ['prompt', 'x']], [['n', '2']], 3, 200, '0.006'],
    [[['model', IMAGE_MODEL], ['n', '3'], ['prompt', 'x']], [], 1, 200, '0.009'],
    [[['prompt', 'x'], ['model', IMAGE_MODEL]], [], 0.5, 200, '0.003'],
    [[['model', IMAGE_MODEL], ['prompt', 'x']], [['n', '0']], 3, 400, '0'],
    [[['model', IMAGE_MODEL]], [['prompt', '']], 1, 400, '0'],
    [[['model', IMAGE_MODEL], ['prompt', 'x']], [['response_format', 'url'], ['response_format', 'url']], 2, 400, '0'],
  ]
  const runs = cases.flatMap(([before, after, mib, status, billed], i) =>
    [stack.auth, capped.auth].map(async (auth) => {
      const { body } = form(before, Math.round(mib * MIB), after)
      const res = await edit(stack, pieces(body), auth, i % 2 === 0 ? body.length : undefined)
      t.equal(res.status, status, `case ${i}: ${res.status === status ? 'as expected' : JSON.stringify(res.json.error)}`)
      t.equal(res.json.x_svc_trace.billing.total_cost, billed, `case ${i}: billed ${billed}`)
    }),
  )
  await Promise.all(runs)
  const total = (await charges(stack)).reduce((s, c) => s + c.amount, 0n)
  t.equal(total, 2n * (atto('0.006') + atto('0.009') + atto('0.003')), 'the books hold exactly what was answered')
  await settledBooks(t, stack)
})
