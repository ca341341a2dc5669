/**
 * POST /v1/images/generations (spec §4.1, §4.7) as a surface record: JSON body, routed over text-to-image
 * models under the Image price ceiling and the body `provider` object, reserved as n × image price, billed as
 * the images the answer's `data[]` holds × image price. Admission and failover are the engine's.
 */
import { imageCost, imageWorstCase, type ImageUsage } from '../billing/cost.js'
import { spliceMembers, type JsonBody } from '../codecs/json-body.js'
import { ImagesJsonCodec } from '../codecs/openai-media.js'
import { renderError, RouterError } from '../errors.js'
import { DIMENSION_IMAGE } from '../routing/select.js'
import type { AttemptPlan } from '../upstream/plan.js'
import { BufferBody } from '../upstream/request-body.js'
import type { Surface, SurfaceRequest } from './surface.js'
import { decimalDigits } from '../vocabulary/http.js'

/** The most images one request may ask for (OpenAI's own bound): also what an edit without `n` reserves. */
export const MAX_IMAGES = 10

export interface ImagesRequest extends SurfaceRequest {
  /** Images asked for: the reservation is n × price. */
  readonly n: number
  /** What every attempt sends: the client's bytes, `provider` removed. */
  readonly upstream: BufferBody
}

const UPSTREAM_HEADERS = ['content-type', 'application/json', 'accept', 'application/json']
export const IMAGES_PATH = '/v1/images/generations'
const RESPONSE_FORMATS = new Set(['b64_json', 'url'])

function invalid(message: string): RouterError {
  return new RouterError('invalid_request', message)
}

/**
 * `n` as the request gives it: a whole number 1..MAX_IMAGES, `fallback` when absent. Shared with the multipart
 * edits, whose `n` arrives as a form field (a string).
 */
export function imageCount(v: unknown, fallback: number): number | RouterError {
  if (v === undefined || v === null) return fallback
  // A string (a form field) is decimal digits only: no sign, space, hex, exponent or fraction, which Number()
  // would read but a provider may not (the provider gets the text as it was sent).
  const n = typeof v === 'string' ? decimalDigits(v, 3) : v
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1 || n > MAX_IMAGES) return invalid(`n must be an integer from 1 to ${MAX_IMAGES}`)
  return n
}

/** Checks the fields the router relies on; size, quality and style are the provider's to judge. */
export function parseImages(json: JsonBody): ImagesRequest | RouterError {
  const body = json.value
  const model = body.model
  if (typeof model !== 'string' || model.length === 0) return invalid('model is required and must be a non-empty string')
  if (typeof body.prompt !== 'string' || body.prompt.length === 0) return invalid('prompt is required and must be a non-empty string')
  const n = imageCount(body.n, 1)
  if (n instanceof RouterError) return n
  const format = body.response_format
  if (format !== undefined && format !== null && (typeof format !== 'string' || !RESPONSE_FORMATS.has(format))) {
    return invalid('response_format must be b64_json or url')
  }
  for (const name of ['size', 'quality', 'style'] as const) {
    const v = body[name]
    if (v !== undefined && v !== null && typeof v !== 'string') return invalid(`${name} must be a string`)
  }
  const upstream = new BufferBody(body.provider === undefined ? json.raw : spliceMembers(json, ['provider'], {}))
  return { model, stream: false, paramMask: 0, maxOutput: -1, provider: body.provider, promptBytes: upstream.bytes.length, n, upstream }
}

export const imageGenerations: Surface<ImagesRequest, ImageUsage> = {
  name: 'images',
  modelType: 'text-to-image',
  dimension: DIMENSION_IMAGE,
  parse: parseImages,
  plan(req: ImagesRequest): AttemptPlan<ImageUsage> {
    return { path: IMAGES_PATH, headers: UPSTREAM_HEADERS, body: req.upstream, codec: new ImagesJsonCodec() }
  },
  worstCase(req, offer) {
    return imageWorstCase(offer, req.n)
  },
  cost: imageCost,
  renderError,
}
