import t from 'tap'
import { responseHead } from '../../src/upstream/attempt.js'

const raw = (...pairs: string[]): Buffer[] => pairs.map((p) => Buffer.from(p, 'latin1'))

t.test('the four headers the router reads are picked from the raw list in any case', async (t) => {
  const head = responseHead(raw('Date', 'x', 'Content-Type', 'application/json', 'RETRY-AFTER', '7', 'X-Request-Id', 'abc-1', 'ZG-Res-Key', 'chat-9', 'content-length', '2'))
  t.same(head, { contentType: 'application/json', retryAfter: '7', requestId: 'abc-1', resKey: 'chat-9' })
})

t.test('absent headers read as empty, and so does a header sent twice', async (t) => {
  t.same(responseHead(raw('server', 'sim')), { contentType: '', retryAfter: '', requestId: '', resKey: '' })
  const twice = responseHead(raw('content-type', 'text/html', 'Content-Type', 'application/json', 'x-request-id', 'a'))
  t.equal(twice.contentType, '')
  t.equal(twice.requestId, 'a')
})

t.test('names of the same length that differ are not taken for them', async (t) => {
  // 12 and 11 bytes long, like content-type / x-request-id and retry-after.
  const head = responseHead(raw('content-typf', 'no', 'x-request-ie', 'no', 'retry-aftes', 'no'))
  t.same(head, { contentType: '', retryAfter: '', requestId: '', resKey: '' })
})

t.test('a value is read byte for byte (latin1), never split or trimmed further', async (t) => {
  const head = responseHead(raw('content-type', 'text/event-stream; charset=utf-8'))
  t.equal(head.contentType, 'text/event-stream; charset=utf-8')
})
