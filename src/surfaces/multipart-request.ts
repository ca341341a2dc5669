/**
 * What the multipart surfaces (image edits, transcriptions) share: the request the engine runs, built from the
 * scanned form head and the upload, and the upstream headers that send the client's bytes on unchanged.
 */
import type { FormHead } from '../codecs/multipart.js'
import { RouterError } from '../errors.js'
import type { RequestHead } from '../server/request-head.js'
import type { SurfaceRequest, Upload } from './surface.js'

export interface MultipartRequest extends SurfaceRequest {
  readonly upload: Upload
  readonly fields: ReadonlyMap<string, string>
  /** Upstream headers: the client's Content-Type (its boundary) and Content-Length when it sent one. */
  readonly headers: readonly string[]
}

/** The common part of a multipart request; the 400 when `model` is empty or a checked field is out of range. */
export function multipartRequest(form: FormHead, upload: Upload, head: RequestHead, allowed: Readonly<Record<string, ReadonlySet<string>>>): MultipartRequest | RouterError {
  const model = form.fields.get('model') ?? ''
  if (model.length === 0) return new RouterError('invalid_request', 'the multipart field model must be a non-empty string')
  for (const name in allowed) {
    const value = form.fields.get(name)
    if (value !== undefined && !allowed[name]!.has(value)) {
      return new RouterError('invalid_request', `${name} must be one of ${[...allowed[name]!].join(', ')}`)
    }
  }
  const headers = ['content-type', head.contentType, 'accept', 'application/json, text/plain, */*']
  if (upload.declaredLength >= 0) headers.push('content-length', String(upload.declaredLength))
  return {
    model,
    stream: false,
    paramMask: 0,
    maxOutput: -1,
    provider: undefined,
    promptBytes: 0,
    upload,
    fields: form.fields,
    headers,
  }
}
