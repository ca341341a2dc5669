/**
 * TEE-verified answers (issue 29) against a real local chain: the signer the router trusts is the service's
 * teeSignerAddress as acknowledged on the contract; the simulator signs its answers as a 0G broker does, or
 * wrongly in each way the router must catch, on JSON and on streams.
 */
import t from 'tap'
import OpenAI from 'openai'
import { request } from 'undici'
import { chainAccount } from '../../src/demo/local-chain.js'
import type { TeeFault } from '../../src/simulator/simulator.js'
import { startChainStack, type ChainProvider } from '../helpers/chain-stack.js'
import { eventually } from '../helpers/wait.js'

const TEE: ChainProvider = { account: 1, model: 'qwen', inputPrice: 2_000_000_000n, outputPrice: 6_000_000_000n, tee: true }
const PLAIN: ChainProvider = { account: 2, model: 'qwen', inputPrice: 1_000_000_000n, outputPrice: 1_000_000_000n }

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  trace: Record<string, any> | undefined
  body: any
}

/** A chat request, JSON or streamed; a stream's trace is its last data chunk before [DONE]. */
async function chat(url: string, headers: Record<string, string>, body: Record<string, unknown> = {}): Promise<Answer> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'prove it' }], ...body }),
  })
  const text = await res.body.text()
  if (body.stream !== true) {
    const json = JSON.parse(text)
    return { status: res.statusCode, headers: res.headers, trace: json.x_svc_trace, body: json }
  }
  const events = text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6))
  if (events.at(-1) !== '[DONE]') throw new Error(`the stream did not end whole: ${text.slice(-300)}`)
  const traced = events.map((e) => (e === '[DONE]' ? {} : JSON.parse(e))).find((e) => e.x_svc_trace !== undefined)
  return { status: res.statusCode, headers: res.headers, trace: traced?.x_svc_trace, body: text }
}

async function tierOf(url: string, address: string): Promise<string | undefined> {
  const res = await request(`${url}/v1/providers?model=qwen`)
  const body = (await res.body.json()) as { data: { address: string; trust_mode: string }[] }
  return body.data.find((p) => p.address === address)?.trust_mode
}

t.test('an honest signer verifies, on JSON and streams; the flag is never forwarded', async (t) => {
  const { stack, providers } = await startChainStack(t, [TEE, PLAIN], { extra: { tee: { sample_rate: 0 } } })
  const tee = providers[0]!
  const pin = { ...stack.auth, 'x-svc-provider-address': tee.address }
  for (const stream of [false, true]) {
    const r = await chat(stack.url, { ...pin, 'x-svc-verify-tee': 'true' }, { stream })
    t.equal(r.status, 200)
    t.equal(r.trace?.tee_verified, true, `verified (${stream ? 'stream' : 'json'})`)
    t.notOk('tee_reason' in (r.trace ?? {}))
    t.match(r.headers['svc-res-key'], /^chatcmpl-/, 'the provider\'s ZG-Res-Key is relayed as SVC-Res-Key')
    // The body flag works as the header does, and is stripped before forwarding.
    const b = await chat(stack.url, pin, { stream, verify_tee: true })
    t.equal(b.trace?.tee_verified, true)
    t.notOk('verify_tee' in tee.sim!.stats.lastBody, 'verify_tee is not forwarded')
  }
  // Without the flag: no verdict in the trace.
  const plain = await chat(stack.url, pin)
  t.notOk('tee_verified' in plain.trace!)
  // A provider with no signer cannot verify: false, and why.
  const other = await chat(stack.url, { ...stack.auth, 'x-svc-provider-address': providers[1]!.address, 'x-svc-verify-tee': 'true' })
  t.same([other.trace?.tee_verified, other.trace?.tee_reason], [false, 'not_a_tee_provider'])
  // A malformed flag is a 400, never silently ignored.
  const bad = await chat(stack.url, { ...pin, 'x-svc-verify-tee': 'yes' })
  t.equal(bad.status, 400)
  t.equal(bad.body.error.code, 'invalid_request')
  const badBody = await chat(stack.url, pin, { verify_tee: 'true' })
  t.equal(badBody.status, 400)
})

