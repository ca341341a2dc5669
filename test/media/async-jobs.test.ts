/**
 * Async image jobs through the real router (DESIGN.md §4): POST /v1/async/images/{generations,edits} → 202 with
 * jobId, status pending, provider_address and Retry-After; GET /v1/async/jobs/:jobId until completed, with the
 * sync body as `data` and the trace beside it; billed once under the job's id, by hand; failover before a job
 * fails; a failed job costs nothing; owner-only 404s; expiry; a synchronous 402; jobs across a graceful restart,
 * a SIGKILL, and a crash between the charge and the job's record.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { loadConfig } from '../../src/config/index.js'
import { serve } from '../../src/serve.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { seeded } from '../helpers/seeded.js'
import { startStack, type Stack } from '../helpers/stack.js'
import { A, atto, B, charges, IMAGE_MODEL, mediaProviders, PRICE_SORT, wav } from './fixtures.js'

const PNG_SIGNATURE = '89504e470d0a1a0a'
const BOUNDARY = 'svc-async-boundary'

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  json: any
}

async function call(url: string, init: Parameters<typeof request>[1]): Promise<Answer> {
  const res = await request(url, init)
  const text = await res.body.text()
  let json: any = null
  try {
    json = JSON.parse(text)
  } catch {}
  return { status: res.statusCode, headers: res.headers, json }
}

function submit(url: string, auth: Record<string, string>, body: object | string, extra: Record<string, string> = {}): Promise<Answer> {
  return call(url + '/v1/async/images/generations', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth, ...PRICE_SORT, ...extra },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}

function poll(url: string, auth: Record<string, string>, id: string, query = ''): Promise<Answer> {
  return call(`${url}/v1/async/jobs/${id}${query}`, { headers: auth })
}

/** Polls until the job ended; every answer before must be pending or processing with Retry-After: 5. */
async function settle(t: Test, url: string, auth: Record<string, string>, id: string): Promise<Answer> {
  for (let i = 0; i < 400; i++) {
    const res = await poll(url, auth, id)
    if (res.status !== 200) return res
    if (res.json.status === 'completed' || res.json.status === 'failed') return res
    if (!['pending', 'processing'].includes(res.json.status)) t.fail(`status ${res.json.status} while running`)
    if (res.headers['retry-after'] !== '5') t.fail(`Retry-After ${res.headers['retry-after']} while running`)
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`job ${id} did not end`)
}

function multipart(fields: [string, string][], files: { field: string; name: string; bytes: Buffer }[]): Buffer {
  const parts: Buffer[] = []
  for (const [name, value] of fields) parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`))
  for (const file of files) {
    parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${file.field}"; filename="${file.name}"\r\nContent-Type: image/png\r\n\r\n`))
    parts.push(file.bytes, Buffer.from('\r\n'))
  }
  parts.push(Buffer.from(`--${BOUNDARY}--\r\n`))
  return Buffer.concat(parts)
}

function submitEdit(stack: Stack, body: Buffer, extra: Record<string, string> = {}): Promise<Answer> {
  return call(stack.url + '/v1/async/images/edits', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth, ...PRICE_SORT, ...extra },
    body,
  })
}

function spooled(stack: Stack): string[] {
  try {
    return readdirSync(join(stack.dir, 'jobs'))
  } catch {
    return []
  }
}

