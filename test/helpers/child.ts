/** Waiting for the processes the test helpers start (servers, routers) to be gone. */
import { spawn, type ChildProcess } from 'node:child_process'

/** Resolves once `child` has exited (at once if it already had). */
export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

/** SIGKILLs `child`; resolves once it has exited (at once if it already had). */
export function killChild(child: ChildProcess): Promise<void> {
  const gone = exited(child)
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  return gone
}

/** What one run of the operator CLI printed and how it ended. */
export interface CliRun {
  status: number | null
  stdout: string
  stderr: string
}

const CLI = new URL('../../src/cli.js', import.meta.url).pathname

/** Runs `node <args>` to its end without blocking this process's event loop: what it printed and how it ended. */
export function runNode(args: readonly string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s))
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s))
    child.on('close', (status) => resolve({ status, stdout, stderr }))
  })
}

/**
 * Runs `svc-router <args> --config <configFile>` as an operator does, without blocking this process's event loop;
 * its environment is PATH and `env` alone (SVC_ variables of the test's own would be config paths to it).
 */
export function runCli(args: string[], configFile: string, env: Record<string, string> = {}): Promise<CliRun> {
  return runNode([CLI, ...args, '--config', configFile], { env: { PATH: process.env.PATH, ...env } })
}

/** A long-running child of a test: SIGKILLed with this process (setpriv's pdeathsig) and at teardown; its output kept. */
export interface Watched {
  readonly child: ChildProcess
  out(): string
  err(): string
}

/** Starts `node <args>` (the router's CLI, the demo) as a child `watched` by the test. */
export function watched(t: { teardown(fn: () => unknown): void }, args: readonly string[], env?: NodeJS.ProcessEnv): Watched {
  const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', process.execPath, ...args], { stdio: ['ignore', 'pipe', 'pipe'], ...(env !== undefined && { env }) })
  t.teardown(() => killChild(child))
  let out = ''
  let err = ''
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s))
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (err += s))
  return { child, out: () => out, err: () => err }
}
