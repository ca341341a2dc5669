/**
 * A streamed answer's head leaves with its first bytes. uWS flushes a corked head on its own, so a head written
 * apart from the first event costs one more send per stream and reaches the client split across two segments;
 * the attempt begins the stream and writes its first bytes inside one cork. Watched through the real path
 * (router, simulator, client) by recording, on the reply, which cork each head and write ran in.
 */
import t, { type Test } from 'tap'
import { request } from 'undici'
import { UwsReply } from '../../src/server/uws-reply.js'
import { addr, startStack } from '../helpers/stack.js'

const MODEL = 'm-chat'

/** Per reply: the cork (an outermost cork() call, numbered) each begin() and write() ran in; 0 is none. */
function watchCorks(t: Test): Map<UwsReply, string[]> {
  const calls = new Map<UwsReply, string[]>()
  const proto = UwsReply.prototype
  const { cork, begin, write } = proto
  let depth = 0
  let corks = 0
  let current = 0
  const note = (reply: UwsReply, what: string): void => {
    let list = calls.get(reply)
    if (list === undefined) calls.set(reply, (list = []))
    list.push(`${what}@${depth === 0 ? 0 : current}`)
  }
  proto.cork = function (this: UwsReply, fn: () => void): void {
    if (depth++ === 0) current = ++corks
    try {
      cork.call(this, fn)
    } finally {
      depth--
    }
  }
  proto.begin = function (this: UwsReply, ...args: Parameters<UwsReply['begin']>): void {
    note(this, 'begin')
    begin.apply(this, args)
  }
  proto.write = function (this: UwsReply, ...args: Parameters<UwsReply['write']>): boolean {
    note(this, 'write')
    return write.apply(this, args)
  }
  t.teardown(() => Object.assign(proto, { cork, begin, write }))
  return calls
}

t.test('the head of a stream and its first bytes go out in one cork, on every streaming surface', async (t) => {
  const calls = watchCorks(t)
  const stack = await startStack(t, [{ address: addr('a'), models: [{ id: MODEL }], sim: { ttftMs: 5, tokensPerS: 500, completionTokens: 3 } }])
  const cases = [
    { name: 'chat, relayed', path: '/v1/chat/completions', body: { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] } },
    {
      name: 'messages, translated from an OpenAI provider',
      path: '/v1/messages',
      body: { model: MODEL, stream: true, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] },
    },
  ]
  for (const c of cases) {
    calls.clear()
    const res = await request(stack.url + c.path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...stack.auth },
      body: JSON.stringify(c.body),
    })
    const text = await res.body.text()
    t.equal(res.statusCode, 200, `${c.name}: answered (${text.slice(0, 200)})`)
    t.match(res.headers['content-type'], /^text\/event-stream/, `${c.name}: a stream`)
    t.equal(calls.size, 1, `${c.name}: one reply`)
    const [log] = [...calls.values()]
    const begin = log!.findIndex((x) => x.startsWith('begin@'))
    t.ok(begin >= 0, `${c.name}: the stream was begun (${log!.join(' ')})`)
    const [, cork] = log![begin]!.split('@')
    t.not(cork, '0', `${c.name}: inside a cork`)
    t.equal(log![begin + 1], `write@${cork}`, `${c.name}: the first write is in the same cork as the head (${log!.join(' ')})`)
    t.ok(log!.length >= 3, `${c.name}: more writes followed (${log!.length - 1})`)
  }
})
