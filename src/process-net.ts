/**
 * The last net under the router process (`svc-router serve`): an exception or a rejection that escaped every
 * request's own guard (admission, the failover loop, the uWS route callback all answer their request with a 500
 * themselves) is logged and the process carries on serving everyone else. Installed by the CLI only: a library
 * user (and the test runner) keeps its own policy.
 */
import { log } from './log.js'

let installed = false

export function installProcessNet(): void {
  if (installed) return
  installed = true
  process.on('uncaughtException', (err) => {
    log.error('uncaught exception outside any request guard; the process carries on', { err: String(err?.stack ?? err) })
  })
  process.on('unhandledRejection', (reason) => {
    log.error('unhandled rejection outside any request guard; the process carries on', { err: String((reason as Error)?.stack ?? reason) })
  })
}
