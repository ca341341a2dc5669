import t from 'tap'
import { SseRelay } from '../../src/upstream/sse-relay.js'

const ID = 'chatcmpl-abc123'
function chunk(delta: string, extra = ''): string {
  return `data: {"id":"${ID}","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${delta}"},"finish_reason":null}]${extra}}\n\n`
}
const USAGE_EVENT = `data: {"id":"${ID}","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}\n\n`
const DONE = 'data: [DONE]\n\n'
const BODY = chunk('', ',"usage":null') + chunk(' a', ',"usage":null') + chunk(' b', ',"usage":null') + chunk(' c', ',"usage":null') + USAGE_EVENT + DONE

function relayAll(parts: Buffer[], withhold: boolean): { out: string; relay: SseRelay; emits: number } {
  const relay = new SseRelay(withhold)
  const out: Buffer[] = []
  let emits = 0
  const emit = (b: Buffer): void => {
    emits++
    out.push(Buffer.from(b))
  }
  for (const p of parts) relay.push(p, emit)
  relay.finish(emit)
  return { out: Buffer.concat(out).toString(), relay, emits }
}

t.test('a stream split at every byte boundary relays the same events, holds back [DONE] and reads usage', async (t) => {
  const bytes = Buffer.from(BODY)
  for (let cut = 1; cut < bytes.length; cut++) {
    const { out, relay } = relayAll([bytes.subarray(0, cut), bytes.subarray(cut)], false)
    if (out !== BODY.slice(0, -DONE.length)) {
      t.fail(`cut at ${cut}: relayed bytes differ`)
      return
    }
    if (!relay.done || relay.chatId !== ID || relay.usage?.completion_tokens !== 3) {
      t.fail(`cut at ${cut}: done=${relay.done} id=${relay.chatId} usage=${JSON.stringify(relay.usage)}`)
      return
    }
  }
  t.pass('every split relays exactly the events before [DONE]')
})

t.test('a stream fed one byte at a time is relayed whole', async (t) => {
  const bytes = Buffer.from(BODY)
  const parts = Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))
  const { out, relay } = relayAll(parts, false)
  t.equal(out, BODY.slice(0, -DONE.length))
  t.ok(relay.done)
  t.equal(relay.usage?.total_tokens, 10)
})

t.test('the usage-only chunk the router asked for is withheld from a client that did not ask', async (t) => {
  const { out, relay } = relayAll([Buffer.from(BODY)], true)
  t.equal(out, BODY.slice(0, -(USAGE_EVENT.length + DONE.length)))
  t.equal(relay.usage?.prompt_tokens, 7, 'usage is still read for billing')
})

t.test('a usage value inside a content chunk is not withheld', async (t) => {
  const withContent = chunk(' x', ',"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}') + DONE
  const { out, relay } = relayAll([Buffer.from(withContent)], true)
  t.equal(out, withContent.slice(0, -DONE.length))
  t.equal(relay.usage?.total_tokens, 2)
})

t.test('a chunk that ends on an event boundary is forwarded without a copy', async (t) => {
  const relay = new SseRelay(false)
  const input = Buffer.from(chunk(' a') + chunk(' b'))
  let seen: Buffer | null = null
  relay.push(input, (b) => {
    seen = b
  })
  t.equal(seen, input, 'the very same Buffer')
})

t.test('CRLF-delimited streams are understood', async (t) => {
  const crlf = BODY.replaceAll('\n\n', '\r\n\r\n')
  const { out, relay } = relayAll([Buffer.from(crlf)], false)
  t.equal(out, crlf.slice(0, -'data: [DONE]\r\n\r\n'.length))
  t.ok(relay.done)
  t.equal(relay.usage?.completion_tokens, 3)
})

t.test('a stream that ends without [DONE] is not marked done', async (t) => {
  const body = chunk(' a') + chunk(' b')
  const { out, relay } = relayAll([Buffer.from(body)], false)
  t.equal(out, body)
  t.notOk(relay.done)
  t.equal(relay.usage, null)
})

t.test('an unterminated [DONE] at the very end still counts', async (t) => {
  const body = chunk(' a') + 'data: [DONE]'
  const { out, relay } = relayAll([Buffer.from(body)], false)
  t.equal(out, chunk(' a'))
  t.ok(relay.done)
})

t.test('escaped "usage" text inside content does not confuse the scanner', async (t) => {
  const tricky = chunk('he said \\"usage\\":{\\"x\\":1}') + DONE
  const { out, relay } = relayAll([Buffer.from(tricky)], true)
  t.equal(out, tricky.slice(0, -DONE.length))
  t.equal(relay.usage, null)
})

t.test('a stream that opens with a comment still yields the chat id from the first data event', async (t) => {
  const body = ': ping\n\n' + chunk(' a') + DONE
  const { out, relay } = relayAll([Buffer.from(': ping\n\n'), Buffer.from(chunk(' a') + DONE)], false)
  t.equal(out, body.slice(0, -DONE.length))
  t.equal(relay.chatId, ID)
})
