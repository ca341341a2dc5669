/**
 * A wallet signing in to the console the way the browser page does: ask for a nonce, build the EIP-4361
 * message with viem's createSiweMessage, sign it with a local key (viem privateKeyToAccount), post it.
 */
import { createSiweMessage } from 'viem/siwe'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { call, type Answer } from '../auth/http.js'

export interface Site {
  readonly url: string
}

/** A fresh local wallet. */
export function newWallet(): PrivateKeyAccount {
  return privateKeyToAccount(generatePrivateKey())
}

/** The headers a browser on the console page sends with a same-origin fetch. */
export function sameOrigin(site: Site): Record<string, string> {
  return { origin: new URL(site.url).origin, 'sec-fetch-site': 'same-origin' }
}

export interface MessageFields {
  domain?: string
  uri?: string
  chainId?: number
  nonce?: string
  address?: `0x${string}`
  expirationTime?: Date
  issuedAt?: Date
}

export async function nonce(site: Site): Promise<string> {
  const answer = await call(site, 'GET', '/v1/auth/nonce', { headers: sameOrigin(site) })
  if (answer.status !== 200) throw new Error(`nonce: ${answer.status} ${answer.text}`)
  return answer.json.nonce as string
}

/** A SIWE message for `wallet` on `site`, with any field overridden. */
export async function message(site: Site, wallet: PrivateKeyAccount, fields: MessageFields = {}): Promise<string> {
  const host = new URL(site.url).host
  return createSiweMessage({
    domain: fields.domain ?? host,
    address: fields.address ?? wallet.address,
    statement: 'Sign in to the svc-router console.',
    uri: fields.uri ?? `${new URL(site.url).origin}/console`,
    version: '1',
    chainId: fields.chainId ?? 1,
    nonce: fields.nonce ?? (await nonce(site)),
    issuedAt: fields.issuedAt ?? new Date(),
    ...(fields.expirationTime !== undefined && { expirationTime: fields.expirationTime }),
  })
}

export function verify(site: Site, text: string, signature: string, headers: Record<string, string> = sameOrigin(site)): Promise<Answer> {
  return call(site, 'POST', '/v1/auth/verify', { headers, body: { message: text, signature } })
}

/** The session cookie (`name=value`) of a Set-Cookie answer. */
export function cookieOf(answer: Answer): string {
  const set = answer.headers['set-cookie']
  const line = Array.isArray(set) ? set[0] : set
  if (line === undefined) throw new Error(`no Set-Cookie in ${answer.status} ${answer.text}`)
  return line.split(';')[0]!
}

export interface SignedIn {
  readonly wallet: PrivateKeyAccount
  readonly cookie: string
  /** Same-origin headers with the session cookie: what the console page sends. */
  readonly headers: Record<string, string>
}

/** Signs `wallet` (default: a fresh one) in; fails the test run if that does not work. */
export async function signIn(site: Site, wallet: PrivateKeyAccount = newWallet()): Promise<SignedIn> {
  const text = await message(site, wallet)
  const answer = await verify(site, text, await wallet.signMessage({ message: text }))
  if (answer.status !== 200) throw new Error(`sign-in: ${answer.status} ${answer.text}`)
  const cookie = cookieOf(answer)
  return { wallet, cookie, headers: { ...sameOrigin(site), cookie } }
}
