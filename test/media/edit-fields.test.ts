/**
 * An image edit's form is read to its end before admission (within upstream.replay_buffer_bytes), so the
 * fields that decide what it may cost and how it is answered count wherever the client put them: clients such
 * as the `openai` SDK send the image first and `n` or `response_format` after `model`. Then:
 * - the hold is n × the image price (1 when n is absent), not the most an edit may ask for, so a capped key
 *   that can pay for what it asks is served;
 * - a response_format or n out of range after the image is a 400, as it would be before it;
 * - a form past the replay buffer is read only that far: an `n` beyond it is unknown, the most is held;
 * - a part the router acts on (model, n, response_format, a transcription's file) may come once, wherever in the
 *   upload: the router would have priced and checked one value while the provider acts on another.
 */
import t from 'tap'
import { request } from 'undici'
import { startStack, type Stack } from '../helpers/stack.js'
import { A, atto, AUDIO_MODEL, charges, IMAGE_MODEL, mediaProviders, PRICE_SORT, wav } from './fixtures.js'

const BOUNDARY = 'svc-edit-fields'

type Part = [name: string, value: string] | { file: string; bytes: Buffer }

/** A multipart body with its parts in the given order. */
function form(parts: Part[]): Buffer {
  const out: Buffer[] = []
  for (const p of parts) {
    if (Array.isArray(p)) out.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p[0]}"\r\n\r\n${p[1]}\r\n`))
    else {
      out.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p.file}"; filename="i.png"\r\nContent-Type: image/png\r\n\r\n`))
      out.push(p.bytes, Buffer.from('\r\n'))
    }
  }
  out.push(Buffer.from(`--${BOUNDARY}--\r\n`))
  return Buffer.concat(out)
}

async function edit(stack: Stack, auth: Record<string, string>, body: Buffer, path = '/v1/images/edits') {
  const res = await request(stack.url + path, {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...auth, ...PRICE_SORT },
    body,
  })
  return { status: res.statusCode, json: (await res.body.json()) as any }
}

const IMAGE = { file: 'image', bytes: Buffer.alloc(20_000, 7) }

t.test('fields after the image: n is held and billed as asked, and a capped key that can pay is served', async (t) => {
  const stack = await startStack(t, mediaProviders())
  // 0.01 pays for three images at 0.003, not for the ten an unknown n would hold.
  const capped = await stack.newApiKey({ creditLimit: atto('0.01') })

  const one = await edit(stack, capped.auth, form([IMAGE, ['prompt', 'a hat'], ['model', IMAGE_MODEL]]))
  t.equal(one.status, 200, 'n absent from a form read whole: 1')
  t.equal(one.json.data.length, 1)
  t.equal(one.json.x_svc_trace.billing.total_cost, '0.003')

  const two = await edit(stack, capped.auth, form([IMAGE, ['model', IMAGE_MODEL], ['prompt', 'a hat'], ['n', '2'], ['response_format', 'b64_json']]))
  t.equal(two.status, 200, 'n after model and after the image')
  t.equal(two.json.data.length, 2)
  t.equal(two.json.x_svc_trace.billing.total_cost, '0.006')
  t.equal(stack.sims.get(A)!.stats.lastForm!.fields.n, '2', 'the provider got the form as sent')

  const over = await edit(stack, capped.auth, form([IMAGE, ['model', IMAGE_MODEL], ['prompt', 'a hat'], ['n', '2']]))
  t.equal(over.status, 402, 'two more would pass the cap: refused before the provider')
  t.same((await charges(stack)).map((c) => c.amount), [atto('0.003'), atto('0.006')])
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})

t.test('a bad n or response_format after the image is a 400, nothing billed', async (t) => {
  const stack = await startStack(t, mediaProviders())
  const cases: [Part[], RegExp][] = [
    [[['model', IMAGE_MODEL], IMAGE, ['prompt', 'x'], ['n', '11']], /n must be an integer from 1 to 10/],
    // What Number() would read, but is no decimal integer as a provider reads one.
    ...['0x3', '1e1', ' 2', '2.0', '+2', ''].map((n): [Part[], RegExp] => [[['model', IMAGE_MODEL], IMAGE, ['prompt', 'x'], ['n', n]], /n must be an integer from 1 to 10/]),
    [[['model', IMAGE_MODEL], IMAGE, ['prompt', 'x'], ['response_format', 'gif']], /response_format must be one of/],
  ]
  for (const [parts, message] of cases) {
    const out = await edit(stack, stack.auth, form(parts))
    t.equal(out.status, 400)
    t.equal(out.json.error.code, 'invalid_request')
    t.match(out.json.error.message, message)
  }
  t.equal(stack.sims.get(A)!.stats.requests, 0, 'no provider was asked')
  t.same(await charges(stack), [])
})

