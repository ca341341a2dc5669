/**
 * Bodies read in many small reads (src/codecs/body-chunks.ts): the gatherer hands small reads on in chunks of at
 * least SMALL_CHUNK bytes and in order, a growing body keeps one buffer; and through the real router, a JSON
 * request and a multipart upload sent one byte per write arrive whole.
 */
import { createHash, randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import t from 'tap'
import { ChunkGatherer, GrowingBody, SMALL_CHUNK } from '../../src/codecs/body-chunks.js'
import { startStack, type TestModel } from '../helpers/stack.js'
import { A, AUDIO_MODEL, wav } from '../media/fixtures.js'

t.test('small reads are handed on gathered, in order, and nothing is held past the last read', async (t) => {
  const g = new ChunkGatherer()
  const out: { bytes: Buffer; last: boolean }[] = []
  const emit = (bytes: Uint8Array, last: boolean): void => void out.push({ bytes: Buffer.from(bytes), last })
  const sent: Buffer[] = []
  const send = (b: Buffer, last = false): void => {
    sent.push(b)
    g.push(b, last, emit)
  }
  for (let i = 0; i < 3 * SMALL_CHUNK; i++) send(Buffer.from([i & 0xff]))
  t.equal(out.length, 3, 'one chunk per SMALL_CHUNK single-byte reads')
  t.ok(out.every((c) => c.bytes.length === SMALL_CHUNK))
  send(Buffer.alloc(100, 1))
  send(Buffer.alloc(3 * SMALL_CHUNK, 2)) // a large read: what was gathered goes first, then the read itself
  t.same(out.slice(3).map((c) => c.bytes.length), [100, 3 * SMALL_CHUNK])
  send(Buffer.alloc(SMALL_CHUNK - 1, 3))
  send(Buffer.alloc(SMALL_CHUNK - 1, 4)) // two reads just below SMALL_CHUNK fit together
  t.same(out.slice(5).map((c) => c.bytes.length), [2 * SMALL_CHUNK - 2])
  send(Buffer.alloc(5, 5))
  send(Buffer.alloc(0), true) // uWS's empty last read flushes what is gathered
  t.same(out.slice(6).map((c) => [c.bytes.length, c.last]), [[5, true]])
  t.equal(Buffer.concat(out.map((c) => c.bytes)).compare(Buffer.concat(sent)), 0, 'every byte, in order')
})

t.test('a growing body keeps its bytes in one buffer and hands back exactly them', async (t) => {
  const limit = 1024 * 1024
  const body = new GrowingBody(limit)
  const parts: Buffer[] = []
  for (let i = 0; i < 20_000; i++) {
    const b = Buffer.from([i & 0xff, (i >> 8) & 0xff, 7])
    parts.push(b)
    body.append(b)
  }
  t.equal(body.size, 60_000)
  t.equal(body.bytes().compare(Buffer.concat(parts)), 0)
  const big = new GrowingBody(limit)
  big.append(Buffer.alloc(limit - 10, 1))
  big.append(Buffer.alloc(10, 2))
  t.equal(big.bytes().length, limit, 'never past the limit')
  t.equal(new GrowingBody(limit).bytes().length, 0)

  const one = Buffer.from('{"a":1}')
  const kept = new GrowingBody(limit)
  kept.keep(one)
  t.equal(kept.bytes(), one, 'a body of one kept read is that read, uncopied')
  const second = Buffer.from(',"b":2}')
  kept.keep(second)
  t.equal(kept.bytes().toString(), '{"a":1},"b":2}', 'a second read joins it')
  t.not(kept.bytes(), one, 'in a buffer of its own')
  t.equal(one.toString(), '{"a":1}', 'the first read left as it was')
  for (let i = 0; i < 1000; i++) kept.keep(Buffer.from([0x20]))
  t.equal(kept.size, one.length + second.length + 1000)
  t.equal(kept.bytes().length, kept.size)
})

/** Sends `head` then `body` one byte per write (Nagle off), and returns the whole HTTP response. */
function byteByByte(url: string, head: string, body: Buffer): Promise<string> {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname)
    s.setNoDelay(true)
    let response = ''
    s.on('data', (d: Buffer) => (response += d.toString('latin1')))
    s.on('error', reject)
    s.on('end', () => resolve(response))
    s.on('connect', () => {
      s.write(head)
      let at = 0
      const tick = (): void => {
        for (let i = 0; i < 64 && at < body.length; i++) s.write(body.subarray(at, ++at))
        if (at < body.length) setImmediate(tick)
      }
      tick()
    })
  })
}

