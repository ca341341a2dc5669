/**
 * The simulator's multipart reader: fields whole, files streamed through and counted, keeping only their first
 * bytes (enough for an audio header), so a 50 MiB upload costs the simulator no more memory than a small one.
 */
import type { IncomingMessage } from 'node:http'
import busboy from 'busboy'
import { AUDIO_HEAD_BYTES } from '../codecs/audio-duration.js'

export interface FormFile {
  readonly field: string
  readonly filename: string
  readonly mimeType: string
  readonly bytes: number
  /** The file's first bytes (at most AUDIO_HEAD_BYTES). */
  readonly head: Buffer
}

export interface Form {
  readonly fields: Record<string, string>
  readonly files: FormFile[]
  /** Every byte of the request body. */
  readonly bodyBytes: number
}

/** Reads `req` as multipart/form-data; `done` gets the form, or the error that made it unreadable. */
export function readForm(req: IncomingMessage, done: (form: Form | Error) => void): void {
  let finished = false
  const finish = (outcome: Form | Error): void => {
    if (finished) return
    finished = true
    done(outcome)
  }
  let bb: busboy.Busboy
  try {
    bb = busboy({ headers: req.headers, limits: { fieldSize: 1024 * 1024 } })
  } catch (err) {
    req.resume()
    return finish(err as Error)
  }
  const fields: Record<string, string> = {}
  const files: FormFile[] = []
  let bodyBytes = 0
  let open = 0
  let parsed = false
  const settle = (): void => {
    if (parsed && open === 0) finish({ fields, files, bodyBytes })
  }
  bb.on('field', (name, value) => {
    fields[name] = value
  })
  bb.on('file', (field, stream, info) => {
    open++
    const parts: Buffer[] = []
    let kept = 0
    let bytes = 0
    stream.on('data', (chunk: Buffer) => {
      bytes += chunk.length
      if (kept < AUDIO_HEAD_BYTES) {
        const take = chunk.subarray(0, AUDIO_HEAD_BYTES - kept)
        parts.push(Buffer.from(take))
        kept += take.length
      }
    })
    stream.on('end', () => {
      files.push({ field, filename: info.filename ?? '', mimeType: info.mimeType, bytes, head: Buffer.concat(parts) })
      open--
      settle()
    })
  })
  bb.on('error', (err) => finish(err as Error))
  bb.on('close', () => {
    parsed = true
    settle()
  })
  req.on('data', (chunk: Buffer) => {
    bodyBytes += chunk.length
  })
  req.on('aborted', () => finish(new Error('client aborted the upload')))
  req.pipe(bb)
}
