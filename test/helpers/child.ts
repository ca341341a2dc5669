/** Waiting for the processes the test helpers start (servers, routers) to be gone. */
import type { ChildProcess } from 'node:child_process'

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
