/**
 * The simulator as a TEE provider (a 0G broker): routes below /v1/proxy, ZG-Res-Key on chat answers, and a
 * signature per answer over hex(sha256(request)):hex(sha256(response)) by the key it was given.
 */
import t, { type Test } from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { request } from 'undici'
import { recoverMessageAddress } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { startSimulator } from '../../src/simulator/simulator.js'

const sha256 = (bytes: Buffer | string): string => createHash('sha256').update(bytes).digest('hex')

async function signedAnswer(t: Test, stream: boolean) {
  const key = `0x${randomBytes(32).toString('hex')}` as const
  const sim = await startSimulator({ teeKey: key })
  t.teardown(() => sim.close())
  const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream }))
  const res = await request(`${sim.url}/v1/proxy/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
  const answer = Buffer.from(await res.body.arrayBuffer())
  const id = res.headers['zg-res-key'] as string
  const sig = await request(`${sim.url}/v1/proxy/signature/${id}?model=m`)
  return { sim, key, body, answer, id, status: sig.statusCode, signed: (await sig.body.json()) as any }
}

t.test('a chat answer is signed over the exact bytes, JSON and streamed', async (t) => {
  for (const stream of [false, true]) {
    const { key, body, answer, id, status, signed } = await signedAnswer(t, stream)
    t.match(id, /^chatcmpl-/)
    t.equal(status, 200)
    t.equal(signed.text, `${sha256(body)}:${sha256(answer)}`)
    t.equal(signed.signing_address, privateKeyToAccount(key).address)
    t.equal(await recoverMessageAddress({ message: signed.text, signature: signed.signature }), privateKeyToAccount(key).address)
  }
})

t.test('fault modes sign wrongly, or not at all', async (t) => {
  const { sim, key, body } = await signedAnswer(t, false)
  const signer = privateKeyToAccount(key).address
  const ask = async () => {
    const res = await request(`${sim.url}/v1/proxy/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    const answer = Buffer.from(await res.body.arrayBuffer())
    const sig = await request(`${sim.url}/v1/proxy/signature/${res.headers['zg-res-key']}`)
    return { answer, status: sig.statusCode, signed: sig.statusCode === 200 ? ((await sig.body.json()) as any) : (await sig.body.dump(), null) }
  }
  sim.setOptions({ teeFault: 'wrong-signer' })
  const wrong = await ask()
  t.not(await recoverMessageAddress({ message: wrong.signed.text, signature: wrong.signed.signature }), signer)
  sim.setOptions({ teeFault: 'hash-mismatch' })
  const mismatch = await ask()
  t.equal(await recoverMessageAddress({ message: mismatch.signed.text, signature: mismatch.signed.signature }), signer)
  t.not(mismatch.signed.text, `${sha256(body)}:${sha256(mismatch.answer)}`)
  sim.setOptions({ teeFault: 'no-signature' })
  t.equal((await ask()).status, 404)
  const unknown = await request(`${sim.url}/v1/proxy/signature/nope`)
  t.equal(unknown.statusCode, 404)
  await unknown.body.dump()
})

t.test('without a key there is no signature route, and /v1/proxy still serves', async (t) => {
  const sim = await startSimulator({})
  t.teardown(() => sim.close())
  const res = await request(`${sim.url}/v1/proxy/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
  })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['zg-res-key'], undefined)
  await res.body.dump()
  const sig = await request(`${sim.url}/v1/proxy/signature/x`)
  t.equal(sig.statusCode, 404)
  await sig.body.dump()
  t.throws(() => sim.setOptions({ teeKey: '0x12' as `0x${string}` }), /teeKey/)
})
