/**
 * POST /v1/async/images/generations (JSON) and /v1/async/images/edits (multipart), DESIGN.md §4: the sync image
 * surfaces' records under their own names, and how their requests are stored as jobs and rebuilt from them
 * (src/jobs/runner.ts runs them through the same engine). Reserved, routed and billed exactly as the sync ones.
 */
import type { JobKind } from '../jobs/runner.js'
import { FileBody } from '../jobs/spool.js'
import { BufferBody } from '../upstream/request-body.js'
import type { ImageEditRequest } from './image-edits.js'
import { imageEdits } from './image-edits.js'
import { imageGenerations, type ImagesRequest } from './images.js'

export const asyncImageGenerations = { ...imageGenerations, name: 'async_images' }
export const asyncImageEdits = { ...imageEdits, name: 'async_image_edits' }

function count(v: unknown): number {
  const n = Number(v)
  if (!Number.isSafeInteger(n) || n < 1) throw new Error('stored n is not a positive integer')
  return n
}

export const generationJobs: JobKind<ImagesRequest> = {
  name: 'images',
  surface: asyncImageGenerations,
  params: (req) => ({ n: req.n }),
  body: (req) => req.upstream.bytes,
  rebuild(job, params) {
    if (job.body === null) throw new Error('the job has no stored body')
    const upstream = new BufferBody(job.body)
    return { model: job.model, stream: false, paramMask: 0, maxOutput: -1, provider: undefined, promptBytes: upstream.bytes.length, n: count(params.n), upstream }
  },
}

export const editJobs: JobKind<ImageEditRequest> = {
  name: 'image_edits',
  surface: asyncImageEdits,
  params: (req) => ({ n: req.n }),
  body: () => null,
  rebuild(job, params) {
    if (job.bodyPath === null) throw new Error('the job has no spooled upload')
    const bytes = Number(params.bytes)
    const contentType = String(params.contentType ?? '')
    if (!Number.isSafeInteger(bytes) || bytes <= 0 || contentType === '') throw new Error('the stored upload is incomplete')
    const body = new FileBody(job.bodyPath)
    return {
      model: job.model,
      stream: false,
      paramMask: 0,
      maxOutput: -1,
      provider: undefined,
      promptBytes: 0,
      n: count(params.n),
      nKnown: true,
      upload: { body, received: () => bytes, declaredLength: bytes, maxBytes: bytes },
      fields: new Map(),
      // The whole upload is on disk, so its length is known even when the client sent it chunked.
      headers: ['content-type', contentType, 'accept', 'application/json', 'content-length', String(bytes)],
    }
  },
}
