/**
 * A router whose registry is a real local chain: anvil on a free port, the registry contract deployed, each
 * provider a simulator (a TEE one when it has a signer key) registered from its own account with the stake,
 * TEE signers acknowledged by the contract's owner, and `serve()` reading the contract (registry.source: chain).
 */
import { randomBytes } from 'node:crypto'
import { privateKeyToAccount } from 'viem/accounts'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createPublicClient, createWalletClient, http, parseEther, toHex, type Account, type LocalAccount } from 'viem'
import { mnemonicToAccount } from 'viem/accounts'
import { LEDGER_MANAGER_ABI } from '../../src/settlement/abi.js'
import { ANVIL_MNEMONIC, chainAccount, NO_SIGNER, RegistryContract, startAnvil, type LocalChain, type ServiceParams } from '../../src/demo/local-chain.js'
import { startSimulator, type SimulatorHandle, type SimulatorOptions } from '../../src/simulator/simulator.js'
import { startStack, type Stack } from './stack.js'
import { ownDir } from './own-dir.js'
import { request } from 'undici'

export interface ChainProvider {
  /** Index of its anvil account (1…19; 0 is the contract's owner). */
  account: number
  model: string
  serviceType?: string
  /** Neuron per prompt token (chat) and per completion token, image or audio second. */
  inputPrice: bigint
  outputPrice: bigint
  verifiability?: string
  additionalInfo?: string
  /** A TEE provider: its simulator signs answers with a fresh key, registered as its teeSignerAddress. */
  tee?: boolean
  /** Its TEE signer's key (default: a fresh one), e.g. of a simulator started elsewhere at `url`. */
  teeKey?: `0x${string}`
  /** Whether the owner acknowledges its signer (default: true for a TEE provider). */
  acknowledged?: boolean
  sim?: SimulatorOptions
  /** Register this url instead of a simulator's. */
  url?: string
  /** As a 0G broker (needs `tee`): checks session tokens, settles its fees on chain (simulator/broker.ts). */
  broker?: { settleIntervalMs?: number; overcharge?: bigint; now?: () => number }
}

export interface RegisteredProvider {
  readonly account: Account
  /** Lower-case address: the pin header's value. */
  readonly address: string
  readonly sim: SimulatorHandle | null
  /** The TEE signer's private key, when it has one. */
  readonly teeKey: `0x${string}` | null
  readonly params: ServiceParams
}

export interface ChainStack {
  readonly chain: LocalChain
  readonly contract: RegistryContract
  readonly owner: Account
  readonly providers: RegisteredProvider[]
  /** Registers another provider (a simulator started for it unless `url`). */
  register(p: ChainProvider): Promise<RegisteredProvider>
}

export interface TapLike {
  teardown(fn: () => unknown): void
}

/** Anvil, the contract and the providers, without a router. */
export async function startChain(t: TapLike, providers: ChainProvider[]): Promise<ChainStack> {
  const chain = await startAnvil()
  t.teardown(() => chain.stop())
  const owner = chainAccount(0)
  const contract = await RegistryContract.deploy(chain.rpcUrl, owner)
  const registered: RegisteredProvider[] = []
  async function register(p: ChainProvider): Promise<RegisteredProvider> {
    const account = chainAccount(p.account)
    const teeKey = p.tee === true ? (p.teeKey ?? (`0x${randomBytes(32).toString('hex')}` as const)) : null
    let sim: SimulatorHandle | null = null
    let url = p.url
    if (url === undefined) {
      const broker = p.broker === undefined ? undefined : { rpcUrl: chain.rpcUrl, serving: contract.address, account: account as LocalAccount, inputPrice: p.inputPrice, outputPrice: p.outputPrice, ...p.broker }
      sim = await startSimulator({ name: `p${p.account}`, models: [p.model], ...(teeKey !== null && { teeKey }), ...(broker !== undefined && { broker }), ...p.sim })
      t.teardown(() => sim!.close())
      url = sim.url
    }
    const params: ServiceParams = {
      serviceType: p.serviceType ?? 'chatbot',
      url,
      model: p.model,
      verifiability: p.verifiability ?? (teeKey !== null ? 'TeeML' : ''),
      inputPrice: p.inputPrice,
      outputPrice: p.outputPrice,
      additionalInfo: p.additionalInfo ?? '{}',
      teeSignerAddress: teeKey !== null ? privateKeyToAccount(teeKey).address : NO_SIGNER,
    }
    await contract.addOrUpdateService(account, params)
    if (teeKey !== null && p.acknowledged !== false) await contract.acknowledgeSigner(owner, account.address)
    const r = { account, address: account.address.toLowerCase(), sim, teeKey, params }
    registered.push(r)
    return r
  }
  for (const p of providers) await register(p)
  return { chain, contract, owner, providers: registered, register }
}