t.test('a form past the replay buffer: read that far, so an n beyond it is unknown and the most is held', async (t) => {
  const stack = await startStack(t, mediaProviders(), { upstream: { replay_buffer_bytes: 64 * 1024 } })
  const big = { file: 'image', bytes: Buffer.alloc(200_000, 9) }
  const capped = await stack.newApiKey({ creditLimit: atto('0.01') })
  const late = await edit(stack, capped.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], big, ['n', '1']]))
  t.equal(late.status, 402, 'n came past the buffer: ten images are held, more than the key may spend')
  const rich = await edit(stack, stack.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], big, ['n', '2']]))
  t.equal(rich.status, 200, 'a key that can hold the most is served')
  t.equal(rich.json.data.length, 2, 'and the provider answers the n it was sent')
  t.equal(rich.json.x_svc_trace.billing.total_cost, '0.006', 'billed for what came back')
  t.equal(stack.sims.get(A)!.stats.lastForm!.files[0]!.bytes, 200_000, 'the whole upload went through')
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})

t.test('a part the router acts on may come once, before or past where it stops reading: a repeat is a 400, nothing billed', async (t) => {
  const stack = await startStack(t, mediaProviders(), { upstream: { replay_buffer_bytes: 64 * 1024 } })
  const big = { file: 'image', bytes: Buffer.alloc(200_000, 9) }
  const audio = { file: 'file', bytes: wav(2) }
  const cases: [string, string, Part[], string][] = [
    ['edit: n, then n again', '/v1/images/edits', [['model', IMAGE_MODEL], IMAGE, ['prompt', 'x'], ['n', '1'], ['n', '10']], 'n'],
    ['edit: model again past the replay buffer', '/v1/images/edits', [['model', IMAGE_MODEL], ['prompt', 'x'], big, ['model', 'other-model']], 'model'],
    ['transcription: model again after the file', '/v1/audio/transcriptions', [['model', AUDIO_MODEL], audio, ['model', 'other-model']], 'model'],
    ['transcription: a second file', '/v1/audio/transcriptions', [['model', AUDIO_MODEL], audio, { file: 'file', bytes: Buffer.alloc(300_000, 1) }], 'file'],
  ]
  for (const [label, path, parts, name] of cases) {
    const out = await edit(stack, stack.auth, form(parts), path)
    t.equal(out.status, 400, label)
    t.equal(out.json.error.code, 'invalid_request')
    t.equal(out.json.error.message, `the multipart field ${name} may appear only once`)
  }
  t.same(await charges(stack), [], 'nothing billed')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing held')
  // Repeats of a field the router does not act on are the provider's to read (OpenAI's array fields).
  const arrays = await edit(stack, stack.auth, form([['model', AUDIO_MODEL], ['timestamp_granularities[]', 'word'], ['timestamp_granularities[]', 'segment'], audio]), '/v1/audio/transcriptions')
  t.equal(arrays.status, 200, 'array fields pass')
})

