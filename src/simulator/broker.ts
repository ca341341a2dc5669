/**
 * The simulator as a 0G provider's broker: it serves a request only with a session token it accepts, checked as
 * the broker does (the token's own signer is its `address`, it names this provider, it has not expired and an
 * ephemeral one lives at most 24 h, its generation is the sub-account's, its id is not revoked, and the
 * sub-account holds more than what this provider is owed and has not settled) → 401 (or 402 for the balance)
 * otherwise. What it serves is owed at its own prices, and every `settleIntervalMs` it takes what it is owed with
 * a TEE-signed settlement (settleFeesWithTEE), keeping what the balance could not cover for the next one.
 */
import { createPublicClient, createWalletClient, http, keccak256, parseEventLogs, toBytes, type LocalAccount, type PublicClient } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { log } from '../log.js'
import { SERVING_PAYMENT_ABI } from '../settlement/abi.js'
import { EPHEMERAL_MAX_MS, EPHEMERAL_TOKEN_ID, readSessionToken } from '../settlement/session-token.js'

export interface BrokerOptions {
  readonly rpcUrl: string
  /** The InferenceServing contract. */
  readonly serving: `0x${string}`
  /** The provider's own account (it sends the settlements). */
  readonly account: LocalAccount
  /** Neuron per prompt token, and per completion token or image. */
  readonly inputPrice: bigint
  readonly outputPrice: bigint
  /** Default 3000. */
  readonly settleIntervalMs?: number
  /** Neuron added to every settlement: a provider that takes more than it served (tests). */
  readonly overcharge?: bigint
  /** The broker's clock (epoch ms), against which a token's expiry is checked; default Date.now (tests skew it). */
  readonly now?: () => number
}

export type BrokerVerdict = { readonly user: string } | { readonly status: 401 | 402; readonly message: string }

export interface Broker {
  check(authorization: string | undefined): Promise<BrokerVerdict>
  /** An answer was served to `user`: what it is owed, read from the answer's usage. */
  served(user: string, body: string): void
  /** Neuron owed and not yet settled, per user. */
  readonly owed: Map<string, bigint>
  /** Neuron settled in all. */
  readonly settled: { total: bigint }
  settleNow(): Promise<void>
  close(): Promise<void>
}

const SETTLEMENT_TYPES = {
  TEESettlement: [
    { name: 'requestsHash', type: 'bytes32' },
    { name: 'nonce', type: 'uint256' },
    { name: 'provider', type: 'address' },
    { name: 'user', type: 'address' },
    { name: 'totalFee', type: 'uint256' },
  ],
} as const

