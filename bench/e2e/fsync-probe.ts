/**
 * The bare cost of making a write durable on this disk, measured in the run beside the router: the references
 * of the durable-commit target.
 *
 * - bareFsync: each step overwrites one WAL-frame-sized block (4 KiB page + 24-byte frame header, as a SQLite
 *   WAL that is reused after a checkpoint) and fdatasyncs the file, synchronously (information).
 * - poolFsync (issue 45's reference): the write a charge makes (two WAL frames, the journal row and its unique
 *   index, written on the event loop as SQLite writes them) and then an fdatasync on libuv's thread pool, timed
 *   from the write to the fdatasync's callback: what DESIGN §4 allows a durable commit, the thread pool's
 *   wake-ups included.
 */
import { closeSync, fdatasync, fdatasyncSync, openSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { distributionOf, type Distribution } from './stats.js'

const FRAME = 4096 + 24
const FRAMES = 16
/** Frames a charge appends to the WAL: the journal's row and its request-id index. */
const CHARGE_FRAMES = 2

function probeFile(dir: string, name: string): { fd: number; block: Buffer } {
  const fd = openSync(join(dir, name), 'w+')
  const block = Buffer.alloc(FRAME * CHARGE_FRAMES, 7)
  for (let i = 0; i < FRAMES; i++) writeSync(fd, block, 0, FRAME, i * FRAME)
  fdatasyncSync(fd)
  return { fd, block }
}

export function bareFsync(dir: string, count: number): Distribution {
  const { fd, block } = probeFile(dir, 'fsync-probe.bin')
  try {
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

/** `count` writes of a charge's frames, each made durable by an fdatasync on the thread pool, one after another. */
export async function poolFsync(dir: string, count: number): Promise<Distribution> {
  const { fd, block } = probeFile(dir, 'fsync-pool-probe.bin')
  try {
    const samples = new Float64Array(count)
    for (let i = 0; i < count; i++) {
      block[0] = i & 0xff
      const t0 = performance.now()
      writeSync(fd, block, 0, block.length, (i % (FRAMES / CHARGE_FRAMES)) * block.length)
      await new Promise<void>((resolve, reject) => fdatasync(fd, (err) => (err === null ? resolve() : reject(err))))
      samples[i] = performance.now() - t0
    }
    return distributionOf(samples)
  } finally {
    closeSync(fd)
  }
}
