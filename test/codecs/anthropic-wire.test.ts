/** What native and translated Anthropic answers share: the error envelope, and usage as the ledger bills it. */
import t from 'tap'
import { AnthropicJsonCodec } from '../../src/codecs/anthropic-native.js'
import { meteredAnthropicUsage, renderAnthropicError } from '../../src/codecs/anthropic-wire.js'
import { RouterError } from '../../src/errors.js'

t.test('cache creation and cache reads are prompt tokens: Anthropic input_tokens excludes them', async (t) => {
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 100, cache_read_input_tokens: 1000 }
  t.same(meteredAnthropicUsage(usage, 50, 0), { prompt_tokens: 1110, completion_tokens: 5, total_tokens: 1115 })
  const codec = new AnthropicJsonCodec()
  t.ok(codec.read(Buffer.from(JSON.stringify({ id: 'msg_1', content: [], usage }))))
  t.same(codec.usage(50), { prompt_tokens: 1110, completion_tokens: 5, total_tokens: 1115 })
})

t.test('usage that is missing or not counts is estimated, never billed as zero', async (t) => {
  t.equal(meteredAnthropicUsage(undefined, 40, 3).estimated, true)
  t.equal(meteredAnthropicUsage({ input_tokens: -1, output_tokens: 2 }, 40, 3).estimated, true)
})

t.test('the error envelope is Anthropic-shaped with our code', async (t) => {
  const err = new RouterError('insufficient_balance', 'no funds')
  t.same(JSON.parse(renderAnthropicError(err, 'req_1')), {
    type: 'error',
    error: { type: 'payment_error', message: 'no funds', code: 'insufficient_balance' },
    request_id: 'req_1',
  })
  t.same(JSON.parse(renderAnthropicError(err, 'req_1', { a: 1 })).x_svc_trace, { a: 1 })
})
