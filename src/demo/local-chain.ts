/**
 * A local chain for tests and `npm run demo:chain`: anvil (the @foundry-rs/anvil npm package, a dev dependency,
 * whose binary ships in its platform package) on a free loopback port, the ledger of contracts/LedgerManager.sol
 * and the registry of contracts/InferenceServing.sol deployed from it (the registry registered on the ledger as
 * the recommended `inference-v1.0` service), and providers registering from their own accounts with the stake
 * the contract demands.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createPublicClient, createWalletClient, http, parseEther, type Abi, type Account, type Hex, type PublicClient } from 'viem'
import { mnemonicToAccount } from 'viem/accounts'
import { foundry } from 'viem/chains'

/** anvil's default mnemonic: its accounts are funded at start, account 0 deploys. */
export const ANVIL_MNEMONIC = 'test test test test test test test test test test test junk'
/** What MIN_PROVIDER_STAKE asks of a provider's first registration. */
export const PROVIDER_STAKE = parseEther('100')

/** The compiled contract (scripts/compile-contract.mjs writes it from contracts/InferenceServing.sol). */
export interface RegistryArtifact {
  readonly abi: Abi
  readonly bytecode: Hex
}

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

export function registryArtifact(): RegistryArtifact {
  return contractArtifact('InferenceServing')
}

export function contractArtifact(name: 'InferenceServing' | 'LedgerManager'): RegistryArtifact {
  return JSON.parse(readFileSync(join(ROOT, 'contracts', `${name}.json`), 'utf8')) as RegistryArtifact
}

/** The service name the deployment registers the registry under on the ledger (serviceType-version). */
export const SERVICE_NAME = 'inference-v1.0'

/** The anvil binary of this platform's package. */
export function anvilBinary(): string {
  const require = createRequire(import.meta.url)
  const arch = process.arch === 'x64' ? 'amd64' : process.arch
  const pkg = `@foundry-rs/anvil-${process.platform}-${arch}`
  const dir = dirname(require.resolve(`${pkg}/package.json`))
  return join(dir, 'bin', process.platform === 'win32' ? 'anvil.exe' : 'anvil')
}

/** The i-th account of anvil's mnemonic. */
export function chainAccount(index: number): Account {
  return mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: index })
}

export interface LocalChain {
  readonly rpcUrl: string
  readonly port: number
  /** Stops anvil (SIGKILL when `hard`: an RPC that vanishes mid-run). */
  stop(hard?: boolean): Promise<void>
}

/** Starts anvil on 127.0.0.1 (port 0: a free one) and resolves once it listens. */
export async function startAnvil(options: { port?: number; accounts?: number } = {}): Promise<LocalChain> {
  const child: ChildProcess = spawn(
    anvilBinary(),
    ['--host', '127.0.0.1', '--port', String(options.port ?? 0), '--accounts', String(options.accounts ?? 20), '--balance', '10000'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  )
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    const onData = (chunk: Buffer): void => {
      out += chunk.toString('utf8')
      const m = /Listening on 127\.0\.0\.1:(\d+)/.exec(out)
      if (m !== null) {
        child.stdout!.off('data', onData)
        // Keep draining its output, or a chatty anvil would block on a full pipe.
        child.stdout!.resume()
        resolve(Number(m[1]))
      } else if (out.length > 1_000_000) out = out.slice(-10_000)
    }
    child.stdout!.on('data', onData)
    child.stderr!.resume()
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`anvil exited before listening (code ${code}): ${out.slice(-500)}`)))
  })
  let exited = child.exitCode !== null
  const done = new Promise<void>((resolve) => child.once('exit', () => ((exited = true), resolve())))
  return {
    rpcUrl: `http://127.0.0.1:${port}`,
    port,
    async stop(hard = false) {
      if (exited) return
      child.kill(hard ? 'SIGKILL' : 'SIGTERM')
      await done
    },
  }
}

/** What a provider registers (the contract's ServiceParams). */
export interface ServiceParams {
  readonly serviceType: string
  readonly url: string
  readonly model: string
  readonly verifiability: string
  readonly inputPrice: bigint
  readonly outputPrice: bigint
  readonly additionalInfo: string
  readonly teeSignerAddress: `0x${string}`
}