t.test('a generation job: 202 pending with provider_address, polled to completed, data as the sync body, billed once', async (t) => {
  const stack = await startStack(t, mediaProviders({ ttftMs: 300 }))
  const res = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'a red fox', n: 2, response_format: 'b64_json' })
  t.equal(res.status, 202)
  t.same(Object.keys(res.json).sort(), ['jobId', 'provider_address', 'status'])
  t.equal(res.json.status, 'pending')
  t.equal(res.json.provider_address, A)
  t.match(res.json.jobId, /^[0-9a-f-]{36}$/)
  t.equal(res.headers['retry-after'], '5')
  t.ok(res.headers['x-request-id'])
  t.ok(res.headers['x-ratelimit-remaining-requests'])
  t.equal((await charges(stack)).length, 0, 'nothing billed before the job completes')

  const done = await settle(t, stack.url, stack.auth, res.json.jobId)
  t.equal(done.status, 200)
  const job = done.json
  t.equal(job.jobId, res.json.jobId)
  t.equal(job.status, 'completed')
  t.ok(Date.parse(job.createdAt) <= Date.parse(job.updatedAt))
  t.equal(job.errorMessage, undefined)
  t.equal(done.headers['retry-after'], undefined, 'no Retry-After once it ended')
  t.match(done.headers['svc-res-key'], /^img-/)
  // A poll reports the account's standing without counting as a request of the limit.
  const remaining = res.headers['x-ratelimit-remaining-requests']
  t.equal(done.headers['x-ratelimit-remaining-requests'], remaining, 'polls do not count')
  t.equal(done.headers['x-ratelimit-limit-requests'], res.headers['x-ratelimit-limit-requests'])
  t.match(done.headers['x-ratelimit-reset-requests'], /^\d{4}-\d\d-\d\dT/)
  t.type(job.data.created, 'number', 'data is the sync body…')
  t.equal(job.data.x_svc_trace, undefined, '…without the trace, which sits beside it')
  t.equal(job.data.data.length, 2)
  for (const image of job.data.data) t.equal(Buffer.from(image.b64_json, 'base64').subarray(0, 8).toString('hex'), PNG_SIGNATURE)
  t.equal(job.x_svc_trace.request_id, job.jobId)
  t.equal(job.x_svc_trace.provider, A)
  t.equal(job.x_svc_trace.billing.total_cost, '0.006', '2 images × 0.003')
  const billed = await charges(stack)
  t.equal(billed.length, 1)
  t.equal(billed[0]!.requestId, job.jobId, 'the charge is recorded under the job id')
  t.equal(billed[0]!.amount, atto('0.006'))
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no hold left')
  // Polling again changes nothing and bills nothing.
  t.same((await poll(stack.url, stack.auth, job.jobId)).json, job)
  t.equal((await charges(stack)).length, 1)
})

t.test('owner only: another account, an unknown id, a mismatched query → 404 job_not_found; matching query and mk- keys', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const res = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'x' })
  const id = res.json.jobId
  await settle(t, stack.url, stack.auth, id)
  const other = await stack.newApiKey({ account: await stack.newAccount() })
  for (const [auth, query, why] of [
    [other.auth, '', 'another account'],
    [stack.auth, '?provider_address=' + B, 'another provider'],
    [stack.auth, '?model=other-model', 'another model'],
  ] as const) {
    const r = await poll(stack.url, auth, id, query)
    t.equal(r.status, 404, why)
    t.equal(r.json.error.code, 'job_not_found', why)
    t.equal(r.json.error.type, 'not_found_error')
  }
  const unknown = await poll(stack.url, stack.auth, '00000000-0000-0000-0000-000000000000')
  t.equal(unknown.status, 404)
  t.equal(unknown.json.error.code, 'job_not_found')
  const sameKeyOtherAccountKey = await stack.newApiKey()
  t.equal((await poll(stack.url, sameKeyOtherAccountKey.auth, id)).status, 200, 'another key of the same account sees it')
  const matching = await poll(stack.url, stack.auth, id, `?provider_address=${A.toUpperCase().replace('0X', '0x')}&model=${IMAGE_MODEL}`)
  t.equal(matching.status, 200, 'the query the original clients send')
  t.equal((await poll(stack.url, {}, id)).status, 401)
  const mgmt = await poll(stack.url, { authorization: 'Bearer ' + stack.mgmtKey }, id)
  t.equal(mgmt.status, 403, 'an mk- key cannot read inference jobs')
})