t.test('through the router, bodies sent a byte at a time arrive whole', async (t) => {
  // A speech-to-text provider that answers the sha256 of what it received.
  const server = createServer((req, res) => {
    const hash = createHash('sha256')
    req.on('data', (c: Buffer) => hash.update(c))
    req.on('end', () => res.end(JSON.stringify({ text: hash.digest('hex') })))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const stt: TestModel = { id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.0001' } }
  const stack = await startStack(t, [
    { address: A, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, models: [stt] },
    { address: '0x' + 'c'.repeat(40), models: [{ id: 'chat-model' }] },
  ])
  const auth = `Authorization: ${stack.auth.authorization}\r\nConnection: close\r\n`

  const chat = Buffer.from(JSON.stringify({ model: 'chat-model', messages: [{ role: 'user', content: 'x'.repeat(40_000) }] }))
  const chatAnswer = await byteByByte(stack.url, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${auth}Content-Length: ${chat.length}\r\n\r\n`, chat)
  t.match(chatAnswer, /^HTTP\/1\.1 200/, 'the JSON request, one byte per write, is answered')
  t.match(chatAnswer, /"x_svc_trace"/)

  const file = wav(1)
  randomBytes(file.length - 44).copy(file, 44)
  const form = Buffer.concat([
    Buffer.from(`--b\r\nContent-Disposition: form-data; name="model"\r\n\r\n${AUDIO_MODEL}\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    file,
    Buffer.from('\r\n--b--\r\n'),
  ])
  const formAnswer = await byteByByte(stack.url, `POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n${auth}Content-Length: ${form.length}\r\n\r\n`, form)
  t.match(formAnswer, /^HTTP\/1\.1 200/, 'the upload, one byte per write, is answered')
  const json = JSON.parse(formAnswer.slice(formAnswer.indexOf('\r\n\r\n') + 4))
  t.equal(json.text, createHash('sha256').update(form).digest('hex'), 'the provider received exactly the bytes sent')
})

t.test('through the router, a provider answering a byte per write is relayed whole (answers and errors)', async (t) => {
  const content = 'ab'.repeat(30_000)
  const ok = Buffer.from(JSON.stringify({
    id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'chat-model',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 3, completion_tokens: 7, total_tokens: 10 },
  }))
  const refusal = Buffer.from(JSON.stringify({ error: { message: 'x'.repeat(3000), type: 'invalid_request_error' } }))
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const [status, body] = req.url!.startsWith('/refuse') ? [400, refusal] : [200, ok]
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': body.length })
      res.socket!.setNoDelay(true)
      let at = 0
      const tick = (): void => {
        for (let i = 0; i < 16 && at < body.length; i++) res.write(body.subarray(at, ++at))
        if (at < body.length) setImmediate(tick)
        else res.end()
      }
      tick()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const stack = await startStack(t, [
    { address: A, url: base, models: [{ id: 'chat-model' }] },
    { address: '0x' + 'd'.repeat(40), url: base + '/refuse', models: [{ id: 'refused-model' }] },
  ])
  const res = await fetch(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: 'chat-model', messages: [{ role: 'user', content: 'hi' }] }),
  })
  t.equal(res.status, 200)
  const answer = (await res.json()) as any
  t.equal(answer.choices[0].message.content, content, 'every byte of the answer, in order')
  t.equal(answer.x_svc_trace.usage.completion_tokens, 7, 'and its usage read and billed')
  const refused = await fetch(stack.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...stack.auth },
    body: JSON.stringify({ model: 'refused-model', messages: [{ role: 'user', content: 'hi' }] }),
  })
  t.equal(refused.status, 400)
  t.match(((await refused.json()) as any).error.message, /^x{3000}$/, "the provider's refusal, whole")
})
