import t from 'tap'
import { normalizeSourceIp } from '../../src/auth/source-ip.js'

t.test('IPv4-mapped IPv6 becomes the IPv4 address, in every spelling', async (t) => {
  t.equal(normalizeSourceIp('::ffff:127.0.0.1'), '127.0.0.1')
  t.equal(normalizeSourceIp('::FFFF:10.1.2.3'), '10.1.2.3')
  t.equal(normalizeSourceIp('::ffff:7f00:1'), '127.0.0.1')
  t.equal(normalizeSourceIp('0000:0000:0000:0000:0000:ffff:c0a8:0101'), '192.168.1.1')
  t.equal(normalizeSourceIp('[::ffff:10.0.0.1]'), '10.0.0.1')
})

t.test('IPv4 stays, IPv6 is canonical, anything else is kept as given', async (t) => {
  t.equal(normalizeSourceIp('10.0.0.1'), '10.0.0.1')
  t.equal(normalizeSourceIp('0000:0000:0000:0000:0000:0000:0000:0001'), '::1')
  t.equal(normalizeSourceIp('2001:DB8:0:0:0:0:0:1'), '2001:db8::1')
  t.equal(normalizeSourceIp('::ffff:0:10.0.0.1'), '::ffff:0:a00:1', 'IPv4-translated (not mapped) is not IPv4')
  t.equal(normalizeSourceIp(''), '')
  t.equal(normalizeSourceIp('unix-socket'), 'unix-socket')
})
