#!/usr/bin/env node
/** The svc-router command line: `serve`, `simulate-provider`, and the operator commands on the store. */
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { FileProblemsError, loadConfig } from './config/index.js'
import { devKeysBanner } from './operator/bootstrap.js'
import { apiKeysCommand } from './operator/api-keys-command.js'
import { accountsCommand, mgmtKeysCommand, OperatorUsageError, type OperatorIo } from './operator/commands.js'
import { SchemaTooNewError, StoreUnavailableError } from './store/store.js'
import { installProcessNet } from './process-net.js'
import { log, setLogLevel } from './log.js'
import { serve } from './serve.js'
import { describeUwsBuild, NoUwsBuildError, uwsBuild } from './server/uws-build.js'
import { superviseWorkers, workersProblem } from './workers.js'

const USAGE = `usage: svc-router <command> [options]

commands:
  serve [--config FILE] [--workers N]
                             run the router (default config: built-in defaults; SVC_* env vars override)
  simulate-provider [...]    run a simulated OpenAI-compatible provider (see simulate-provider --help)
  accounts <command> [...]   deposits, credits, rate limits of accounts (see accounts --help)
  mgmt-keys <command> [...]  create, list, revoke mk- management keys (see mgmt-keys --help)
  api-keys <command> [...]   create, list, revoke sk- API keys of an account (see api-keys --help)
  chain <command> [...]      the payer of a chain registry: status, deposit, retrieve, withdraw, clear-flag

options:
  -h, --help                 show this help
  -v, --version              print the version, the Node.js and the uWebSockets.js build it runs on
`

const SERVE_USAGE = `usage: svc-router serve [--config FILE] [--workers N]

Runs the router. Every config key has a default; SVC_<SECTION>_<KEY> environment variables override the
file (e.g. SVC_SERVER_PORT=9090). See config/example.full.yaml for every key.

  --workers N   N router processes sharing server.port, each started again if it dies (N > 1 needs
                store.kind: postgres and a fixed port; see the README's "Several replicas")
`

async function serveCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { config: { type: 'string', short: 'c' }, workers: { type: 'string', short: 'w' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
  })
  if (values.help) {
    process.stdout.write(SERVE_USAGE)
    return
  }
  const config = loadConfig({ file: values.config, env: process.env })
  if (values.workers !== undefined) {
    const n = /^[0-9]{1,3}$/.test(values.workers) ? Number(values.workers) : NaN
    const problem = workersProblem(n, config)
    if (problem !== null) throw new OperatorUsageError(problem)
    if (n > 1) {
      process.exitCode = await superviseWorkers(n, values.config === undefined ? [] : ['--config', values.config])
      return
    }
  }
  installProcessNet()
  const router = await serve(config)
  process.stdout.write(`svc-router listening on ${router.url}\n`)
  // A worker of `serve --workers`: tell the supervisor, and leave with it.
  process.send?.({ ready: router.url })
  if (router.devKeys !== null) process.stdout.write(devKeysBanner(router.devKeys, router.url))
  else if (config.dev.bootstrap) {
    process.stdout.write(
      'dev bootstrap skipped: the store already has accounts and keys are shown only once ' +
        '(new ones: svc-router mgmt-keys create <wallet> --scopes all --name <name> --config <file>)\n',
    )
  }
  // SIGTERM/SIGINT: drain (finish what is in flight up to server.drain_timeout_ms, end the rest with an
  // error), flush the charges, close the store, exit 0. A second signal exits at once.
  let closing = false
  const shutdown = (signal: NodeJS.Signals): void => {
    if (closing) {
      log.warn('second signal: exiting without waiting', { signal })
      process.exit(1)
    }
    closing = true
    log.info('draining', { signal, in_flight: router.inFlight.count, deadline_ms: config.server.drain_timeout_ms })
    router
      .drain(config.server.drain_timeout_ms)
      .then((cut) => {
        if (cut > 0) log.warn('requests ended by the drain deadline', { count: cut })
        return router.close()
      })
      .then(
        () => {
          log.info('drained and closed')
          process.exit(0)
        },
        (err: unknown) => {
          log.error('shutdown failed', { err: String((err as Error)?.stack ?? err) })
          process.exit(1)
        },
      )
  }
  process.on('SIGINT', shutdown)
  process.on('SIGTERM', shutdown)
  if (process.send !== undefined) process.once('disconnect', () => shutdown('SIGTERM'))
}

/**
 * `svc-router --version`: its own version, Node's, and the uWS build that loads here (or why none does: the
 * NoUwsBuildError's list, which is what an operator checking a new machine needs to see).
 */
function versionText(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  let uws: string
  try {
    // The build is printed below; the 'uWS loaded' log line would only repeat it on stderr.
    setLogLevel('warn')
    uws = describeUwsBuild(uwsBuild())
  } catch (err) {
    uws = (err as Error).message
    process.exitCode = 1
  }
  return `svc-router ${pkg.version}\nnode ${process.version} (ABI ${process.versions.modules}, ${process.platform}-${process.arch})\n${uws}\n`
}

const operatorIo: OperatorIo = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  env: process.env,
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv
  switch (command) {
    case 'serve':
      return serveCommand(rest)
    case 'simulate-provider':
      return (await import('./simulator/cli.js')).simulateProviderCommand(rest)
    case 'accounts':
      process.exitCode = await accountsCommand(rest, operatorIo)
      return
    case 'mgmt-keys':
      process.exitCode = await mgmtKeysCommand(rest, operatorIo)
      return
    case 'api-keys':
      process.exitCode = await apiKeysCommand(rest, operatorIo)
      return
    case 'chain':
      // Loaded only when asked for: viem is not needed by the other commands.
      process.exitCode = await (await import('./operator/chain-command.js')).chainCommand(rest, operatorIo)
      return
    case '-v':
    case '--version':
    case 'version':
      process.stdout.write(versionText())
      return
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      process.stdout.write(USAGE)
      return
    default:
      process.stderr.write(`svc-router: unknown command ${JSON.stringify(command)}\n\n${USAGE}`)
      process.exitCode = 2
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof FileProblemsError || err instanceof SchemaTooNewError || err instanceof StoreUnavailableError || err instanceof NoUwsBuildError) {
    process.stderr.write(`svc-router: ${err.message}\n`)
  } else if (err instanceof OperatorUsageError) {
    process.stderr.write(`svc-router: ${err.message} (see --help)\n`)
  } else if ((err as { code?: string })?.code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write(`svc-router: ${(err as Error).message}\n`)
  } else {
    process.stderr.write(`svc-router: ${(err as Error)?.stack ?? String(err)}\n`)
  }
  process.exit(2)
})
