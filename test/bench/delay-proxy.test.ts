/**
 * The bench's delay proxy (bench/e2e/delay-proxy.ts), in front of an echo server on loopback: bytes pass
 * intact and in order both ways, no chunk leaves before its delay (the release rule allows 20 µs early at
 * most), and a delay of 0 relays at once. No upper bound is asserted: how late it is, is what it reports.
 */
import { randomBytes } from 'node:crypto'
import { connect, createServer, type Server } from 'node:net'
import t from 'tap'
import { DelayLine, DelayProxy } from '../../bench/e2e/delay-proxy.js'

async function echoServer(t: { teardown(fn: () => unknown): void }): Promise<Server> {
  const server = createServer((s) => s.pipe(s))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return server
}

/** Sends `payload` through the proxy in pieces and reads the echo back whole. */
async function roundTrip(port: number, payload: Buffer): Promise<Buffer> {
  const socket = connect(port, '127.0.0.1')
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
  const parts: Buffer[] = []
  let got = 0
  const back = new Promise<Buffer>((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => {
      parts.push(chunk)
      got += chunk.length
      if (got >= payload.length) resolve(Buffer.concat(parts))
    })
    socket.once('error', reject)
  })
  for (let at = 0; at < payload.length; at += 7_919) socket.write(payload.subarray(at, at + 7_919))
  const echoed = await back
  socket.destroy()
  return echoed
}

for (const oneWay of [0, 0.5]) {
  t.test(`${oneWay} ms each way: bytes intact and in order, none early`, async (t) => {
    const server = await echoServer(t)
    const line = new DelayLine(oneWay)
    const proxy = await DelayProxy.start((server.address() as { port: number }).port, line)
    t.teardown(async () => {
      await proxy.close()
      line.close()
    })
    const payload = randomBytes(1 << 20)
    const echoed = await roundTrip(proxy.port, payload)
    t.ok(echoed.equals(payload), 'the echo is the payload')
    const held = line.held()
    t.ok(held !== null && held.count > 0, 'chunks were held and counted')
    if (oneWay === 0) t.equal(held!.max, 0, 'no wait at 0 ms')
    // The proxy writes what is due within 20 µs of its tick; its times are epoch ms in doubles (a step of 0.24 µs
    // at today's epoch), so the bound is that, give or take a microsecond of rounding.
    else t.ok(held!.min >= oneWay - 0.02 - 0.001, `no chunk left before its delay (min held ${held!.min} ms)`)
  })
}
