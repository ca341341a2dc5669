import t from 'tap'
import { formatUsd, perTokenPrice, parseUsd } from '../../src/billing/money.js'
t.equal(formatUsd(perTokenPrice('0.07')! * 3n), '0.00000021')
t.equal(parseUsd('1.5'), 1_500_000_000_000_000_000n)
