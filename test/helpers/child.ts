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

/** Runs `svc-router <args> --config <configFile>` as an operator does, without blocking this process's event loop. */
export function runCli(args: string[], configFile: string): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args, '--config', configFile], { env: { PATH: process.env.PATH } })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()))
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
    child.on('close', (status) => resolve({ status, stdout, stderr }))
  })
}