export const NO_SIGNER = '0x0000000000000000000000000000000000000000' as const

/** The deployed registry, written to from the accounts that own each action. */
export class RegistryContract {
  readonly address: `0x${string}`
  /** The LedgerManager the registry takes its funds from (zero address when deployed without one). */
  ledger: `0x${string}` = NO_SIGNER
  readonly #rpcUrl: string
  readonly #abi: Abi
  readonly #client: PublicClient

  constructor(rpcUrl: string, address: `0x${string}`, abi: Abi) {
    this.address = address
    this.#rpcUrl = rpcUrl
    this.#abi = abi
    this.#client = createPublicClient({ chain: foundry, transport: http(rpcUrl), pollingInterval: 50 }) as PublicClient
  }

  /**
   * Deploys the ledger and the registry from `owner` (account 0 by default), and registers the registry on the
   * ledger as the recommended inference service. `lockTimeS`: how long a requested refund stays locked.
   */
  static async deploy(rpcUrl: string, owner: Account = chainAccount(0), options: { lockTimeS?: number } = {}): Promise<RegistryContract> {
    const wallet = createWalletClient({ account: owner, chain: foundry, transport: http(rpcUrl) })
    const client = createPublicClient({ chain: foundry, transport: http(rpcUrl), pollingInterval: 50 })
    async function deploy(name: 'InferenceServing' | 'LedgerManager', args: readonly unknown[]): Promise<`0x${string}`> {
      const { abi, bytecode } = contractArtifact(name)
      const hash = await wallet.deployContract({ abi, bytecode, args } as never)
      const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 50 })
      if (receipt.contractAddress == null) throw new Error(`the ${name} contract was not deployed`)
      return receipt.contractAddress
    }
    const ledger = await deploy('LedgerManager', [])
    const address = await deploy('InferenceServing', [ledger, BigInt(options.lockTimeS ?? 3600)])
    const contract = new RegistryContract(rpcUrl, address, registryArtifact().abi)
    contract.ledger = ledger
    const ledgerAbi = contractArtifact('LedgerManager').abi
    for (const [functionName, args] of [
      ['registerService', ['inference', 'v1.0', address, 'svc-router local chain']],
      ['setRecommendedService', ['inference', 'v1.0']],
    ] as const) {
      const hash = await wallet.writeContract({ address: ledger, abi: ledgerAbi, functionName, args } as never)
      const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 50 })
      if (receipt.status !== 'success') throw new Error(`${functionName} reverted`)
    }
    return contract
  }

  /** Any call of the registry from `account` (a payer's own calls: revokeAllTokens, revokeToken…). */
  call(account: Account, functionName: string, args: readonly unknown[]): Promise<void> {
    return this.#write(account, functionName, args)
  }

  async #write(account: Account, functionName: string, args: readonly unknown[], value?: bigint): Promise<void> {
    const wallet = createWalletClient({ account, chain: foundry, transport: http(this.#rpcUrl) })
    const hash = await wallet.writeContract({ address: this.address, abi: this.#abi, functionName, args, ...(value !== undefined && { value }) } as never)
    const receipt = await this.#client.waitForTransactionReceipt({ hash, pollingInterval: 50 })
    if (receipt.status !== 'success') throw new Error(`${functionName} reverted`)
  }

  /** Registers `provider`'s service (with the stake) or updates it (without value). */
  async addOrUpdateService(provider: Account, params: ServiceParams): Promise<void> {
    const exists = (await this.#client.readContract({ address: this.address, abi: this.#abi, functionName: 'serviceExists', args: [provider.address] })) as boolean
    await this.#write(provider, 'addOrUpdateService', [params], exists ? undefined : PROVIDER_STAKE)
  }

  removeService(provider: Account): Promise<void> {
    return this.#write(provider, 'removeService', [])
  }

  /** The owner acknowledges the provider's TEE signer (what makes a TeeML service `private`). */
  acknowledgeSigner(owner: Account, provider: `0x${string}`): Promise<void> {
    return this.#write(owner, 'acknowledgeTEESignerByOwner', [provider])
  }

  revokeSigner(owner: Account, provider: `0x${string}`): Promise<void> {
    return this.#write(owner, 'revokeTEESignerAcknowledgement', [provider])
  }
}