t.test('an edit without an image or a prompt is refused by the router, sync and async: no provider, no job, nothing held', async (t) => {
  // Finding 9 of the second hostile-client pass: the async edit took such a form (202, money held) and its job
  // then failed at the provider; the sync one relayed the provider's refusal.
  const stack = await startStack(t, mediaProviders())
  const cases: [string, Part[], string][] = [
    ['no image', [['model', IMAGE_MODEL], ['prompt', 'x']], 'the multipart field image is required'],
    ['no prompt', [['model', IMAGE_MODEL], IMAGE], 'the multipart field prompt is required'],
    ['an empty prompt', [['model', IMAGE_MODEL], ['prompt', ''], IMAGE], 'the multipart field prompt must be a non-empty string'],
    ['neither, n after', [['model', IMAGE_MODEL], ['n', '2']], 'the multipart field image is required'],
  ]
  for (const path of ['/v1/images/edits', '/v1/async/images/edits']) {
    for (const [label, parts, message] of cases) {
      const res = await request(stack.url + path, {
        method: 'POST',
        headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, ...stack.auth, ...PRICE_SORT },
        body: form(parts),
      })
      const json = (await res.body.json()) as any
      t.equal(res.statusCode, 400, `${path}: ${label}`)
      t.equal(json.error.code, 'invalid_request')
      t.equal(json.error.message, message, `${path}: ${label}`)
      t.equal(json.request_id, res.headers['x-request-id'], 'the router\'s own envelope')
      t.ok(res.headers['x-ratelimit-remaining-requests'])
    }
  }
  t.equal(stack.sims.get(A)!.stats.requests, 0, 'no provider was asked')
  t.same(await stack.router.store.jobs.unfinishedJobs(), [], 'no job exists')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing held')
  t.same(await charges(stack), [])
  // Several images as image[] (OpenAI's array form) meet the requirement.
  const many = { file: 'image[]', bytes: Buffer.alloc(1000, 3) }
  t.equal((await edit(stack, stack.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], many, many]))).status, 200, 'image[] is an image')
  t.equal((await edit(stack, stack.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], many]), '/v1/async/images/edits')).status, 202)
})

t.test('a form past the replay buffer is judged at its end: a late image passes, a missing one is a 400 and no job', async (t) => {
  const stack = await startStack(t, mediaProviders(), { upstream: { replay_buffer_bytes: 64 * 1024 } })
  const mask = { file: 'mask', bytes: Buffer.alloc(200_000, 4) }
  const late = await edit(stack, stack.auth, form([['model', IMAGE_MODEL], mask, ['prompt', 'x'], IMAGE]))
  t.equal(late.status, 200, 'the image after the buffer was seen')
  t.same(stack.sims.get(A)!.stats.lastForm!.files.map((f) => f.field), ['mask', 'image'])
  for (const path of ['/v1/images/edits', '/v1/async/images/edits']) {
    const res = await edit(stack, stack.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], mask]), path)
    t.equal(res.status, 400, path)
    t.equal(res.json.error.message, 'the multipart field image is required')
    const noPrompt = await edit(stack, stack.auth, form([['model', IMAGE_MODEL], mask, IMAGE]), path)
    t.equal(noPrompt.status, 400, path)
    t.equal(noPrompt.json.error.message, 'the multipart field prompt is required')
  }
  t.same(await stack.router.store.jobs.unfinishedJobs(), [], 'no job exists')
  t.equal(stack.router.ledger.reserved(stack.account), 0n, 'nothing held')
  t.same((await charges(stack)).length, 1, 'only the edit that had its image was billed')
})

t.test('an async edit past the replay buffer: its job starts once the upload is all there, so a late n is the n held', async (t) => {
  const stack = await startStack(t, mediaProviders(), { upstream: { replay_buffer_bytes: 64 * 1024 } })
  const big = { file: 'image', bytes: Buffer.alloc(200_000, 9) }
  // 0.01 cannot hold ten images at 0.003; the two asked for after the buffer it can.
  const capped = await stack.newApiKey({ creditLimit: atto('0.01') })
  const accepted = await edit(stack, capped.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], big, ['n', '2']]), '/v1/async/images/edits')
  t.equal(accepted.status, 202)
  let job: any = null
  for (let i = 0; i < 400 && (job === null || !['completed', 'failed'].includes(job.status)); i++) {
    if (i > 0) await new Promise((resolve) => setTimeout(resolve, 25))
    const res = await request(`${stack.url}/v1/async/jobs/${accepted.json.jobId}`, { headers: capped.auth })
    job = await res.body.json()
  }
  t.equal(job.status, 'completed')
  t.equal(job.data.data.length, 2)
  t.equal(job.x_svc_trace.billing.total_cost, '0.006')
  const late = await edit(stack, capped.auth, form([['model', IMAGE_MODEL], ['prompt', 'x'], big, ['n', '11']]), '/v1/async/images/edits')
  t.equal(late.status, 400, 'a late n out of range: refused before any job exists')
  t.match(late.json.error.message, /n must be an integer from 1 to 10/)
  t.same(await stack.router.store.jobs.unfinishedJobs(), [])
  t.equal(stack.router.ledger.reserved(stack.account), 0n)
})
