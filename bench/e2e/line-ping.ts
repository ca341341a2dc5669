/**
 * The round trip of the rtt workload's simulated network as it is (replicas-rtt.ts): a Redis PING answered
 * `count` times, one after another, through one of the workload's proxies (delay-proxy.ts), from a process of
 * its own (this file, with its spec as argument: the proxies run in the bench's process, and a client there
 * would share their event loop). The proxy holds each chunk its set time, but what a round trip through it
 * takes also holds the wake-ups it makes (its clock thread's, its event loop's, the server's, this process's),
 * which a router's request pays the same way: the rtt-p50 row sets the growth of a replica's added p50 against
 * this, the line's round trip at 1 ms minus at 0 ms, rather than against the set delay alone.
 */
import { connect } from 'node:net'
import { runAsLoadProcess } from './processes.js'
import { Samples, type Distribution } from './stats.js'

export interface PingSpec {
  /** A proxy's port on 127.0.0.1, in front of a Redis server. */
  readonly port: number
  /** Round trips not counted first (the connection's and the JIT's start). */
  readonly warmup: number
  readonly count: number
  /** The whole run's bound (ms): past it the pings stop and the result holds those made. */
  readonly maxMs: number
}

const PING = Buffer.from('PING\r\n')
const PONG = '+PONG\r\n'

/** The round trips (ms) of `count` PINGs after `warmup`. */
export function ping(spec: PingSpec): Promise<Distribution> {
  return new Promise((resolve, reject) => {
    const samples = new Samples(spec.count)
    const socket = connect({ port: spec.port, host: '127.0.0.1', noDelay: true })
    const stopAt = performance.now() + spec.maxMs
    let sent = 0
    let at = 0
    let answer = ''
    const next = (): void => {
      if (sent === spec.warmup + spec.count || performance.now() > stopAt) {
        socket.end()
        return resolve(samples.distribution())
      }
      sent++
      answer = ''
      at = performance.now()
      socket.write(PING)
    }
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString('latin1')
      if (answer.length < PONG.length) return
      const took = performance.now() - at
      if (answer !== PONG) {
        socket.destroy()
        return reject(new Error(`not a PONG: ${JSON.stringify(answer.slice(0, 80))}`))
      }
      if (sent > spec.warmup) samples.push(took)
      next()
    })
    socket.once('connect', next)
    socket.once('error', reject)
    // Closed by the other side before the last PONG (after it, the promise is settled and this does nothing).
    socket.once('close', () => reject(new Error(`the connection closed after ${sent} PINGs`)))
  })
}

runAsLoadProcess(import.meta.url, ping)
