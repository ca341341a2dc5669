/**
 * POST /v1/images/edits (spec §4.1, multipart; routing by headers only): the upload (image, optional mask,
 * prompt…) streamed to the provider as the client sent it, from the moment its `model` field is known. Billed
 * per image of the answer's `data[]`.
 *
 * The hold is n × image price for the `n` the form gave before routing; while it may still come (the form has
 * not ended), the most an edit may ask for (MAX_IMAGES) is held, lowered once it came (Failover.repriced). A budget that cannot hold that much waits for
 * the rest of the form (within upstream.replay_buffer_bytes) before it is refused: an `n` that comes, or the
 * form's end without one (1), sets the hold then. The fields read after routing are checked as the bytes that
 * end them go by (lateField): one that breaks a rule fails the request with its 400, the provider's request is
 * cancelled, and nothing is billed; an answer goes out only once the whole upload came and passed (answerWhen).
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
  /**
   * Images the edit may ask for, as far as the form told: its `n`, 1 once it ended without one, else MAX_IMAGES.
   * Set again as the upload streams on (lateField, formEnded): the hold of a later attempt is priced on it.
   */
  n: number
  /** Whether `n` is the form's own (given, or the default of a form that ended without one). */
  nKnown: boolean
}

export const EDITS_PATH = '/v1/images/edits'
const CHECKED = { response_format: new Set(['b64_json', 'url']) }

function invalidPrompt(): RouterError {
  return new RouterError('invalid_request', 'the multipart field prompt must be a non-empty string')
}

export const imageEdits: MultipartSurface<ImageEditRequest, ImageUsage> = {
  name: 'image_edits',
  modelType: 'text-to-image',
  dimension: DIMENSION_IMAGE,
  fileField: '',
  singleParts: new Set(['model', 'n', ...Object.keys(CHECKED)]),
  // What every provider refuses an edit without: refused here, before a job exists or a provider is asked.
  requiredParts: new RequiredParts({ image: ['image', 'image[]'], prompt: ['prompt'] }),
  // Async edits run from the spooled upload: their form is read whole (within the buffer) before the job exists.
  wholeForm: true,
  lateFields: new Set(['n', 'prompt', ...Object.keys(CHECKED)]),
  fromForm(form, upload, head) {
    const req = multipartRequest(form, upload, head, CHECKED)
    if (req instanceof RouterError) return req
    if (form.fields.get('prompt') === '') return invalidPrompt()
    // Absent from a form read whole: the default, 1. Else it may still come: the most an edit may ask for.
    const given = form.fields.get('n')
    const n = imageCount(given, form.whole ? 1 : MAX_IMAGES)
    if (n instanceof RouterError) return n
    return { ...req, n, nKnown: given !== undefined || form.whole }
  },
  lateField(req, name, value) {
    if (name === 'n') {
      // A value too long to read is no n either.
      const n = imageCount(value ?? 'x', 1)
      if (n instanceof RouterError) return n
      req.n = n
      req.nKnown = true
      return null
    }
    if (name === 'prompt') return value === '' ? invalidPrompt() : null
    const allowed = CHECKED[name as keyof typeof CHECKED]
    if (allowed !== undefined && (value === null || !allowed.has(value))) {
      return new RouterError('invalid_request', `${name} must be one of ${[...allowed].join(', ')}`)
    }
    return null
  },
  formEnded(req) {
    if (req.nKnown) return
    req.n = 1
    req.nKnown = true
  },
  retryHoldWhen(req, retry) {
    return !req.nKnown && req.upload.whenMore?.(retry) === true
  },
  answerWhen(req, go) {
    return req.upload.whenWhole?.(go) ?? true
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
