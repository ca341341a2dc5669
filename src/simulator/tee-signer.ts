/**
 * The simulator as a TEE provider (a 0G broker): each chat answer is signed as an enclave would sign it, with
 * EIP-191 over hex(sha256(request body)) + ":" + hex(sha256(response body)), and the signature is served at
 * GET /v1/proxy/signature/{chatID}. Fault modes sign wrongly in the ways the router must catch (settings.ts
 * TeeFault).
 */
import { createHash, randomBytes, type Hash } from 'node:crypto'
import type { ServerResponse } from 'node:http'
import { privateKeyToAccount } from 'viem/accounts'
import type { TeeFault } from './settings.js'

/** Signatures kept for fetching; the oldest go first. */
const MAX_KEPT = 10_000

export interface SignedAnswer {
  readonly text: string
  readonly signature: string
  readonly signing_address: string
  readonly signing_algo: 'ecdsa'
}

export class TeeSigner {
  readonly #answers = new Map<string, Promise<SignedAnswer>>()

  /**
   * Hashes what `res` writes from now on; once it finished, the answer is signed under `chatId` with `key` as
   * `fault` says. `request`: the request body as received.
   */
  record(res: ServerResponse, request: Buffer, chatId: string, key: `0x${string}`, fault: TeeFault): void {
    const hash: Hash = createHash('sha256')
    const write = res.write.bind(res) as (...args: unknown[]) => boolean
    const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse
    const take = (chunk: unknown): void => {
      if (typeof chunk === 'string') hash.update(chunk, 'utf8')
      else if (chunk instanceof Uint8Array) hash.update(chunk)
    }
    res.write = ((chunk: unknown, ...rest: unknown[]) => {
      take(chunk)
      return write(chunk, ...rest)
    }) as ServerResponse['write']
    res.end = ((chunk?: unknown, ...rest: unknown[]) => {
      if (typeof chunk !== 'function') take(chunk)
      return end(chunk, ...rest)
    }) as ServerResponse['end']
    res.once('finish', () => {
      const requestHash = createHash('sha256').update(request).digest('hex')
      const responseHash = hash.digest('hex')
      this.#keep(chatId, sign(requestHash, responseHash, key, fault))
    })
  }

  /** The signed answer of `chatId`, or undefined when there is none (unknown, or the no-signature fault). */
  get(chatId: string): Promise<SignedAnswer> | undefined {
    return this.#answers.get(chatId)
  }

  #keep(chatId: string, answer: Promise<SignedAnswer>): void {
    answer.catch(() => {})
    this.#answers.set(chatId, answer)
    if (this.#answers.size > MAX_KEPT) this.#answers.delete(this.#answers.keys().next().value!)
  }
}

async function sign(requestHash: string, responseHash: string, key: `0x${string}`, fault: TeeFault): Promise<SignedAnswer> {
  const signer = privateKeyToAccount(key)
  const text = `${requestHash}:${responseHash}`
  if (fault === 'wrong-signer') {
    const other = privateKeyToAccount(`0x${randomBytes(32).toString('hex')}`)
    return { text, signature: await other.signMessage({ message: text }), signing_address: other.address, signing_algo: 'ecdsa' }
  }
  if (fault === 'hash-mismatch') {
    const wrong = `${requestHash}:${createHash('sha256').update(responseHash).digest('hex')}`
    return { text: wrong, signature: await signer.signMessage({ message: wrong }), signing_address: signer.address, signing_algo: 'ecdsa' }
  }
  if (fault === 'forged-signature') {
    // 65 bytes that look like a signature (r, s, v = 27) and are not the signer's.
    const forged = `0x${randomBytes(64).toString('hex')}1b`
    return { text, signature: forged, signing_address: signer.address, signing_algo: 'ecdsa' }
  }
  return { text, signature: await signer.signMessage({ message: text }), signing_address: signer.address, signing_algo: 'ecdsa' }
}
