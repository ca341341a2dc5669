/**
 * POST /v1/audio/transcriptions (spec §4.1, multipart; routing by headers only; no price ceiling): the upload
 * streamed to the provider, billed per second of audio (DESIGN.md §4) from the provider's reported duration,
 * else from the uploaded audio's own header (estimated). Non-JSON formats are relayed as they are, the trace
 * then in a header (codecs/openai-media.ts).
 *
 * The reservation bounds the audio's length before it was heard, and the bill is capped at it, so nothing in it
 * is what the client may state freely: the file's size (read whole when it is small, else the upload's declared
 * size, else the largest upload allowed) over the fewest bytes per second the file's header allows (WAV: its
 * rate, the smallest its fields give; MP3: the lowest bitrate of its MPEG version), or over a floor of 8 kbit/s
 * for a format the router cannot read or a WAV coding other than PCM, float, A-law and µ-law. A WAV `data` size
 * bounds nothing: stated smaller than what is sent, it would shrink the bound, and a decoder may read on to the
 * end. The estimate, when the provider reports no duration, believes a `data` size only within what the form
 * around the file can add (WAV_DATA_SLACK).
 */
import { audioCost, type AudioUsage } from '../billing/cost.js'
import { AUDIO_HEAD_BYTES, audioRate, FLOOR_BYTES_PER_SECOND, type AudioRate } from '../codecs/audio-duration.js'
import { TranscriptionCodec } from '../codecs/openai-media.js'
import { renderError, RouterError } from '../errors.js'
import { DIMENSION_AUDIO } from '../routing/select.js'
import type { AttemptPlan } from '../upstream/plan.js'
import { multipartRequest, type MultipartRequest } from './multipart-request.js'
import type { MultipartSurface } from './surface.js'

export interface TranscriptionRequest extends MultipartRequest {
  /** The upload's audio header, null when it is not a format the router reads. */
  readonly rate: AudioRate | null
  /** The most audio the upload can hold, in seconds: what is reserved. */
  readonly maxSeconds: number
}

export const TRANSCRIPTIONS_PATH = '/v1/audio/transcriptions'
/** Bytes per second assumed to estimate a duration the provider did not report, for an unknown format (128 kbit/s). */
const TYPICAL_BYTES_PER_SECOND = 16_000
const CHECKED = { response_format: new Set(['json', 'text', 'srt', 'verbose_json', 'vtt']) }

/**
 * How far the bytes after a WAV header may exceed its `data` size in an honest upload: the form's other parts and
 * delimiters, a trailing chunk. A `data` size further below what came is not believed (a client writing it
 * small to be billed nothing): the estimate then counts every byte.
 */
const WAV_DATA_SLACK = 64 * 1024

/**
 * Uploads declared larger than this stop the scan at the audio's header once it reads (WAV: its `data` chunk;
 * MP3: its first frame) instead of AUDIO_HEAD_BYTES into the file: busboy's pass over the rest of those bytes
 * cost about 70 µs an upload. The bound then uses the declared size, as for any file
 * past AUDIO_HEAD_BYTES; only a file shorter than that in a form whose other parts make up the rest loses its
 * exact size to it (a looser bound, never a tighter one).
 */
const EARLY_HEAD_MIN = 4 * AUDIO_HEAD_BYTES

/** Seconds of audio in an upload of `bytes` (the whole form), from its header when the router reads it (estimated). */
export function uploadSeconds(rate: AudioRate | null, bytes: number): number {
  if (rate === null) return bytes / TYPICAL_BYTES_PER_SECOND
  const audio = Math.max(0, bytes - rate.offset)
  const data = rate.dataBytes === null || audio - rate.dataBytes > WAV_DATA_SLACK ? audio : Math.min(audio, rate.dataBytes)
  return data / rate.bytesPerSecond
}

/**
 * The most seconds of audio an upload can hold (see the file comment): what is reserved, and the bill's cap.
 * `known` is the file's size when the scan read it whole, else the upload's declared size, else -1 (the largest
 * upload allowed bounds it then: a WAV's `data` size is the client's word, and a decoder may read past it).
 */
function boundSeconds(rate: AudioRate | null, known: number, maxBytes: number): number {
  const bytes = known >= 0 ? known : maxBytes
  if (rate === null) return bytes / FLOOR_BYTES_PER_SECOND
  return Math.max(0, bytes - rate.offset) / rate.slowestBytesPerSecond
}

export const transcriptions: MultipartSurface<TranscriptionRequest, AudioUsage> = {
  name: 'transcriptions',
  modelType: 'speech-to-text',
  dimension: DIMENSION_AUDIO,
  fileField: 'file',
  headEnough: (head, declaredLength) => declaredLength > EARLY_HEAD_MIN && audioRate(head) !== null,
  // The file too: its header bounds the reservation, and a second file is audio the router never heard of.
  singleParts: new Set(['model', 'file', ...Object.keys(CHECKED)]),
  fromForm(form, upload, head) {
    const req = multipartRequest(form, upload, head, CHECKED)
    if (req instanceof RouterError) return req
    const rate = form.fileHead.length === 0 ? null : audioRate(form.fileHead)
    // A file that ended within the head the scan keeps (64 KiB) is known to the byte, declared size or not.
    const known = form.fileWhole ? form.fileHead.length : upload.declaredLength
    return { ...req, rate, maxSeconds: boundSeconds(rate, known, upload.maxBytes) }
  },
  plan(req): AttemptPlan<AudioUsage> {
    const codec = new TranscriptionCodec(() => uploadSeconds(req.rate, req.upload.received()))
    return { path: TRANSCRIPTIONS_PATH, headers: req.headers, body: req.upload.body, codec }
  },
  worstCase(req, offer) {
    return audioCost(offer, { seconds: req.maxSeconds }).input
  },
  cost: audioCost,
  renderError,
}
