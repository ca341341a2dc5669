/**
 * The API key the e2e run sends to svc-router, in one place: change only this function when the way keys
 * come into being changes. Today the run's router starts on a fresh store with `dev.bootstrap: true`, so it
 * mints a dev account and prints its sk- key once after the listening line; that key is read from its output.
 * SVC_BENCH_KEY, when set, wins (a router you point the run at yourself); 'sk-bench' is the last resort,
 * which only a router without authentication accepts.
 */
export interface RouterForKey {
  readonly url: string
  readonly configFile: string
  /** What the router printed so far (the dev key banner appears here). */
  output(): string
}

const DEV_KEY_LINE = /sk- key \(inference\):\s+(sk-[A-Za-z0-9_-]+)/
const WAIT_MS = 5000

export async function createBenchKey(router: RouterForKey): Promise<string> {
  const fromEnv = process.env.SVC_BENCH_KEY
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv
  const deadline = Date.now() + WAIT_MS
  for (;;) {
    const printed = DEV_KEY_LINE.exec(router.output())
    if (printed !== null) return printed[1]!
    if (Date.now() > deadline) return 'sk-bench'
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}