export function startBroker(options: BrokerOptions, teeKey: `0x${string}`): Broker {
  const client = createPublicClient({ transport: http(options.rpcUrl, { retryCount: 0 }) }) as PublicClient
  const wallet = createWalletClient({ account: options.account, transport: http(options.rpcUrl, { retryCount: 0 }) })
  const signer = privateKeyToAccount(teeKey)
  const provider = options.account.address.toLowerCase()
  const owed = new Map<string, bigint>()
  const settled = { total: 0n }
  let nonce = BigInt(Date.now())
  let running: Promise<void> | null = null
  let closed = false

  async function check(authorization: string | undefined): Promise<BrokerVerdict> {
    if (authorization === undefined) return { status: 401, message: 'missing session token' }
    const token = await readSessionToken(authorization)
    if (token === null) return { status: 401, message: 'malformed session token' }
    const c = token.claims
    if (token.signer !== c.address.toLowerCase()) return { status: 401, message: 'token not signed by its address' }
    if (c.provider.toLowerCase() !== provider) return { status: 401, message: 'token for another provider' }
    const now = options.now?.() ?? Date.now()
    if (c.expiresAt <= now) return { status: 401, message: 'token expired' }
    if (c.tokenId === EPHEMERAL_TOKEN_ID && c.expiresAt - c.timestamp > EPHEMERAL_MAX_MS) return { status: 401, message: 'ephemeral token lives too long' }
    if (c.tokenId < 0 || c.tokenId > 255) return { status: 401, message: 'bad token id' }
    let account
    try {
      account = await client.readContract({ address: options.serving, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [c.address as `0x${string}`, options.account.address] })
    } catch {
      return { status: 401, message: 'no sub-account for this user' }
    }
    if (account.generation !== BigInt(c.generation)) return { status: 401, message: 'token generation revoked' }
    if ((account.revokedBitmap & (1n << BigInt(c.tokenId))) !== 0n) return { status: 401, message: 'token revoked' }
    const user = c.address.toLowerCase()
    if (account.balance - account.pendingRefund <= (owed.get(user) ?? 0n)) return { status: 402, message: 'sub-account balance too low' }
    return { user }
  }

  function served(user: string, body: string): void {
    const fee = feeOf(body, options.inputPrice, options.outputPrice)
    if (fee > 0n) owed.set(user, (owed.get(user) ?? 0n) + fee)
  }

  async function settle(): Promise<void> {
    const chainId = await client.getChainId()
    const batch = []
    for (const [user, fee] of owed) {
      if (fee <= 0n) continue
      const totalFee = fee + (options.overcharge ?? 0n)
      nonce += 1n
      const requestsHash = keccak256(toBytes(`${user}:${nonce}:${totalFee}`))
      const message = { requestsHash, nonce, provider: options.account.address, user: user as `0x${string}`, totalFee }
      const signature = await signer.signTypedData({
        domain: { name: '0G Inference Serving', version: '1', chainId, verifyingContract: options.serving },
        types: SETTLEMENT_TYPES,
        primaryType: 'TEESettlement',
        message,
      })
      batch.push({ ...message, signature })
    }
    if (batch.length === 0) return
    const hash = await wallet.writeContract({ address: options.serving, abi: SERVING_PAYMENT_ABI, functionName: 'settleFeesWithTEE', args: [batch], chain: null })
    const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 100 })
    for (const ev of parseEventLogs({ abi: SERVING_PAYMENT_ABI, logs: receipt.logs, eventName: 'TEESettlementResult' })) {
      const user = ev.args.user.toLowerCase()
      const item = batch.find((b) => b.user.toLowerCase() === user)
      if (item === undefined) continue
      const status = Number(ev.args.status)
      if (status === 0 || status === 1) {
        settled.total += item.totalFee - ev.args.unsettledAmount
        // What the balance could not cover stays owed (less the overcharge, which was never owed).
        const left = ev.args.unsettledAmount - (options.overcharge ?? 0n)
        owed.set(user, left > 0n ? left : 0n)
      } else {
        log.warn('simulator broker: settlement refused', { user, status })
      }
    }
  }

  function settleNow(): Promise<void> {
    running ??= settle()
      .catch((err: unknown) => log.warn('simulator broker: settling failed', { err: String((err as Error)?.message ?? err).slice(0, 300) }))
      .finally(() => (running = null))
    return running
  }

  const timer = setInterval(() => {
    if (!closed) void settleNow()
  }, options.settleIntervalMs ?? 3000)
  timer.unref()

  return {
    check,
    served,
    owed,
    settled,
    settleNow,
    async close() {
      closed = true
      clearInterval(timer)
      await running
    },
  }
}

/** What an answer is owed at these prices: its usage's prompt and completion tokens, or its images. */
export function feeOf(body: string, inputPrice: bigint, outputPrice: bigint): bigint {
  const at = body.lastIndexOf('"usage":')
  if (at >= 0) {
    const start = body.indexOf('{', at)
    let depth = 0
    for (let i = start; i >= 0 && i < body.length; i++) {
      if (body[i] === '{') depth++
      else if (body[i] === '}' && --depth === 0) {
        try {
          const u = JSON.parse(body.slice(start, i + 1)) as Record<string, unknown>
          const prompt = Number(u.prompt_tokens ?? u.input_tokens ?? 0)
          const completion = Number(u.completion_tokens ?? u.output_tokens ?? 0)
          if (Number.isSafeInteger(prompt) && Number.isSafeInteger(completion) && (prompt > 0 || completion > 0)) {
            return BigInt(prompt) * inputPrice + BigInt(completion) * outputPrice
          }
        } catch {
          // Not a usage object after all: read as an image answer below.
        }
        break
      }
    }
  }
  try {
    const v = JSON.parse(body) as { data?: unknown }
    if (Array.isArray(v.data)) return BigInt(v.data.length) * outputPrice
  } catch {
    // A stream without usage: nothing owed.
  }
  return 0n
}
