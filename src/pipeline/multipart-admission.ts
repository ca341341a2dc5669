/**
 * Admission of a multipart surface (spec §4.7: routing by headers only; DESIGN.md §4 multipart): the same stages
 * as a JSON surface, except that the body is never read whole. From the route callback on, the upload flows into
 * a bounded replay buffer (upstream/request-body.ts) and, at the same time, into the multipart scanner, which
 * stops at the `model` field; the first attempt then streams the upload on as it arrives, with backpressure both
 * ways. Past `server.max_multipart_body_bytes` (the client's Content-Length, or the bytes counted) the answer is a
 * 413 and any attempt under way is cancelled; nothing is billed. Any other fault of the body is answered only
 * once the head (credential, rate limit, routing headers) was admitted, as on a JSON surface.
 */
import type { Failover } from '../upstream/failover.js'
import type { Usage } from '../billing/cost.js'
import { AUDIO_HEAD_BYTES } from '../codecs/audio-duration.js'
import { MultipartScan, PartWatch, type FormHead } from '../codecs/multipart.js'
import { RouterError } from '../errors.js'
import type { Handler } from '../server/app.js'
import { watchAnswer, type HeaderList, type Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'
import { publishRefused } from '../telemetry/events.js'
import type { MultipartSurface, SurfaceRequest, Upload } from '../surfaces/surface.js'
import { ReplayableBody, type BodySource, type RequestBody } from '../upstream/request-body.js'
import { uploadChunks } from '../upstream/chunk-pool.js'
import type { UploadSpool } from '../upstream/upload-spool.js'
import { log } from '../log.js'
import { admitHead, admitRequest, answerNow, crashed, type AdmissionDeps, type Admitted, type Launcher } from './admission.js'
import { decimalDigits } from '../vocabulary/http.js'

export interface MultipartDeps extends AdmissionDeps {
  readonly maxMultipartBodyBytes: number
  /** upstream.replay_buffer_bytes: how far the scan looks for `model`, and what is read before an attempt reads. */
  readonly replayBufferBytes: number
  /** Where a streamed upload waits past its memory bound, and what a failover resends (server.upload_*). */
  readonly uploadSpool: UploadSpool
}

function spoolFailed(err: NodeJS.ErrnoException): RouterError {
  const why = err.code === 'ENOSPC' ? 'the disk is full' : err.code === 'EMFILE' || err.code === 'ENFILE' ? 'no file descriptor is left' : (err.code ?? 'an I/O error')
  return new RouterError('upload_spool_failed', `the upload could not be buffered to disk (${why}); try again shortly`)
}

function missingPart(label: string): RouterError {
  return new RouterError('invalid_request', `the multipart field ${label} is required`)
}

/**
 * An upload held whole on disk instead of streamed on (async edits: the job runs after the client's 202, and
 * again after a restart). `launcher` runs the request once `spool` has all of it.
 */
export interface SpooledUploads<R extends SurfaceRequest, U extends Usage, S extends HeldUpload = HeldUpload> {
  spool(intake: BodySource): S
  launcher(spool: S): Launcher<R, U>
}

/** What admission asks of an upload held on disk (the jobs' spool implements it). */
export interface HeldUpload extends RequestBody {
  /** The request's head was admitted: the upload may now be written. */
  open(): void
  /** The upload was refused, or its client went away: stop writing it and delete what was written. */
  discard(): void
}

/**
 * The route handler of a multipart inference surface: the upload streams through a replay buffer to the first
 * attempt as it arrives, or with `spooled` it is written to disk and the request launched once it is all there.
 */
export function createMultipartRoute<R extends SurfaceRequest, U extends Usage, S extends HeldUpload>(
  deps: MultipartDeps,
  surface: MultipartSurface<R, U>,
  spooled?: SpooledUploads<R, U, S>,
): Handler {
  const render = surface.renderError
  const max = deps.maxMultipartBodyBytes

  return function admitMultipart(head: RequestHead, client: Reply): void {
    let reply = client
    let admitted: Admitted | null = null
    let form: FormHead | null = null
    let failover: Failover<R, U> | null = null
    let spool: S | null = null
    let refused = false
    const headersNow = (): HeaderList => admitted?.headers ?? ['x-request-id', head.requestId]
    const refuse = (err: RouterError, headers: HeaderList): void => {
      if (refused) return
      refused = true
      spool?.discard()
      if (failover !== null) return failover.cancel(err)
      sendError(reply, err, head.requestId, headers, render)
      publishRefused(head, surface.name, '', false, err.status, err.code)
    }
    const tooLarge = (): RouterError => new RouterError('request_too_large', `multipart body exceeds the limit of ${max} bytes`)
    // The body is judged after the head, as on a JSON surface (DESIGN.md §5: auth → rate limit → routing headers
    // → body): what is wrong with it (not multipart at all, malformed, a part twice…) waits for the head's
    // admission, so a client without a valid key hears 401 or 403 whatever it sent, and an admitted one gets the
    // 400 with its rate-limit headers. Meanwhile the rest of the upload is read and dropped.
    let badBody: RouterError | null = null
    const refuseBody = (err: RouterError): void => {
      if (admitted !== null) return refuse(err, admitted.headers)
      badBody ??= err
    }

    // The Content-Length as a number, -1 when absent or not a plain decimal.
    const declared = decimalDigits(head.contentLength, 15)
    if (declared > max) return refuse(tooLarge(), headersNow())

    let received = 0
    // A streamed upload is routed at `model`, wherever the fields that follow it come (lateFields); a spooled one
    // may be read whole first, as its job starts only once the upload is all on disk anyway.
    const wholeForm = spooled !== undefined && surface.wholeForm === true
    const headEnough = surface.headEnough === undefined ? undefined : (bytes: Buffer): boolean => surface.headEnough!(bytes, declared)
    const scan = new MultipartScan(head.contentType, { limit: deps.replayBufferBytes, fileField: surface.fileField, fileHeadBytes: AUDIO_HEAD_BYTES, wholeForm, headEnough }, (outcome) => {
      if (outcome instanceof RouterError) return refuseBody(outcome)
      form = outcome
      proceed()
    })
    // Over the whole upload, past where the scan stops: a part the router acted on must not come twice, and the
    // parts the surface requires must come.
    const watch = PartWatch.of(head.contentType, surface.singleParts, surface.requiredParts)
    // The request once built (proceed); the late fields' values read before it was, told to it then.
    let request: R | null = null
    let early: [string, string | null][] | null = null
    let ended = false
    // The upload came whole and passed the watch; what waits on that (whenWhole) or on more of the form (whenMore).
    let judged = false
    let learned = false
    // The watch has seen the whole upload (its last chunk too): what it lacks, the form lacks.
    let watchedAll = false
    let onWhole: (() => void) | null = null
    let onMore: (() => void) | null = null
    const lateField = surface.lateField
    if (watch !== null && surface.lateFields !== undefined && lateField !== undefined) {
      watch.valued(surface.lateFields, (name, value) => {
        learned = true
        if (request !== null) return lateField(request, name, value)
        ;(early ??= []).push([name, value])
        return null
      })
    }
    // Streamed on: into pooled memory the replay buffer and the attempts hold (upstream/chunk-pool.ts).
    const source = reply.bodySource(spooled === undefined ? uploadChunks : undefined)
    // The upload as the replay buffer (or the spool) and the attempts read it: counted against the cap, shown
    // to the scan.
    const intake: BodySource = {
      onChunk(handler) {
        source.onChunk((chunk, last) => {
          if (refused || badBody !== null) return
          received += chunk.length
          if (received > max) return refuse(tooLarge(), headersNow())
          // Read before the chunk goes on: a field that breaks a rule (a repeat, a late `n` out of range) is
          // refused before the bytes that end it reach a provider.
          const repeated = watch?.push(chunk) ?? null
          if (repeated !== null) return refuseBody(repeated)
          if (!ended && watch?.over === true && request !== null) {
            ended = true
            learned = true
            surface.formEnded?.(request)
          }
          // A form larger than what the scan read is judged whole only here, at its end (see proceed).
          if (last && scan.finished && watch !== null) {
            const missing = watch.missing()
            if (missing !== null) return refuseBody(missingPart(missing))
          }
          watchedAll = last
          if (!scan.finished) scan.push(chunk, last)
          handler(chunk, last)
          if (refused) return
          if (last) judged = true
          // After the chunk is in the replay buffer: a hold tried again now may take the body at once.
          if (onMore !== null && (learned || last || received > deps.replayBufferBytes)) {
            const more = onMore
            onMore = null
            more()
          }
          // The attempt under way holds less once the form told it may cost less.
          if (learned && failover !== null) failover.repriced()
          learned = false
          if (judged && onWhole !== null) {
            const whole = onWhole
            onWhole = null
            whole()
          }
        })
      },
      pause: () => source.pause(),
      resume: () => source.resume(),
    }
    let body: RequestBody
    let launcher: Launcher<R, U>
    let replayable = null as ReplayableBody | null
    if (spooled === undefined) {
      const streamed = new ReplayableBody(intake, {
        holdLimit: deps.replayBufferBytes,
        spool: deps.uploadSpool,
        pool: uploadChunks,
        declaredLength: declared,
        // The upload cannot be kept (disk full, the directory unwritable, no descriptor left): this request
        // ends with a 503, its hold given back; nothing else is touched.
        failed: (err) => {
          log.error('upload spool failed', { request_id: head.requestId, err: String(err) })
          refuse(spoolFailed(err), headersNow())
        },
      })
      replayable = streamed
      body = streamed
      // Once the request is over, what the upload still holds goes back to the pool.
      reply = watchAnswer(client, { over: () => streamed.release() })
      launcher = answerNow(deps, (started) => {
        failover = started
      })
    } else {
      const held = spooled.spool(intake)
      spool = held
      body = held
      launcher = spooled.launcher(held)
      // Until the job owns the file, a client that goes away or a refusal takes the upload with it. The file is
      // created only once the head is admitted (below).
      client.onAborted(() => held.discard())
      reply = watchAnswer(client, { starting: () => held.discard() })
    }
    const whenWhole = (go: () => void): boolean => {
      if (judged) return true
      onWhole = go
      // An answer came before the upload's end: no attempt needs the rest, which is read (to be judged) and
      // dropped, never held up by a reader that stopped.
      replayable?.drain()
      return false
    }
    const whenMore = (go: () => void): boolean => {
      if (judged || refused || received > deps.replayBufferBytes) return false
      onMore = go
      return true
    }
    const upload: Upload =
      spooled === undefined
        ? { body, received: () => received, declaredLength: declared, maxBytes: max, whenWhole, whenMore }
        : { body, received: () => received, declaredLength: declared, maxBytes: max }

    function proceed(): void {
      if (refused || reply.aborted || form === null || admitted === null) return
      try {
        const req = surface.fromForm(form, upload, head)
        if (req instanceof RouterError) return refuse(req, admitted.headers)
        // A form the scan read whole went past the watch whole too (or the scan found `model` in the upload's last
        // chunk, which the watch has seen): a required part it lacks is a 400 now, before any provider is tried or
        // any job exists.
        const missing = form.whole || watchedAll ? (watch?.missing() ?? null) : null
        if (missing !== null) return refuse(missingPart(missing), admitted.headers)
        request = req
        if (early !== null && lateField !== undefined) {
          for (const [name, value] of early) {
            const bad = lateField(req, name, value)
            if (bad !== null) return refuse(bad, admitted.headers)
          }
          early = null
        }
        if (watch?.over === true) {
          ended = true
          surface.formEnded?.(req)
        }
        // The books may load from the store before the launch: a refusal of the upload's rest meanwhile (a part
        // sent twice) was the answer, and nothing may be sent upstream, nor billed, after it.
        admitRequest(deps, surface, head, reply, admitted, req, (launch) => {
          if (!refused) launcher(launch)
        })
      } catch (err) {
        refused = true
        spool?.discard()
        crashed(head, reply, admitted.headers, render, err)
        publishRefused(head, surface.name, '', false, 500, 'server_error')
      }
    }

    admitHead(deps, head, reply, render, {
      refuse,
      admit: (result) => {
        admitted = result
        if (badBody !== null) return refuse(badBody, result.headers)
        // Only an admitted request puts anything on disk: a refusal before this point leaves no file to delete.
        spool?.open()
        proceed()
      },
    })
  }
}
