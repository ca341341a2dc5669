/**
 * `svc-router simulate-provider`: runs the simulated provider in the foreground until SIGINT/SIGTERM.
 */
import { parseArgs } from 'node:util'
import { isAddress } from 'viem'
import { loadAccountKey } from '../settlement/payer.js'
import type { BrokerOptions } from './broker.js'
import { resolveSettings } from './settings.js'
import { SIMULATOR_FAULTS, startSimulator, TEE_FAULTS, type SimulatorFault, type SimulatorOptions, type TeeFault } from './simulator.js'

const USAGE = `Usage: svc-router simulate-provider [options]

Runs a simulated OpenAI-compatible provider (GET /v1/models, POST /v1/chat/completions).

Options:
  --host HOST                 address to listen on (default 127.0.0.1)
  --port N                    port to listen on, 0 for any (default 9001)
  --name NAME                 echoed in x-simulator-name and system_fingerprint (default sim)
  --ttft-ms N                 delay before the first token (default 0)
  --tokens-per-s N            pace tokens, 0 for no pacing (default 0)
  --completion-tokens N       tokens per answer, capped by max_tokens (default 16)
  --fault FAULT               one of ${SIMULATOR_FAULTS.join(', ')} (default none)
  --fault-count N             apply the fault to the first N requests only (default: all)
  --fault-after-chunks N      chunks sent before reset-mid-stream resets (default 2)
  --slow-headers-ms N         delay of the slow-headers fault (default 1000)
  --models a,b                serve only these models; others get 404
  --tee-key 0xKEY             act as a TEE provider (a 0G broker): sign chat answers with this private key,
                              send ZG-Res-Key, serve GET /v1/proxy/signature/{chatID}
  --tee-fault FAULT           sign wrongly: one of ${TEE_FAULTS.join(', ')} (default none)

As a 0G provider's broker on a chain (with --tee-key, the signer registered for the provider): requests below
/v1/proxy are served only with a payer's session token it accepts (401 otherwise, 402 when the sub-account is
short), what is served is owed at the given prices, and the fees are settled on chain with TEE-signed
settlements (settleFeesWithTEE) sent from the provider's own account:
  --chain-rpc URL             the chain's JSON-RPC endpoint (http or https)
  --serving 0xADDR            the InferenceServing contract the provider is registered in
  --provider-key-file FILE    the provider's account key, hex (mode 0600: readable by its owner only)
  --provider-key-env NAME     or the variable holding it
  --input-price NEURON        neuron per prompt token, as registered for the service
  --output-price NEURON       neuron per completion token (or image, or audio second), as registered
  --settle-interval-ms N      how often it settles what it is owed (default 3000)
  -h, --help                  print this help
`

const OPTIONS = {
  host: { type: 'string' },
  port: { type: 'string' },
  name: { type: 'string' },
  'ttft-ms': { type: 'string' },
  'tokens-per-s': { type: 'string' },
  'completion-tokens': { type: 'string' },
  fault: { type: 'string' },
  'fault-count': { type: 'string' },
  'fault-after-chunks': { type: 'string' },
  'slow-headers-ms': { type: 'string' },
  models: { type: 'string' },
  'tee-key': { type: 'string' },
  'tee-fault': { type: 'string' },
  'chain-rpc': { type: 'string' },
  serving: { type: 'string' },
  'provider-key-file': { type: 'string' },
  'provider-key-env': { type: 'string' },
  'input-price': { type: 'string' },
  'output-price': { type: 'string' },
  'settle-interval-ms': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const

/** Runs the simulator until SIGINT/SIGTERM; invalid arguments print an error and set exit code 2. */
export async function simulateProviderCommand(argv: string[]): Promise<void> {
  let options: SimulatorOptions | 'help'
  try {
    options = parseOptions(argv)
  } catch (err) {
    process.stderr.write(`simulate-provider: ${(err as Error).message}\nRun with --help for usage.\n`)
    process.exitCode = 2
    return
  }
  if (options === 'help') {
    process.stdout.write(USAGE)
    return
  }
  let sim
  try {
    sim = await startSimulator(options)
  } catch (err) {
    process.stderr.write(`simulate-provider: cannot listen on ${options.host}:${options.port}: ${(err as Error).message}\n`)
    process.exitCode = 1
    return
  }
  process.stdout.write(`simulator listening on ${sim.url}\n`)
  if (options.broker !== undefined) {
    process.stdout.write(`as the 0G broker of provider ${options.broker.account.address}: settling every ${options.broker.settleIntervalMs ?? 3000} ms\n`)
  }
  await untilSignal()
  await sim.close()
}

function parseOptions(argv: string[]): SimulatorOptions | 'help' {
  const { values } = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false })
  if (values.help === true) return 'help'
  const options: SimulatorOptions = {
    host: values.host ?? '127.0.0.1',
    port: integer('--port', values.port ?? '9001'),
  }
  if (options.port! > 65535) throw new Error(`--port must be at most 65535, got ${values.port}`)
  if (values.name !== undefined) options.name = values.name
  if (values['ttft-ms'] !== undefined) options.ttftMs = number('--ttft-ms', values['ttft-ms'])
  if (values['tokens-per-s'] !== undefined) options.tokensPerS = number('--tokens-per-s', values['tokens-per-s'])
  if (values['completion-tokens'] !== undefined) {
    options.completionTokens = integer('--completion-tokens', values['completion-tokens'])
  }
  if (values.fault !== undefined) {
    if (!(SIMULATOR_FAULTS as readonly string[]).includes(values.fault)) {
      throw new Error(`--fault must be one of ${SIMULATOR_FAULTS.join(', ')}, got ${values.fault}`)
    }
    options.fault = values.fault as SimulatorFault
  }
  if (values['fault-count'] !== undefined) options.faultCount = integer('--fault-count', values['fault-count'])
  if (values['fault-after-chunks'] !== undefined) {
    options.faultAfterChunks = integer('--fault-after-chunks', values['fault-after-chunks'])
  }
  if (values['slow-headers-ms'] !== undefined) {
    options.slowHeadersMs = number('--slow-headers-ms', values['slow-headers-ms'])
  }
  if (values['tee-key'] !== undefined) options.teeKey = values['tee-key'] as `0x${string}`
  if (values['tee-fault'] !== undefined) {
    if (!(TEE_FAULTS as readonly string[]).includes(values['tee-fault'])) {
      throw new Error(`--tee-fault must be one of ${TEE_FAULTS.join(', ')}, got ${values['tee-fault']}`)
    }
    options.teeFault = values['tee-fault'] as TeeFault
  }
  if (values.models !== undefined) {
    const models = values.models.split(',').map((m) => m.trim()).filter((m) => m !== '')
    if (models.length === 0) throw new Error('--models needs at least one model name')
    options.models = models
  }
  const broker = brokerOptions(values)
  if (broker !== undefined) {
    if (options.teeKey === undefined) throw new Error('--chain-rpc needs --tee-key (the broker signs its settlements with the TEE signer registered for the provider)')
    options.broker = broker
  }
  resolveSettings(options)
  return options
}