/** A forged signature recovers to some other address, or (r not on the curve) to none at all. */
const FAULTS: [TeeFault, RegExp][] = [
  ['wrong-signer', /^wrong_signer$/],
  ['forged-signature', /^(wrong_signer|bad_signature)$/],
  ['hash-mismatch', /^hash_mismatch$/],
  ['no-signature', /^no_signature$/],
]

t.test('a wrong signer, a forged signature, mismatched hashes or no signature: false, and the tier goes', async (t) => {
  const { stack, providers } = await startChainStack(t, [TEE, PLAIN], { extra: { tee: { sample_rate: 0 } } })
  const tee = providers[0]!
  const pin = { ...stack.auth, 'x-svc-provider-address': tee.address, 'x-svc-verify-tee': 'true' }
  t.equal(await tierOf(stack.url, tee.address), 'private')
  for (const [fault, reason] of FAULTS) {
    tee.sim!.setOptions({ teeFault: fault })
    for (const stream of [false, true]) {
      const r = await chat(stack.url, pin, { stream })
      t.equal(r.status, 200, 'the answer itself is delivered')
      t.equal(r.trace?.tee_verified, false)
      t.match(r.trace?.tee_reason, reason, `${fault} (${stream ? 'stream' : 'json'})`)
    }
  }
  // Failed: routed as standard, so a private floor has no provider, until a check passes again.
  t.ok(await eventually(async () => (await tierOf(stack.url, tee.address)) === 'standard'), '/v1/providers shows the tier it is routed on')
  const floor = await chat(stack.url, { ...stack.auth, 'x-svc-provider-trust-mode': 'private' })
  t.equal(floor.status, 503)
  t.equal(floor.body.error.code, 'no_provider_for_trust_mode')
  tee.sim!.setOptions({ teeFault: 'none' })
  const passed = await chat(stack.url, pin)
  t.equal(passed.trace?.tee_verified, true)
  t.ok(await eventually(async () => (await tierOf(stack.url, tee.address)) === 'private'), 'a passing check restores the tier')
  const served = await chat(stack.url, { ...stack.auth, 'x-svc-provider-trust-mode': 'private' })
  t.equal(served.trace?.provider, tee.address)
  // Counted by outcome.
  const metrics = await (await request(`${stack.router.opsUrl}/metrics`)).body.text()
  t.match(metrics, new RegExp(`svc_tee_verifications_total\\{provider="${tee.address}",outcome="wrong_signer",kind="requested"\\} [2-4]\n`))
  t.match(metrics, new RegExp(`svc_tee_verifications_total\\{provider="${tee.address}",outcome="verified",kind="requested"\\} 1`))
})

t.test('the first verified request after start is judged as the rest, however long the recovery worker takes to start', async (t) => {
  // A deadline far below the worker's start (a thread loading viem: about 2 s on a busy 2-core machine under
  // Node 20, more under 24), far above a check with the worker up (a loopback GET and a 3-5 ms recovery).
  const { stack, providers } = await startChainStack(t, [TEE], { extra: { tee: { sample_rate: 0, verify_timeout_ms: 1000 } } })
  const pin = { ...stack.auth, 'x-svc-provider-address': providers[0]!.address, 'x-svc-verify-tee': 'true' }
  const first = await chat(stack.url, pin)
  t.equal(first.status, 200)
  t.same([first.trace?.tee_verified, first.trace?.tee_reason], [true, undefined], 'the first one, with the worker cold')
  const second = await chat(stack.url, pin, { stream: true })
  t.equal(second.trace?.tee_verified, true, 'and the next')
})

t.test('a signature that does not come in time: false with reason timeout, and the stream still ends', async (t) => {
  const { stack, providers } = await startChainStack(t, [TEE], { extra: { tee: { sample_rate: 0, verify_timeout_ms: 300 } } })
  const tee = providers[0]!
  tee.sim!.setOptions({ teeFault: 'slow-signature', slowHeadersMs: 5000 })
  for (const stream of [false, true]) {
    const r = await chat(stack.url, { ...stack.auth, 'x-svc-verify-tee': 'true' }, { stream })
    t.equal(r.status, 200)
    t.same([r.trace?.tee_verified, r.trace?.tee_reason], [false, 'timeout'])
  }
})