t.test('a failing provider is retried on the next candidate; a job every provider fails is failed and costs nothing', async (t) => {
  const stack = await startStack(t, mediaProviders({ fault: 'status-500' }))
  const res = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'x' })
  t.equal(res.json.provider_address, A)
  const done = await settle(t, stack.url, stack.auth, res.json.jobId)
  t.equal(done.json.status, 'completed')
  t.same(done.json.x_svc_trace.attempts.map((a: any) => [a.provider, a.status]), [[A, 500], [B, 200]])
  t.equal(done.json.x_svc_trace.billing.total_cost, '0.005')
  t.equal((await poll(stack.url, stack.auth, res.json.jobId, `?provider_address=${B}`)).status, 200, 'the provider that served it matches too')
  t.equal((await charges(stack)).length, 1)

  stack.sims.get(B)!.setOptions({ fault: 'status-500' })
  const failing = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'x', n: 3 })
  t.equal(failing.status, 202)
  const failed = await settle(t, stack.url, stack.auth, failing.json.jobId)
  t.equal(failed.json.status, 'failed')
  t.match(failed.json.errorMessage, /every provider tried failed/)
  t.equal(failed.json.data, undefined)
  t.equal(failed.json.x_svc_trace.billing.total_cost, '0')
  t.equal((await charges(stack)).length, 1, 'the failed job is not billed')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'its hold was given back')
})

t.test('admission is synchronous: bad input, unknown models and an empty balance are refused before a job exists', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const bad = await submit(stack.url, stack.auth, { model: IMAGE_MODEL })
  t.equal(bad.status, 400)
  t.equal(bad.json.error.code, 'invalid_request')
  const unknown = await submit(stack.url, stack.auth, { model: 'nope', prompt: 'x' })
  t.equal(unknown.status, 404)
  t.equal(unknown.json.error.code, 'model_not_found')
  const poor = await stack.newApiKey({ account: await stack.newAccount('0.004') })
  const broke = await submit(stack.url, poor.auth, { model: IMAGE_MODEL, prompt: 'x', n: 2 })
  t.equal(broke.status, 402, '2 × 0.003 > 0.004')
  t.equal(broke.json.error.code, 'insufficient_balance')
  const capped = await stack.newApiKey({ creditLimit: atto('0.001') })
  t.equal((await submit(stack.url, capped.auth, { model: IMAGE_MODEL, prompt: 'x' })).json.error.code, 'credit_limit_exceeded')
  t.same(await stack.router.store.jobs.unfinishedJobs(), [], 'no job was created')
  t.equal((await charges(stack)).length, 0)
})

t.test('an async edit: the upload is spooled, sent whole to the provider (and again on failover), then deleted', async (t) => {
  const stack = await startStack(t, mediaProviders({ fault: 'status-500', faultCount: 1 }))
  const image = wav(0.1)
  const mask = Buffer.alloc(2048, 7)
  const body = multipart([['model', IMAGE_MODEL], ['prompt', 'add a hat'], ['n', '2']], [{ field: 'image', name: 'image.png', bytes: image }, { field: 'mask', name: 'mask.png', bytes: mask }])
  const res = await submitEdit(stack, body)
  t.equal(res.status, 202)
  t.equal(res.json.status, 'pending')
  t.equal(res.headers['retry-after'], '5')
  const done = await settle(t, stack.url, stack.auth, res.json.jobId)
  t.equal(done.json.status, 'completed')
  t.same(done.json.x_svc_trace.attempts.map((a: any) => [a.provider, a.status]), [[A, 500], [B, 200]], 'the spooled upload was sent again')
  t.equal(done.json.data.data.length, 2)
  const received = stack.sims.get(B)!.stats.lastForm!
  t.same(received.files.map((f) => [f.field, f.bytes]).sort(), [['image', image.length], ['mask', 2048]], 'the whole upload reached the provider')
  t.equal(received.fields.prompt, 'add a hat')
  const billed = await charges(stack)
  t.equal(billed.length, 1)
  t.equal(billed[0]!.requestId, res.json.jobId)
  t.equal(billed[0]!.amount, atto('0.01'), '2 images × 0.005 at B')
  // The spool is emptied once the job ended (deleted asynchronously).
  for (let i = 0; i < 50 && spooled(stack).length > 0; i++) await new Promise((r) => setTimeout(r, 20))
  t.same(spooled(stack), [], 'no upload left on disk')
})