const BROKER_FLAGS = ['serving', 'provider-key-file', 'provider-key-env', 'input-price', 'output-price', 'settle-interval-ms'] as const

/** The broker's options from its flags; undefined without --chain-rpc (and then none of its flags may be given). */
function brokerOptions(values: Partial<Record<(typeof BROKER_FLAGS)[number] | 'chain-rpc', string>>): BrokerOptions | undefined {
  const rpcUrl = values['chain-rpc']
  if (rpcUrl === undefined) {
    const stray = BROKER_FLAGS.find((f) => values[f] !== undefined)
    if (stray !== undefined) throw new Error(`--${stray} is a broker option: it needs --chain-rpc`)
    return undefined
  }
  if (!URL.canParse(rpcUrl) || !['http:', 'https:'].includes(new URL(rpcUrl).protocol)) throw new Error(`--chain-rpc must be an http(s) URL, got ${rpcUrl}`)
  const serving = values.serving
  if (serving === undefined || !isAddress(serving, { strict: false })) throw new Error(`--serving must be the InferenceServing contract's 0x address${serving === undefined ? '' : `, got ${serving}`}`)
  const file = values['provider-key-file'] ?? ''
  const envName = values['provider-key-env'] ?? ''
  if ((file === '') === (envName === '')) throw new Error('give the provider\'s account key with one of --provider-key-file or --provider-key-env')
  const account = loadAccountKey(file, envName, { file: '--provider-key-file', env: '--provider-key-env', key: 'the provider key' })
  const options: BrokerOptions = {
    rpcUrl,
    serving: serving as `0x${string}`,
    account,
    inputPrice: neuron('--input-price', values['input-price']),
    outputPrice: neuron('--output-price', values['output-price']),
    ...(values['settle-interval-ms'] !== undefined && { settleIntervalMs: settleInterval(values['settle-interval-ms']) }),
  }
  return options
}

function settleInterval(text: string): number {
  const ms = integer('--settle-interval-ms', text)
  if (ms < 100) throw new Error(`--settle-interval-ms must be at least 100, got ${text}`)
  return ms
}

function neuron(flag: string, text: string | undefined): bigint {
  if (text === undefined) throw new Error(`${flag} is required with --chain-rpc (neuron, as registered for the service)`)
  if (!/^[0-9]+$/.test(text.trim())) throw new Error(`${flag} must be a whole number of neuron, got ${text}`)
  return BigInt(text.trim())
}

function number(flag: string, text: string): number {
  const value = text.trim() === '' ? NaN : Number(text)
  if (!Number.isFinite(value) || value < 0) throw new Error(`${flag} must be a number >= 0, got ${text}`)
  return value
}

function integer(flag: string, text: string): number {
  const value = number(flag, text)
  if (!Number.isInteger(value)) throw new Error(`${flag} must be an integer >= 0, got ${text}`)
  return value
}

function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    function onSignal(): void {
      process.off('SIGINT', onSignal)
      process.off('SIGTERM', onSignal)
      resolve()
    }
    process.on('SIGINT', onSignal)
    process.on('SIGTERM', onSignal)
  })
}
