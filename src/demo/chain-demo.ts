/**
 * `npm run demo:chain`: the router serving from a ledger, and paying it, on one machine. Starts anvil
 * (config/chain.yaml's rpc_url port, or a free one when that is taken), deploys contracts/LedgerManager.sol and
 * contracts/InferenceServing.sol, registers simulated providers from their own accounts with the stake (each a
 * 0G broker: it serves only a valid session token and settles its fees every few seconds with TEE-signed
 * settlements; TEE ones also sign their answers), opens the payer's ledger with 50 0G, then serves
 * config/chain.yaml with the payer's key. `svc-router chain status --config config/chain.yaml` (with
 * DEMO_PAYER_KEY set as printed) shows the balances move. Ctrl-C stops all of it.
 */
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { privateKeyToAccount } from 'viem/accounts'
import { randomBytes } from 'node:crypto'
import { loadConfig } from '../config/index.js'
import { devKeysBanner } from '../operator/bootstrap.js'
import { installProcessNet } from '../process-net.js'
import { serve } from '../serve.js'
import { startSimulator, type SimulatorHandle } from '../simulator/simulator.js'
import { createPublicClient, createWalletClient, http, parseEther, toHex, type LocalAccount } from 'viem'
import { mnemonicToAccount } from 'viem/accounts'
import { LEDGER_MANAGER_ABI } from '../settlement/abi.js'
import { ANVIL_MNEMONIC, chainAccount, RegistryContract, startAnvil, type LocalChain } from './local-chain.js'

/** The anvil account that pays the providers in the demo. */
const PAYER_INDEX = 10

const CONFIG = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'config', 'chain.yaml')

interface DemoService {
  readonly account: number
  readonly model: string
  readonly serviceType: 'chatbot' | 'text-to-image' | 'speech-to-text'
  /** Neuron per prompt token / per completion token, image or audio second (at 0.5 USD/0G: USD per 1M in comments). */
  readonly inputPrice: bigint
  readonly outputPrice: bigint
  readonly tee: 'TeeML' | 'centralized' | null
  readonly ttftMs: number
  readonly tokensPerS: number
}

const SERVICES: readonly DemoService[] = [
  // 0.20 / 0.60 USD per 1M tokens, TeeML with an acknowledged signer: private.
  { account: 1, model: 'qwen-2.5-7b-instruct', serviceType: 'chatbot', inputPrice: 400_000_000_000n, outputPrice: 1_200_000_000_000n, tee: 'TeeML', ttftMs: 15, tokensPerS: 250 },
  // 0.12 / 0.36, a TEE-TLS broker: verified.
  { account: 2, model: 'qwen-2.5-7b-instruct', serviceType: 'chatbot', inputPrice: 240_000_000_000n, outputPrice: 720_000_000_000n, tee: 'centralized', ttftMs: 40, tokensPerS: 180 },
  // 0.05 / 0.15, no enclave: standard.
  { account: 3, model: 'qwen-2.5-7b-instruct', serviceType: 'chatbot', inputPrice: 100_000_000_000n, outputPrice: 300_000_000_000n, tee: null, ttftMs: 120, tokensPerS: 80 },
  // 0.40 / 0.70.
  { account: 4, model: 'llama-3.3-70b-instruct', serviceType: 'chatbot', inputPrice: 800_000_000_000n, outputPrice: 1_400_000_000_000n, tee: null, ttftMs: 60, tokensPerS: 120 },
  // 0.003 USD per image.
  { account: 5, model: 'flux-schnell', serviceType: 'text-to-image', inputPrice: 0n, outputPrice: 6_000_000_000_000_000n, tee: null, ttftMs: 40, tokensPerS: 0 },
  // 0.0001 USD per second of audio.
  { account: 6, model: 'whisper-large-v3', serviceType: 'speech-to-text', inputPrice: 0n, outputPrice: 200_000_000_000_000n, tee: null, ttftMs: 40, tokensPerS: 0 },
]

async function startChainOnConfiguredPort(port: number): Promise<LocalChain> {
  try {
    return await startAnvil({ port })
  } catch {
    process.stdout.write(`port ${port} is taken: the demo chain listens on a free port instead\n`)
    return startAnvil()
  }
}