t.test('a refused, oversized or abandoned async edit leaves nothing on disk; a chunked upload gets its length', async (t) => {
  const stack = await startStack(t, mediaProviders(), { server: { max_multipart_body_bytes: 100_000 } })
  const big = multipart([['model', IMAGE_MODEL], ['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(150_000, 1) }])
  const { Readable } = await import('node:stream')
  const tooLarge = await call(stack.url + '/v1/async/images/edits', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth },
    body: Readable.from([big.subarray(0, 60_000), big.subarray(60_000)]),
  })
  t.equal(tooLarge.status, 413, 'counted past the cap while spooling')
  t.equal(tooLarge.json.error.code, 'request_too_large')
  // A client that goes away mid-upload.
  const { connect } = await import('node:net')
  const url = new URL(stack.url)
  const socket = connect(Number(url.port), url.hostname)
  await new Promise((r) => socket.once('connect', r))
  const head = multipart([['model', IMAGE_MODEL], ['prompt', 'x']], []).subarray(0, -(BOUNDARY.length + 6))
  socket.write(
    `POST /v1/async/images/edits HTTP/1.1\r\nHost: x\r\nAuthorization: ${stack.auth.authorization}\r\n` +
      `Content-Type: multipart/form-data; boundary=${BOUNDARY}\r\nContent-Length: 90000\r\n\r\n`,
  )
  socket.write(head)
  await new Promise((r) => setTimeout(r, 100))
  socket.destroy()
  const refused = await submitEdit(stack, multipart([['model', 'nope'], ['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(50_000, 1) }]))
  t.equal(refused.status, 404)
  t.equal(refused.json.error.code, 'model_not_found')
  const noModel = await submitEdit(stack, multipart([['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(10, 1) }]))
  t.equal(noModel.status, 400)
  for (let i = 0; i < 50 && spooled(stack).length > 0; i++) await new Promise((r) => setTimeout(r, 20))
  t.same(spooled(stack), [], 'refused, oversized and abandoned uploads were deleted')
  t.same(await stack.router.store.jobs.unfinishedJobs(), [], 'and none became a job')
  // Sent chunked (no Content-Length): the provider still receives a sized body.
  const body = multipart([['model', IMAGE_MODEL], ['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(70_000, 2) }])
  const chunked = await call(stack.url + '/v1/async/images/edits', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth, ...PRICE_SORT },
    body: Readable.from([body.subarray(0, 1000), body.subarray(1000)]),
  })
  t.equal(chunked.status, 202)
  const done = await settle(t, stack.url, stack.auth, chunked.json.jobId)
  t.equal(done.json.status, 'completed')
  t.equal(stack.sims.get(A)!.stats.lastHeaders['content-length'], String(body.length))
  t.equal(stack.sims.get(A)!.stats.lastForm!.files[0]!.bytes, 70_000)
})

t.test('an async edit refused before it is admitted creates no file; one refused at once after leaves none', async (t) => {
  // Finding 3 of the second hostile-client pass: the spool file was opened before authentication, and a refusal
  // that came before the file's open deleted nothing, so every anonymous request left an empty .upload behind.
  const stack = await startStack(t, mediaProviders())
  const body = multipart([['model', IMAGE_MODEL], ['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(2000, 1) }])
  const mgmt = { authorization: 'Bearer ' + stack.mgmtKey }
  const unknown = { authorization: 'Bearer sk-' + 'f'.repeat(48) }
  const cases: [string, Record<string, string>, Record<string, string>, number, string][] = [
    ['no key', {}, {}, 401, 'missing_authorization'],
    ['an unknown key (authentication waits for the store)', unknown, {}, 401, 'invalid_api_key'],
    ['an mk- key', mgmt, {}, 403, 'insufficient_scope'],
    ['a bad routing header', stack.auth, { 'X-SVC-Provider-Trust-Mode': 'x' }, 400, ''],
  ]
  for (const [label, auth, extra, status, code] of cases) {
    for (let i = 0; i < 10; i++) {
      const res = await call(stack.url + '/v1/async/images/edits', {
        method: 'POST',
        headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...auth, ...extra },
        body,
      })
      t.equal(res.status, status, label)
      if (code !== '') t.equal(res.json.error.code, code, label)
    }
  }
  // Admitted, then refused as the first bytes come (a repeated part), while the file may still be opening.
  for (let i = 0; i < 10; i++) {
    const twice = await submitEdit(stack, multipart([['model', IMAGE_MODEL], ['model', IMAGE_MODEL], ['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(100, 1) }]))
    t.equal(twice.status, 400)
    t.equal(twice.json.error.message, 'the multipart field model may appear only once')
  }
  // Admitted once a fresh key was looked up in the store, then refused (unknown model).
  for (let i = 0; i < 10; i++) {
    const fresh = await stack.newApiKey()
    const res = await call(stack.url + '/v1/async/images/edits', {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...fresh.auth },
      body: multipart([['model', 'nope'], ['prompt', 'x']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(100, 1) }]),
    })
    t.equal(res.status, 404)
  }
  // Deletions are asynchronous: give them time to land, then nothing may be left.
  await new Promise((r) => setTimeout(r, 300))
  t.same(spooled(stack), [], 'no upload file left on disk')
  t.same(await stack.router.store.jobs.unfinishedJobs(), [], 'and no job')
})

t.test('at start, spooled uploads no unfinished job names are deleted; a pending job keeps its upload', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const dir = join(stack.dir, 'jobs')
  mkdirSync(dir, { recursive: true })
  // A pending edit job as a stopped process leaves it, its upload beside two leftovers and a file of another kind.
  const body = multipart([['model', IMAGE_MODEL], ['prompt', 'kept']], [{ field: 'image', name: 'i.png', bytes: Buffer.alloc(3000, 5) }])
  const live = join(dir, '22222222-3333-4444-5555-666666666666.upload')
  writeFileSync(live, body)
  writeFileSync(join(dir, 'left-by-a-refusal.upload'), '')
  writeFileSync(join(dir, 'left-by-a-crash.upload'), body)
  writeFileSync(join(dir, 'notes.txt'), 'not an upload')
  const id = '22222222-3333-4444-5555-666666666666'
  const now = Date.now()
  await stack.router.store.jobs.createJob({
    id,
    accountId: stack.account,
    keyId: stack.keyId,
    surface: 'image_edits',
    model: IMAGE_MODEL,
    providerAddress: A,
    params: JSON.stringify({ n: 1, prefs: { sort: 2, sortSet: true }, bytes: body.length, contentType: `multipart/form-data; boundary=${BOUNDARY}` }),
    body: null,
    bodyPath: live,
    createdAt: now,
  })
  await stack.router.close()
  // Every file above was written before this start.
  await new Promise((r) => setTimeout(r, 20))
  const again = await restart(t, stack)
  const done = await settle(t, again.url, stack.auth, id)
  t.equal(done.json.status, 'completed', 'the pending job ran with its upload')
  t.equal(stack.sims.get(A)!.stats.lastForm!.fields.prompt, 'kept')
  t.equal(stack.sims.get(A)!.stats.lastForm!.files[0]!.bytes, 3000)
  for (let i = 0; i < 50 && spooled(stack).length > 1; i++) await new Promise((r) => setTimeout(r, 20))
  t.same(spooled(stack), ['notes.txt'], 'the leftovers are gone (and the job\'s own upload once it ended); other files stay')
})

t.test('past jobs.max_running, jobs wait pending (holds kept) and run in arrival order', async (t) => {
  // Each job takes 800 ms: the three submissions and polls below land well inside the first one.
  const stack = await startStack(t, mediaProviders({ ttftMs: 800 }), { jobs: { max_running: 1 } })
  const ids: string[] = []
  for (let i = 1; i <= 3; i++) ids.push((await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'job ' + i, n: i })).json.jobId)
  const states = await Promise.all(ids.map(async (id) => (await poll(stack.url, stack.auth, id)).json.status))
  t.same(states, ['processing', 'pending', 'pending'])
  t.equal(stack.router.ledger.reserved(stack.account), atto('0.018'), 'every job holds n × 0.003 while it waits')
  const ended = []
  for (const id of ids) ended.push((await settle(t, stack.url, stack.auth, id)).json)
  t.same(ended.map((j) => [j.status, j.data.data.length]), [['completed', 1], ['completed', 2], ['completed', 3]])
  t.ok(ended[0].updatedAt <= ended[1].updatedAt && ended[1].updatedAt <= ended[2].updatedAt, 'in arrival order')
  t.same((await charges(stack)).map((c) => c.amount), [atto('0.003'), atto('0.006'), atto('0.009')])
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})

t.test('results are kept result_ttl_ms, then 404', async (t) => {
  // 1 s: settle()'s next poll after the completion always lands inside it, even on a slow machine.
  const stack = await startStack(t, mediaProviders(), { jobs: { result_ttl_ms: 1000 } })
  const res = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'x' })
  const done = await settle(t, stack.url, stack.auth, res.json.jobId)
  t.equal(done.json.status, 'completed')
  await new Promise((r) => setTimeout(r, 1100))
  const gone = await poll(stack.url, stack.auth, res.json.jobId)
  t.equal(gone.status, 404)
  t.equal(gone.json.error.code, 'job_not_found')
  // The sweep removes the row itself (it runs at least every second).
  for (let i = 0; i < 60 && (await stack.router.store.jobs.getJob(res.json.jobId)) !== null; i++) await new Promise((r) => setTimeout(r, 50))
  t.equal(await stack.router.store.jobs.getJob(res.json.jobId), null)
  t.equal((await charges(stack)).length, 1, 'the charge stays on the ledger')
})

/** A second router on the first one's store and simulators (the first one must be closed). */
async function restart(t: Test, stack: Stack) {
  const router = await serve(loadConfig({ file: join(stack.dir, 'config.yaml'), env: {} }))
  t.teardown(() => router.close())
  return router
}

t.test('a job running when the router stops gracefully is resumed by the next start and billed once', async (t) => {
  // The provider takes 2 s: the job is seen processing, and the router stopped, long before it answers.
  const stack = await startStack(t, mediaProviders({ ttftMs: 2000 }))
  const res = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'x', n: 2 })
  t.equal(res.status, 202)
  let status = ''
  for (let i = 0; i < 100 && status !== 'processing'; i++) {
    status = (await poll(stack.url, stack.auth, res.json.jobId)).json.status
    if (status !== 'processing') await new Promise((r) => setTimeout(r, 10))
  }
  t.equal(status, 'processing')
  // A drain whose deadline comes before the job ends leaves it to the next start (not failed by the cut).
  t.equal(await stack.router.drain(50), 0, 'no HTTP request was in flight')
  await stack.router.close()
  const again = await restart(t, stack)
  const done = await settle(t, again.url, stack.auth, res.json.jobId)
  t.equal(done.json.status, 'completed')
  t.equal(done.json.data.data.length, 2)
  const billed = (await again.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(billed.length, 1)
  t.equal(billed[0]!.amount, atto('0.006'))
})

t.test('a job billed just before a crash is run again at the next start without a second charge', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const store = stack.router.store
  const id = '11111111-2222-3333-4444-555555555555'
  const now = Date.now()
  // As a crash leaves it: the job's charge committed, its own record still processing.
  await store.jobs.createJob({
    id,
    accountId: stack.account,
    keyId: stack.keyId,
    surface: 'images',
    model: IMAGE_MODEL,
    providerAddress: A,
    params: JSON.stringify({ n: 1, prefs: { sort: 2, sortSet: true } }),
    body: Buffer.from(JSON.stringify({ model: IMAGE_MODEL, prompt: 'x' })),
    bodyPath: null,
    createdAt: now,
  })
  await store.jobs.markProcessing(id, now)
  await store.ledger.recordCharge({ requestId: id, accountId: stack.account, keyId: stack.keyId, model: IMAGE_MODEL, provider: A, at: now, promptTokens: 0, completionTokens: 0, images: 1, audioMs: 0, cost: atto('0.003') })
  await stack.router.close()
  const again = await restart(t, stack)
  const done = await settle(t, again.url, stack.auth, id)
  t.equal(done.json.status, 'completed')
  t.equal(done.json.data.data.length, 1)
  const billed = (await again.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
  t.equal(billed.length, 1, 'billed once')
})

t.test('a job whose key was revoked before the restart fails at no cost', async (t) => {
  // The provider takes 3 s: the router is stopped long before the job could end (at the restart it fails
  // at once, so the wait costs nothing).
  const stack = await startStack(t, mediaProviders({ ttftMs: 3000 }))
  const key = await stack.newApiKey()
  const res = await submit(stack.url, key.auth, { model: IMAGE_MODEL, prompt: 'x' })
  t.equal(res.status, 202)
  // Revoked while its job runs (that run is not stopped), then the router stops before the job ends.
  await stack.router.credentials.revokeApiKey(stack.account, key.id)
  await new Promise((r) => setTimeout(r, 100))
  await stack.router.close()
  const again = await restart(t, stack)
  const done = await settle(t, again.url, stack.auth, res.json.jobId)
  t.equal(done.json.status, 'failed')
  t.match(done.json.errorMessage, /revoked/)
  t.equal((await again.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge').length, 0)
})

t.test('SIGKILL while a job runs: the next start resumes it; it completes and is billed exactly once', async (t) => {
  const sim = await startSimulator({ name: 'slow', ttftMs: 1500 })
  t.teardown(() => sim.close())
  const providers = [{ address: A, url: sim.url, trust_mode: 'standard', models: [{ id: IMAGE_MODEL, type: 'text-to-image', price: { image: '0.003' } }] }]
  const first = await spawnRouter(t, providers)
  const auth = { authorization: 'Bearer ' + first.key }
  const res = await submit(first.url, auth, { model: IMAGE_MODEL, prompt: 'x', n: 2 })
  t.equal(res.status, 202)
  await new Promise((r) => setTimeout(r, 300))
  first.child.kill('SIGKILL')
  await new Promise((r) => first.child.once('exit', r))
  const second = await spawnRouter(t, providers, {}, { dir: first.dir })
  const done = await settle(t, second.url, auth, res.json.jobId)
  t.equal(done.json.status, 'completed')
  t.equal(done.json.data.data.length, 2)
  t.equal(done.json.x_svc_trace.billing.total_cost, '0.006')
  second.child.kill('SIGKILL')
  await new Promise((r) => second.child.once('exit', r))
  const store = await openSqliteStore({ path: join(first.dir, 'svc.db') })
  t.teardown(() => store.close())
  const job = await store.jobs.getJob(res.json.jobId)
  t.equal(job?.status, 'completed')
  const billed = (await store.ledger.journal(job!.accountId)).filter((e) => e.kind === 'charge')
  t.same(billed.map((e) => [e.requestId, e.amount]), [[res.json.jobId, atto('0.006')]], 'one charge, under the job id')
})

t.test('fuzzed async bodies and job ids: every answer is a 202 or an enveloped error; every job ends; no hold left', async (t) => {
  const stack = await startStack(t, mediaProviders({ fault: 'status-500', faultCount: 3 }))
  const random = seeded(11)
  const base = JSON.stringify({ model: IMAGE_MODEL, prompt: 'a fox', n: 2, response_format: 'b64_json', size: '8x8', provider: { max_price: { image: 1 } } })
  const inserts = ['[', '}', '"', '\\', ',', '"n":0,', '"n":"3",', '"__proto__":{}', '\u0000', '\ud83d', '1e999', 'null']
  const jobs: string[] = []
  for (let i = 0; i < 150; i++) {
    let body = base
    for (let e = 0; e < 1 + Math.floor(random() * 3) && random() < 0.85; e++) {
      const at = Math.floor(random() * (body.length + 1))
      body = random() < 0.5 ? body.slice(0, at) + inserts[Math.floor(random() * inserts.length)] + body.slice(at) : body.slice(0, at) + body.slice(at + 1 + Math.floor(random() * 6))
    }
    const res = await submit(stack.url, stack.auth, body).catch(() => null)
    if (res === null) continue
    if (res.status === 202) jobs.push(res.json.jobId)
    else if (typeof res.json?.error?.code !== 'string' || typeof res.json?.request_id !== 'string' || res.status >= 500) t.fail(`${res.status} ${JSON.stringify(res.json)}`)
  }
  for (const id of ['', 'x', '..%2F..', '%00', 'a'.repeat(5000), "'; DROP TABLE jobs; --", '😀']) {
    const res = await call(`${stack.url}/v1/async/jobs/${encodeURIComponent(id)}?provider_address=%ZZ&model=`, { headers: stack.auth }).catch(() => null)
    if (res === null) continue
    // An id-shaped path is a 404 job_not_found; an empty one is no route (404 not_found); a head past the front
    // end's limit is refused there.
    const want = id.length > 4000 ? 431 : 404
    const code = id === '' ? 'not_found' : 'job_not_found'
    if (res.status !== want || typeof res.json?.error?.code !== 'string' || (want === 404 && res.json.error.code !== code)) {
      t.fail(`${id.slice(0, 20)}: ${res.status} ${JSON.stringify(res.json)}`)
    }
  }
  t.ok(jobs.length > 5, `some jobs were accepted (${jobs.length})`)
  for (const id of jobs) {
    const done = await settle(t, stack.url, stack.auth, id)
    if (done.json.status !== 'completed') t.fail(`job ${id} ${done.json.status}: ${done.json.errorMessage}`)
  }
  t.equal((await charges(stack)).length, jobs.length, 'one charge per job')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'no hold left')
})

t.test('/metrics: an accepted job is no request left in flight, its POST and its run each counted once', async (t) => {
  const stack = await startStack(t, mediaProviders())
  for (let i = 0; i < 3; i++) {
    const res = await submit(stack.url, stack.auth, { model: IMAGE_MODEL, prompt: 'x' })
    t.equal(res.status, 202)
    t.equal((await settle(t, stack.url, stack.auth, res.json.jobId)).json.status, 'completed')
  }
  const text = await (await request(stack.url + '/metrics')).body.text()
  const sample = (name: string) => Number(text.split('\n').find((l) => l.startsWith(name + ' '))?.split(' ')[1])
  t.equal(sample('svc_requests_in_flight'), 0, 'every start has its end (the gauge fell by one per accepted job)')
  const accepted = text.split('\n').filter((l) => l.startsWith('svc_requests_total{') && l.includes('status="202"'))
  t.equal(accepted.reduce((n, l) => n + Number(l.split(' ')[1]), 0), 3, 'three POSTs answered 202')
})
