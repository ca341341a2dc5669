/**
 * The one sender of the payer's transactions (STYLE.md "Money you owe"): calls are simulated first (a revert is
 * an error with the contract's reason, and nothing is sent), then sent one at a time with a nonce this sender
 * owns; a nonce another process used meanwhile ("nonce too low") is read again and the call sent once more.
 * Each send waits for its receipt: a reverted transaction is an error.
 */
import { BaseError, ContractFunctionRevertedError, createWalletClient, http, type Abi, type Chain, type LocalAccount, type PublicClient } from 'viem'

export interface ContractCall {
  readonly address: `0x${string}`
  readonly abi: Abi
  readonly functionName: string
  readonly args: readonly unknown[]
  readonly value?: bigint
}

export class TxSender {
  readonly #client: PublicClient
  readonly #account: LocalAccount
  readonly #wallet: ReturnType<typeof createWalletClient>
  #nonce: number | null = null
  #queue: Promise<unknown> = Promise.resolve()

  constructor(client: PublicClient, account: LocalAccount, rpcUrl: string, chain: Chain | undefined, timeoutMs: number) {
    this.#client = client
    this.#account = account
    this.#wallet = createWalletClient({ account, chain, transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 0 }) })
  }

  /** Sends `call` after every call before it; resolves with its transaction hash once mined. */
  send(call: ContractCall): Promise<`0x${string}`> {
    const run = this.#queue.then(() => this.#send(call, true))
    this.#queue = run.catch(() => {})
    return run
  }

  async #send(call: ContractCall, retryNonce: boolean): Promise<`0x${string}`> {
    await this.#client.simulateContract({ ...call, account: this.#account } as never)
    this.#nonce ??= await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'pending' })
    const nonce = this.#nonce
    let hash: `0x${string}`
    try {
      hash = await this.#wallet.writeContract({ ...call, account: this.#account, chain: this.#client.chain ?? null, nonce } as never)
    } catch (err) {
      // Whatever went wrong, the next send reads the nonce afresh.
      this.#nonce = null
      if (retryNonce && /nonce/i.test(errorText(err))) return this.#send(call, false)
      throw err
    }
    this.#nonce = nonce + 1
    const receipt = await this.#client.waitForTransactionReceipt({ hash, pollingInterval: 100, timeout: 120_000 })
    if (receipt.status !== 'success') throw new Error(`${call.functionName} reverted (${hash})`)
    return hash
  }
}

/** A short, key-free description of a failed call: the contract's error name and arguments when it reverted. */
export function errorText(err: unknown): string {
  if (err instanceof BaseError) {
    const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError)
    if (reverted instanceof ContractFunctionRevertedError && reverted.data?.errorName !== undefined) {
      const args = (reverted.data.args ?? []).map((a) => String(a)).join(', ')
      return `${reverted.data.errorName}(${args})`
    }
    return err.shortMessage
  }
  const text = String((err as Error)?.message ?? err)
  return text.length > 300 ? text.slice(0, 300) + '…' : text
}