async function main(): Promise<void> {
  const configured = loadConfig({ file: CONFIG, env: process.env })
  const rpcPort = new URL(configured.registry.chain.rpc_url).port
  const chain = await startChainOnConfiguredPort(rpcPort === '' ? 8545 : Number(rpcPort))
  const sims: SimulatorHandle[] = []
  const stopAll = async (): Promise<void> => {
    await Promise.all(sims.map((s) => s.close()))
    await chain.stop()
  }
  try {
    const owner = chainAccount(0)
    const contract = await RegistryContract.deploy(chain.rpcUrl, owner)
    for (const s of SERVICES) {
      // Every provider settles with a TEE signer (the contract takes no other settlement); only TEE ones say so.
      const teeKey = `0x${randomBytes(32).toString('hex')}` as const
      const provider = chainAccount(s.account)
      const broker = { rpcUrl: chain.rpcUrl, serving: contract.address, account: provider as LocalAccount, inputPrice: s.inputPrice, outputPrice: s.outputPrice, settleIntervalMs: 5000 }
      const sim = await startSimulator({ name: `chain-${s.account}`, models: [s.model], ttftMs: s.ttftMs, tokensPerS: s.tokensPerS, teeKey, broker })
      sims.push(sim)
      await contract.addOrUpdateService(provider, {
        serviceType: s.serviceType,
        url: sim.url,
        model: s.model,
        verifiability: s.tee === null ? '' : s.tee === 'TeeML' ? 'TeeML' : 'TeeTLS',
        inputPrice: s.inputPrice,
        outputPrice: s.outputPrice,
        additionalInfo: JSON.stringify(s.tee === 'centralized' ? { ProviderType: 'centralized' } : s.tee === 'TeeML' ? { TeeType: 'TDX+H100', TeeVerifier: 'dstack' } : {}),
        teeSignerAddress: privateKeyToAccount(teeKey).address,
      })
      await contract.acknowledgeSigner(owner, provider.address)
      process.stdout.write(`registered ${provider.address} ${s.model} (${s.serviceType}${s.tee === null ? '' : `, ${s.tee}`}) at ${sim.url}\n`)
    }
    // The payer: anvil's account 10, its ledger opened with 50 0G; the router funds sub-accounts from it.
    const payerKey = toHex(mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: PAYER_INDEX }).getHdKey().privateKey!)
    const payer = chainAccount(PAYER_INDEX)
    const wallet = createWalletClient({ account: payer, transport: http(chain.rpcUrl) })
    const hash = await wallet.writeContract({ address: contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'addLedger', args: ['svc-router demo'], value: parseEther('50'), chain: null })
    await createPublicClient({ transport: http(chain.rpcUrl) }).waitForTransactionReceipt({ hash, pollingInterval: 100 })
    process.stdout.write(`payer ${payer.address}: ledger opened with 50 0G\n`)
    // Read by settlement.key_env when the router starts (not a config path: no SVC_ prefix).
    process.env.DEMO_PAYER_KEY = payerKey
    const config = loadConfig({
      file: CONFIG,
      // The demo's providers are simulators on loopback: addresses a router on a real chain refuses (README
      // "Providers as untrusted input").
      env: { SVC_REGISTRY_CHAIN_ALLOW_PRIVATE_URLS: 'true', ...process.env, SVC_REGISTRY_CHAIN_RPC_URL: chain.rpcUrl, SVC_REGISTRY_CHAIN_CONTRACT: contract.address },
    })
    installProcessNet()
    const router = await serve(config)
    process.stdout.write(`local chain ${chain.rpcUrl}, InferenceServing at ${contract.address}\nsvc-router listening on ${router.url}\n`)
    if (router.devKeys !== null) process.stdout.write(devKeysBanner(router.devKeys, router.url))
    process.stdout.write(
      `try a verified answer:\n  curl -s ${router.url}/v1/chat/completions -H "Authorization: Bearer $SK" -H 'X-SVC-Verify-TEE: true' \\\n` +
        `    -H 'X-SVC-Provider-Trust-Mode: private' -H 'content-type: application/json' \\\n` +
        `    -d '{"model":"qwen-2.5-7b-instruct","messages":[{"role":"user","content":"hi"}]}' | jq .x_svc_trace\n`,
    )
    process.stdout.write(
      `watch the router pay (the providers settle every 5 s):\n  DEMO_PAYER_KEY=${payerKey} SVC_REGISTRY_CHAIN_RPC_URL=${chain.rpcUrl} \\\n` +
        `    node dist/src/cli.js chain status --config config/chain.yaml\n`,
    )
    let closing = false
    const shutdown = (): void => {
      if (closing) process.exit(1)
      closing = true
      router
        .drain(config.server.drain_timeout_ms)
        .then(() => router.close())
        .then(stopAll)
        .then(
          () => process.exit(0),
          () => process.exit(1),
        )
    }
    process.on('SIGINT', shutdown)
    process.on('SIGTERM', shutdown)
  } catch (err) {
    await stopAll()
    throw err
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`demo:chain failed: ${String((err as Error)?.stack ?? err)}\n`)
  process.exit(1)
})