/**
 * The chain, and a router serving from it. `config` is merged into the router's config file; loopback providers
 * are allowed (registry.chain.allow_private_urls) unless `allowPrivateUrls: false`.
 */
export async function startChainStack(
  t: TapLike,
  providers: ChainProvider[],
  config: { refreshMs?: number; usdPer0g?: string; overrides?: string; allowPrivateUrls?: boolean; extra?: Record<string, Record<string, unknown>>; beforeRouter?: (chain: ChainStack) => Promise<void> } = {},
): Promise<ChainStack & { stack: Stack }> {
  const chain = await startChain(t, providers)
  await config.beforeRouter?.(chain)
  const stack = await startStack(t, [], {
    ...config.extra,
    registry: {
      source: 'chain',
      path: config.overrides ?? '',
      chain: {
        rpc_url: chain.chain.rpcUrl,
        contract: chain.contract.address,
        refresh_ms: config.refreshMs ?? 500,
        usd_per_0g: config.usdPer0g ?? '0.5',
        // Its providers are simulators on loopback, which a router on a real chain refuses.
        allow_private_urls: config.allowPrivateUrls ?? true,
      },
    },
  })
  return { ...chain, stack }
}

/** The anvil account the router pays from in tests (index 10), and its key written to a 0600 file. */
export const PAYER_INDEX = 10

export function payerKeyFile(t: TapLike, index = PAYER_INDEX): string {
  const key = mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: index }).getHdKey().privateKey!
  const dir = ownDir(t, 'svc-payer-')
  const file = join(dir, `payer-${index}.key`)
  writeFileSync(file, toHex(key) + '\n', { mode: 0o600 })
  return file
}

/** The payer opens its ledger (addLedger) or adds to it (depositFund) with `amount0g` 0G. */
export async function fundLedger(stack: ChainStack, amount0g: string, index = PAYER_INDEX): Promise<void> {
  const account = chainAccount(index)
  const client = createPublicClient({ transport: http(stack.chain.rpcUrl) })
  const wallet = createWalletClient({ account, transport: http(stack.chain.rpcUrl) })
  const exists = await client.readContract({ address: stack.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [account.address] }).then(
    () => true,
    () => false,
  )
  const hash = exists
    ? await wallet.writeContract({ address: stack.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'depositFund', args: [], value: parseEther(amount0g), chain: null })
    : await wallet.writeContract({ address: stack.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'addLedger', args: [''], value: parseEther(amount0g), chain: null })
  const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 50 })
  if (receipt.status !== 'success') throw new Error('funding the ledger failed')
}

/** A JSON-RPC call to anvil (its own methods too: evm_mine, evm_setAutomine, evm_increaseTime, txpool_content). */
export async function anvilRpc(url: string, method: string, params: unknown[] = []): Promise<any> {
  const res = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) })
  const body = (await res.body.json()) as { result?: unknown; error?: { message: string } }
  if (body.error !== undefined) throw new Error(`${method}: ${body.error.message}`)
  return body.result
}

/** One chat request for the chain stacks' model `qwen`; its status (the body is read and dropped). */
export async function chatQwen(url: string, auth: Record<string, string>): Promise<number> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model: 'qwen', messages: [{ role: 'user', content: 'hi' }] }),
  })
  await res.body.dump()
  return res.statusCode
}
