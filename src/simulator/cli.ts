/**
 * `svc-router simulate-provider`: runs the simulated provider in the foreground until SIGINT/SIGTERM.
 */
import { parseArgs } from 'node:util'
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
  resolveSettings(options)
  return options
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
