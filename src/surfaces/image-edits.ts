/**
 * POST /v1/images/edits (spec §4.1, multipart; routing by headers only): the upload (image, optional mask,
 * prompt…) streamed to the provider as the client sent it. Reserved as n × image price (n as far as the scan saw
 * it, else the most a request may ask for), billed per image of the answer's `data[]`.
 */
import { imageCost, imageWorstCase, type ImageUsage } from '../billing/cost.js'
import { RequiredParts } from '../codecs/multipart.js'
import { ImagesJsonCodec } from '../codecs/openai-media.js'
import { renderError, RouterError } from '../errors.js'
import { DIMENSION_IMAGE } from '../routing/select.js'
import type { AttemptPlan } from '../upstream/plan.js'
import { imageCount, MAX_IMAGES } from './images.js'
import { multipartRequest, type MultipartRequest } from './multipart-request.js'
import type { MultipartSurface } from './surface.js'

export interface ImageEditRequest extends MultipartRequest {
  readonly n: number
}

export const EDITS_PATH = '/v1/images/edits'
const CHECKED = { response_format: new Set(['b64_json', 'url']) }

export const imageEdits: MultipartSurface<ImageEditRequest, ImageUsage> = {
  name: 'image_edits',
  modelType: 'text-to-image',
  dimension: DIMENSION_IMAGE,
  fileField: '',
  singleParts: new Set(['model', 'n', ...Object.keys(CHECKED)]),
  // What every provider refuses an edit without: refused here, before a job exists or a provider is asked.
  requiredParts: new RequiredParts({ image: ['image', 'image[]'], prompt: ['prompt'] }),
  // Every field is read before admission, so `n` (and response_format) are known wherever they come.
  wholeForm: true,
  fromForm(form, upload, head) {
    const req = multipartRequest(form, upload, head, CHECKED)
    if (req instanceof RouterError) return req
    if (form.fields.get('prompt') === '') return new RouterError('invalid_request', 'the multipart field prompt must be a non-empty string')
    // Absent from a form read whole: the default, 1. A form past upstream.replay_buffer_bytes is read only that
    // far: an `n` after that point is not known, and the most an edit may ask for is held.
    const n = imageCount(form.fields.get('n'), form.whole ? 1 : MAX_IMAGES)
    if (n instanceof RouterError) return n
    return { ...req, n }
  },
  plan(req): AttemptPlan<ImageUsage> {
    return { path: EDITS_PATH, headers: req.headers, body: req.upload.body, codec: new ImagesJsonCodec() }
  },
  worstCase(req, offer) {
    return imageWorstCase(offer, req.n)
  },
  cost: imageCost,
  renderError,
}