t.test('the signer is the one acknowledged on chain: a provider whose key the contract does not know fails', async (t) => {
  const { stack, providers, contract } = await startChainStack(t, [TEE], { extra: { tee: { sample_rate: 0 } } })
  const tee = providers[0]!
  // The provider points the contract at another signer; the owner acknowledges it; the broker still signs with its old key.
  await contract.addOrUpdateService(tee.account, { ...tee.params, teeSignerAddress: chainAccount(9).address })
  await contract.acknowledgeSigner(chainAccount(0), tee.account.address)
  t.ok(
    await eventually(async () => {
      const r = await chat(stack.url, { ...stack.auth, 'x-svc-verify-tee': 'true' })
      return r.trace?.tee_reason === 'wrong_signer'
    }, 5000),
    'checked against the chain\'s signer, not the one the answer names',
  )
})

t.test('background samples check TEE providers at no cost to clients, and demote a bad signer', async (t) => {
  const { stack, providers } = await startChainStack(t, [TEE, PLAIN], { extra: { tee: { sample_rate: 1 } } })
  const tee = providers[0]!
  tee.sim!.setOptions({ teeFault: 'hash-mismatch' })
  const r = await chat(stack.url, { ...stack.auth, 'x-svc-provider-address': tee.address })
  t.equal(r.status, 200)
  t.notOk('tee_verified' in r.trace!, 'a sampled answer carries no verdict and waits for none')
  t.ok(await eventually(async () => (await tierOf(stack.url, tee.address)) === 'standard'), 'the failed sample lowers the tier')
  const metrics = await (await request(`${stack.router.opsUrl}/metrics`)).body.text()
  t.match(metrics, /svc_tee_verifications_total\{provider="[^"]+",outcome="hash_mismatch",kind="sampled"\} [1-9]/)
  tee.sim!.setOptions({ teeFault: 'none' })
  await chat(stack.url, { ...stack.auth, 'x-svc-provider-address': tee.address, 'x-svc-provider-trust-mode': 'standard' })
  t.ok(await eventually(async () => (await tierOf(stack.url, tee.address)) === 'private'), 'a passing sample restores it')
})

t.test('the openai client reads tee_verified, JSON and streamed', async (t) => {
  const { stack } = await startChainStack(t, [TEE], { extra: { tee: { sample_rate: 0 } } })
  const openai = new OpenAI({ baseURL: stack.url + '/v1', apiKey: stack.key, maxRetries: 0, defaultHeaders: { 'X-SVC-Verify-TEE': 'true' } })
  const json = await openai.chat.completions.create({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] })
  t.equal((json as any).x_svc_trace.tee_verified, true)
  const stream = await openai.chat.completions.create({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }], stream: true })
  let verdict: unknown
  for await (const chunk of stream) {
    const trace = (chunk as any).x_svc_trace
    if (trace !== undefined) verdict = trace.tee_verified
  }
  t.equal(verdict, true)
})

t.test('the messages surface verifies too (translated to the broker\'s chat), JSON and streamed', async (t) => {
  const { stack, providers } = await startChainStack(t, [TEE], { extra: { tee: { sample_rate: 0 } } })
  for (const stream of [false, true]) {
    const res = await request(`${stack.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': stack.key, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'qwen', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }], stream, verify_tee: true }),
    })
    const text = await res.body.text()
    t.equal(res.statusCode, 200)
    const trace = stream
      ? JSON.parse(text.split('\n\n').find((e) => e.startsWith('event: message_stop'))!.split('\ndata: ')[1]!).x_svc_trace
      : JSON.parse(text).x_svc_trace
    t.equal(trace.tee_verified, true, stream ? 'stream' : 'json')
    t.notOk('verify_tee' in providers[0]!.sim!.stats.lastBody, 'not forwarded')
  }
})
