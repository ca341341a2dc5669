/**
 * The multipart scan stops where it has what routing needs: within the push of the client's chunk that holds
 * `model` and the file's head (not a tick later, after busboy searched the rest of that chunk), and, with
 * headEnough, at the file's header rather than AUDIO_HEAD_BYTES into the file.
 */
import t from 'tap'
import { AUDIO_HEAD_BYTES, audioRate } from '../../src/codecs/audio-duration.js'
import { MultipartScan, type FormHead } from '../../src/codecs/multipart.js'
import type { RouterError } from '../../src/errors.js'
import { wavHeader } from '../helpers/wav.js'

const BOUNDARY = 'scan-boundary'
const CONTENT_TYPE = `multipart/form-data; boundary=${BOUNDARY}`


/** The first 512 KiB of a form: `model`, then a WAV file that goes on past this chunk. */
function firstChunk(): Buffer {
  const opening = Buffer.from(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-x\r\n` +
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`,
  )
  const wav = wavHeader(4 * 1024 * 1024)
  return Buffer.concat([opening, wav, Buffer.alloc(512 * 1024 - opening.length - wav.length, 1)])
}

function scan(headEnough?: (head: Buffer) => boolean): { push: (chunk: Buffer) => void; outcome: () => FormHead | RouterError | null } {
  let outcome: FormHead | RouterError | null = null
  const s = new MultipartScan(CONTENT_TYPE, { limit: 4 * 1024 * 1024, fileField: 'file', fileHeadBytes: AUDIO_HEAD_BYTES, headEnough }, (o) => {
    outcome = o
  })
  return { push: (chunk) => s.push(chunk, false), outcome: () => outcome }
}

t.test('the outcome comes within the push of the chunk that holds model and the whole file head', async (t) => {
  const s = scan()
  s.push(firstChunk())
  const head = s.outcome() as FormHead | null
  t.ok(head !== null && !('status' in head), 'known before push returned')
  t.equal(head!.fields.get('model'), 'whisper-x')
  t.equal(head!.fileHead.length, AUDIO_HEAD_BYTES, 'the file head is AUDIO_HEAD_BYTES long')
  t.notOk(head!.fileWhole, 'and not the whole file')
  t.same(audioRate(head!.fileHead), audioRate(wavHeader(4 * 1024 * 1024)), 'its header reads as sent')
})

t.test('headEnough stops the scan at the header it needs, with the same reading of it', async (t) => {
  const s = scan((head) => audioRate(head) !== null)
  s.push(firstChunk())
  const head = s.outcome() as FormHead | null
  t.ok(head !== null && !('status' in head), 'known before push returned')
  t.ok(head!.fileHead.length >= 44 && head!.fileHead.length < AUDIO_HEAD_BYTES, `a head of ${head!.fileHead.length} bytes, short of AUDIO_HEAD_BYTES`)
  t.notOk(head!.fileWhole, 'not taken for the whole file')
  t.same(audioRate(head!.fileHead), audioRate(wavHeader(4 * 1024 * 1024)), 'read as the full head reads')
})

t.test('a head headEnough does not accept yet is read on to AUDIO_HEAD_BYTES', async (t) => {
  const s = scan(() => false)
  s.push(firstChunk())
  const head = s.outcome() as FormHead | null
  t.ok(head !== null && !('status' in head))
  t.equal(head!.fileHead.length, AUDIO_HEAD_BYTES)
})
