/**
 * A job's answer as it is stored, and a job as `GET /v1/async/jobs/:jobId` shows it (DESIGN.md §4):
 * `{jobId, status, createdAt, updatedAt, errorMessage?, data?, x_svc_trace?}`, where a completed job's `data`
 * is the sync endpoint's body (`{created, data: [...]}`) and the trace sits beside it.
 */
import type { HeaderList } from '../upstream/sink.js'
import type { JobOutcome, JobRecord } from '../store/store.js'

/** The longest provider error text kept as a job's errorMessage. */
const MAX_ERROR_CHARS = 2000

function header(headers: HeaderList, name: string): string {
  for (let i = 0; i + 1 < headers.length; i += 2) if (headers[i]!.toLowerCase() === name) return headers[i + 1]!
  return ''
}

function traceProvider(trace: unknown): string | null {
  const p = (trace as { provider?: unknown } | undefined)?.provider
  return typeof p === 'string' ? p : null
}

/** What the failover loop answered, as the job's outcome: 2xx completed with its body, anything else failed. */
export function parseJobAnswer(status: number, headers: HeaderList, body: Buffer, at: number): JobOutcome {
  const text = body.toString('utf8')
  let parsed: Record<string, unknown> | null = null
  try {
    const v: unknown = JSON.parse(text)
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) parsed = v as Record<string, unknown>
  } catch {}
  const trace = parsed?.x_svc_trace
  const traceJson = trace === undefined ? null : JSON.stringify(trace)
  const provider = traceProvider(trace)
  if (status >= 200 && status < 300 && parsed !== null) {
    delete parsed.x_svc_trace
    return { status: 'completed', provider, result: JSON.stringify(parsed), trace: traceJson, error: null, resKey: header(headers, 'svc-res-key'), at }
  }
  let message: string
  const err = parsed?.error
  if (err !== null && typeof err === 'object' && typeof (err as { message?: unknown }).message === 'string') message = (err as { message: string }).message
  else if (typeof err === 'string') message = err
  else if (status >= 200 && status < 300) message = 'the provider answered with a body that is not a JSON object'
  else message = `the provider answered ${status}${text.length === 0 ? '' : ': ' + text}`
  if (message.length > MAX_ERROR_CHARS) message = message.slice(0, MAX_ERROR_CHARS) + '…'
  return { status: 'failed', provider, result: null, trace: traceJson, error: message, resKey: '', at }
}

/** The job as the poll answers it; the stored result and trace are spliced in as they are (no re-encoding). */
export function jobBody(job: JobRecord): string {
  let out =
    `{"jobId":${JSON.stringify(job.id)},"status":"${job.status}","createdAt":"${new Date(job.createdAt).toISOString()}",` +
    `"updatedAt":"${new Date(job.updatedAt).toISOString()}","model":${JSON.stringify(job.model)},"provider_address":${JSON.stringify(job.providerAddress)}`
  if (job.error !== null) out += `,"errorMessage":${JSON.stringify(job.error)}`
  if (job.result !== null) out += `,"data":${job.result}`
  if (job.trace !== null) out += `,"x_svc_trace":${job.trace}`
  return out + '}'
}
