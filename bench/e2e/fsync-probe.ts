/**
 * The bare cost of making a write durable on this disk, measured in the run beside the router: the reference of
 * the "durable commit cost" target. Each step overwrites one WAL-frame-sized block (4 KiB page + 24-byte frame
 * header, as a SQLite WAL that is reused after a checkpoint) and fdatasyncs the file, synchronously.
 */
import { closeSync, fdatasyncSync, openSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { distributionOf, type Distribution } from './stats.js'

const FRAME = 4096 + 24
const FRAMES = 16

export function bareFsync(dir: string, count: number): Distribution {
  const fd = openSync(join(dir, 'fsync-probe.bin'), 'w+')
  try {
    const block = Buffer.alloc(FRAME, 7)
    for (let i = 0; i < FRAMES; i++) writeSync(fd, block, 0, FRAME, i * FRAME)
    fdatasyncSync(fd)
    const samples = new Float64Array(count)
    for (let i = 0; i < count; i++) {
      block[0] = i & 0xff
      const t0 = performance.now()
      writeSync(fd, block, 0, FRAME, (i % FRAMES) * FRAME)
      fdatasyncSync(fd)
      samples[i] = performance.now() - t0
    }
    return distributionOf(samples)
  } finally {
    closeSync(fd)
  }
}
