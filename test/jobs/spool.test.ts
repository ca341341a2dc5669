/**
 * SpoolBody (jobs/spool.ts) on a real directory: no file exists before open(), chunks that came before it are
 * written once it runs, and a discard leaves no file, even one that comes while the file is still being opened
 * (the open runs on the thread pool after the call; a deletion issued at once would come first and the file
 * would be created after it, to stay forever).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { SpoolBody } from '../../src/jobs/spool.js'
import type { BodySource } from '../../src/upstream/request-body.js'

/** A body source the test feeds by hand, recording pauses and resumes. */
function source() {
  let handler: ((chunk: Buffer, last: boolean) => void) | null = null
  const state = { paused: false, pauses: 0 }
  const src: BodySource = {
    onChunk: (h) => (handler = h),
    pause: () => {
      state.paused = true
      state.pauses++
    },
    resume: () => (state.paused = false),
  }
  return { src, state, push: (chunk: string, last = false) => handler!(Buffer.from(chunk), last) }
}

function written(spool: SpoolBody): Promise<Error | null> {
  return new Promise((resolve) => spool.whenWritten(resolve))
}

const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 100))

t.test('nothing is on disk before open(); what came before is written after it, the client paused meanwhile', async (t) => {
  const dir = t.testdir()
  const { src, state, push } = source()
  let prepared = 0
  const spool = new SpoolBody(src, join(dir, 'a.upload'), () => prepared++)
  push('hello ')
  t.equal(state.paused, true, 'held until admitted')
  push('world', true)
  await settle()
  t.same(readdirSync(dir), [], 'no file before open()')
  t.equal(prepared, 0)
  spool.open()
  t.equal(prepared, 1)
  t.equal(state.paused, false, 'resumed once open')
  t.equal(await written(spool), null)
  t.equal(readFileSync(join(dir, 'a.upload'), 'utf8'), 'hello world')
  t.equal(spool.bytes, 11)
})

t.test('discarded before open(): no file is ever created', async (t) => {
  const dir = t.testdir()
  const { src, state, push } = source()
  const spool = new SpoolBody(src, join(dir, 'b.upload'))
  push('x')
  spool.discard()
  t.equal(state.paused, false, 'the rest of the upload is read and dropped')
  spool.open()
  await settle()
  t.same(readdirSync(dir), [])
})

t.test('discarded while its file is being opened, or once written: the file is deleted', async (t) => {
  const dir = t.testdir()
  for (let i = 0; i < 50; i++) {
    const { src } = source()
    const spool = new SpoolBody(src, join(dir, `racing-${i}.upload`))
    spool.open()
    spool.discard()
  }
  const { src, push } = source()
  const whole = new SpoolBody(src, join(dir, 'whole.upload'))
  whole.open()
  push('all of it', true)
  t.equal(await written(whole), null)
  t.ok(existsSync(join(dir, 'whole.upload')))
  whole.discard()
  await settle()
  t.same(readdirSync(dir), [], 'no file left')
})

t.test('a claimed upload is the job\'s: discard() leaves it', async (t) => {
  const dir = t.testdir()
  const { src, push } = source()
  const spool = new SpoolBody(src, join(dir, 'c.upload'))
  spool.open()
  push('job data', true)
  t.equal(await written(spool), null)
  t.equal(spool.claim(), true)
  spool.discard()
  await settle()
  t.same(readdirSync(dir), ['c.upload'])
})
