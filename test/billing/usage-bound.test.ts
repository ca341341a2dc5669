/**
 * The usage bound at its edges (billing/usage-bound.ts): a count is believed from 0 to 10^9 whole; the next
 * integer, a fraction, a string or Infinity is no count, and the usage is the estimate.
 */
import t from 'tap'
import { meteredUsage } from '../../src/billing/cost.js'
import { MAX_USAGE_COUNT } from '../../src/billing/usage-bound.js'
import { meteredAnthropicUsage } from '../../src/codecs/anthropic-wire.js'
import { chatUsageOfResponses } from '../../src/codecs/responses-wire.js'

const ESTIMATE = { prompt_tokens: 25, completion_tokens: 3, total_tokens: 28, estimated: true }

t.test('chat usage: at the bound believed, past it (or not a whole number) estimated', async (t) => {
  t.strictSame(meteredUsage({ prompt_tokens: MAX_USAGE_COUNT, completion_tokens: 0 }, 100, 3), { prompt_tokens: MAX_USAGE_COUNT, completion_tokens: 0, total_tokens: MAX_USAGE_COUNT })
  for (const bad of [MAX_USAGE_COUNT + 1, Number.MAX_SAFE_INTEGER, Infinity, -1, 0.5, '7', null]) {
    t.strictSame(meteredUsage({ prompt_tokens: 7, completion_tokens: bad }, 100, 3), ESTIMATE, `completion_tokens ${String(bad)}`)
    t.strictSame(meteredUsage({ prompt_tokens: bad, completion_tokens: 7 }, 100, 3), ESTIMATE, `prompt_tokens ${String(bad)}`)
  }
  t.strictSame(meteredUsage({ prompt_tokens: 7, completion_tokens: 2, total_tokens: Number.MAX_SAFE_INTEGER }, 100, 3), { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 }, 'a total past the bound is the sum')
})

t.test('Anthropic usage: input plus cache tokens past the bound is no count', async (t) => {
  t.strictSame(meteredAnthropicUsage({ input_tokens: 5, output_tokens: 2, cache_read_input_tokens: 10 }, 100, 3), { prompt_tokens: 15, completion_tokens: 2, total_tokens: 17 })
  t.strictSame(meteredAnthropicUsage({ input_tokens: MAX_USAGE_COUNT, output_tokens: 2, cache_read_input_tokens: 1 }, 100, 3), ESTIMATE)
  t.strictSame(meteredAnthropicUsage({ input_tokens: 5, output_tokens: MAX_USAGE_COUNT + 1 }, 100, 3), ESTIMATE)
})

t.test('Responses usage: counts past the bound are none', async (t) => {
  t.strictSame(chatUsageOfResponses({ input_tokens: MAX_USAGE_COUNT, output_tokens: 1 }), { prompt_tokens: MAX_USAGE_COUNT, completion_tokens: 1 })
  t.equal(chatUsageOfResponses({ input_tokens: MAX_USAGE_COUNT + 1, output_tokens: 1 }), null)
})
