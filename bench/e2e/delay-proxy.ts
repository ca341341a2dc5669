/**
 * A fleet's network, simulated (issue 45): a TCP proxy that holds every chunk a fixed time in each direction
 * before passing it on, put between the replicas and their PostgreSQL and Redis (this kernel has no netem).
 *
 * Node's timers have a granularity of 1 ms (libuv's clock and epoll's timeout are milliseconds), too coarse
 * for 0.5 ms. The proxy therefore keeps one queue of chunks in arrival order (every chunk is held the same
 * time, so that is also the order they are due in) and a thread of its own as the clock: it sleeps in
 * Atomics.wait (a futex with a sub-millisecond timeout) until the head of the queue is due, then wakes the
 * event loop with a message, which writes every chunk due by then. What a chunk was actually held (from its
 * arrival to its write) is recorded, so the report can say what the proxy itself adds over the set delay. The
 * clock is set early by the wake-up's own latency (a running average of how late the loop got the message),
 * so chunks leave close to when they are due rather than a wake-up after.
 * With a delay of 0 it relays at once, no clock involved: the same hop, without the wait.
 */
import { createServer, connect, type Server, type Socket } from 'node:net'
import { Worker } from 'node:worker_threads'
import { Samples, type Distribution } from './stats.js'

const CLOCK_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const gen = new Int32Array(workerData, 0, 1)
const due = new Float64Array(workerData, 8, 1)
const now = () => performance.timeOrigin + performance.now()
for (;;) {
  const g = Atomics.load(gen, 0)
  if (g < 0) break
  const at = due[0]
  if (at === 0) {
    Atomics.wait(gen, 0, g)
    continue
  }
  const wait = at - now()
  // Woken early when re-armed (a changed generation); within 10 µs of due, fire.
  if (wait > 0.01) {
    Atomics.wait(gen, 0, g, wait)
    continue
  }
  due[0] = 0
  parentPort.postMessage(0)
}
`

interface Held {
  readonly to: Socket
  /** null: end the socket (the other side ended), in order after the data before it. */
  readonly chunk: Buffer | null
  readonly arrived: number
}

/** Most samples of held time kept (a long run keeps its first ones). */
const MAX_SAMPLES = 500_000

const clock = (): number => performance.timeOrigin + performance.now()

/** One delay, one clock thread, one queue for every connection of the proxies that share it. */
export class DelayLine {
  readonly oneWayMs: number
  readonly #queue: Held[] = []
  #head = 0
  #armed = false
  /** When the armed tick was asked for, and the average wake-up latency (ms) it is asked that much early for. */
  #armedFor = 0
  #lead = 0.05
  readonly #worker: Worker | null
  readonly #gen: Int32Array
  readonly #due: Float64Array
  readonly #held = new Samples(4096)

  constructor(oneWayMs: number) {
    this.oneWayMs = oneWayMs
    const shared = new SharedArrayBuffer(16)
    this.#gen = new Int32Array(shared, 0, 1)
    this.#due = new Float64Array(shared, 8, 1)
    if (oneWayMs <= 0) {
      this.#worker = null
      return
    }
    this.#worker = new Worker(CLOCK_SOURCE, { eval: true, workerData: shared })
    this.#worker.on('message', this.#tick)
    this.#worker.on('error', (err) => process.stderr.write(`delay proxy: the clock thread failed: ${err.message}\n`))
    this.#worker.unref()
  }

  /** Passes `chunk` (or the end, null) on to `to` after the delay. */
  send(to: Socket, chunk: Buffer | null): void {
    const arrived = clock()
    if (this.#worker === null) return this.#write({ to, chunk, arrived }, arrived)
    this.#queue.push({ to, chunk, arrived })
    if (!this.#armed) this.#arm(arrived + this.oneWayMs)
  }

  #arm(at: number): void {
    this.#armed = true
    this.#armedFor = at - this.#lead
    this.#due[0] = this.#armedFor
    Atomics.add(this.#gen, 0, 1)
    Atomics.notify(this.#gen, 0)
  }

  readonly #tick = (): void => {
    this.#armed = false
    const now = clock()
    // Wake-ups later than 2 ms are outside load (a descheduled loop), not the clock's latency: not averaged in.
    const late = now - this.#armedFor
    if (late >= 0 && late < 2) this.#lead += (late - this.#lead) / 16
    const q = this.#queue
    while (this.#head < q.length && q[this.#head]!.arrived + this.oneWayMs <= now + 0.02) this.#write(q[this.#head++]!, now)
    if (this.#head === q.length) {
      q.length = 0
      this.#head = 0
    } else {
      if (this.#head > 1024) {
        q.splice(0, this.#head)
        this.#head = 0
      }
      this.#arm(q[this.#head]!.arrived + this.oneWayMs)
    }
  }

  #write(h: Held, now: number): void {
    if (this.#held.length < MAX_SAMPLES) this.#held.push(now - h.arrived)
    if (h.to.destroyed) return
    if (h.chunk === null) h.to.end()
    else h.to.write(h.chunk)
  }

  /** How long chunks were held, from arrival to write (ms); null before any. */
  held(): Distribution | null {
    return this.#held.length === 0 ? null : this.#held.distribution()
  }

  close(): void {
    Atomics.store(this.#gen, 0, -1)
    Atomics.notify(this.#gen, 0)
    void this.#worker?.terminate()
  }
}

/** A listening proxy to `port` on 127.0.0.1 through `line`. */
export class DelayProxy {
  readonly #server: Server
  readonly #sockets = new Set<Socket>()

  private constructor(server: Server) {
    this.#server = server
  }

  get port(): number {
    const address = this.#server.address()
    return typeof address === 'object' && address !== null ? address.port : 0
  }

  static start(targetPort: number, line: DelayLine): Promise<DelayProxy> {
    const server = createServer({ noDelay: true })
    const proxy = new DelayProxy(server)
    server.on('connection', (client) => proxy.#pair(client, targetPort, line))
    return new Promise((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => resolve(proxy))
    })
  }

  #pair(client: Socket, targetPort: number, line: DelayLine): void {
    const upstream = connect({ port: targetPort, host: '127.0.0.1', noDelay: true })
    for (const [from, to] of [[client, upstream], [upstream, client]] as const) {
      this.#sockets.add(from)
      from.on('data', (chunk: Buffer) => line.send(to, chunk))
      from.on('end', () => line.send(to, null))
      // Backpressure: a side that cannot take more stops the other's reads until it drains.
      to.on('drain', () => from.resume())
      from.on('data', () => {
        if (to.writableNeedDrain) from.pause()
      })
      from.on('error', () => to.destroy())
      from.on('close', () => {
        this.#sockets.delete(from)
        to.destroy()
      })
    }
  }

  close(): Promise<void> {
    for (const s of this.#sockets) s.destroy()
    return new Promise((resolve) => this.#server.close(() => resolve()))
  }
}
