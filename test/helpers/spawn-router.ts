/**
 * The router as its own process (`svc-router serve`), for tests that must measure it alone, e.g. its memory
 * while a client is slow. Killed with the test.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { killChild } from './child.js'
import { ownDir } from './own-dir.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname

export interface SpawnedRouter {
  readonly url: string
  /** The dev account's sk- key, printed once by the router on its empty store. */
  readonly key: string
  /** The dev account's mk- key (all scopes) and wallet, printed with it ('' when started again on a store). */
  readonly mgmtKey: string
  readonly wallet: string
  readonly child: ChildProcess
  /** The directory of its config, registry and store (pass it as `dir` to start it again on the same store). */
  readonly dir: string
  /** What the router wrote on stderr so far, with `captureStderr` (otherwise it goes to the test's stderr). */
  stderr(): string
  /** Resident set size of the router process, in MiB. */
  rssMiB(): number
}

interface TapLike {
  teardown(fn: () => unknown): void
}

export async function spawnRouter(
  t: TapLike,
  providers: object[],
  config: Record<string, Record<string, unknown>> = {},
  options: {
    captureStderr?: boolean
    dir?: string
    nodeArgs?: readonly string[]
    /** A command the router is run under (it gets Node's path and arguments last), e.g. `unshare -m …`. */
    wrap?: readonly string[]
  } = {},
): Promise<SpawnedRouter> {
  // `dir` given: the router of an earlier spawn starts again on its store (no dev key is printed then).
  const again = options.dir !== undefined
  let child: ChildProcess | null = null
  // The router is gone before its directory is removed (test/helpers/own-dir.ts).
  const kill = (): unknown => (child === null ? undefined : killChild(child))
  const dir = options.dir ?? ownDir(t, 'svc-router-', kill)
  if (options.dir !== undefined) t.teardown(kill)
  writeFileSync(join(dir, 'providers.yaml'), stringify({ providers }))
  writeFileSync(
    join(dir, 'config.yaml'),
    stringify({
      ...config,
      server: { host: '127.0.0.1', port: 0, ...config.server },
      registry: { path: 'providers.yaml', watch: false },
      store: { path: join(dir, 'svc.db') },
      log: { level: 'error', ...config.log },
      dev: { bootstrap: true },
    }),
  )
  const capture = options.captureStderr === true
  const args = [...(options.nodeArgs ?? []), CLI, 'serve', '--config', join(dir, 'config.yaml')]
  const [command, ...argv] = [...(options.wrap ?? []), process.execPath, ...args]
  child = spawn(command!, argv, { stdio: ['ignore', 'pipe', capture ? 'pipe' : 'inherit'] })
  let stderr = ''
  if (capture) child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()))
  // The banner with the dev keys follows the listening line on stdout.
  const [url, key, mgmtKey, wallet] = await new Promise<[string, string, string, string]>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString()
      const listening = /listening on (http:\/\/\S+)/.exec(out)
      const devKey = /(sk-[A-Za-z0-9_-]{43})/.exec(out)
      const devMgmt = /(mk-[A-Za-z0-9_-]{43})/.exec(out)
      if (listening && ((devKey && devMgmt) || again)) {
        resolve([listening[1]!, devKey?.[1] ?? '', devMgmt?.[1] ?? '', /dev account (0x[0-9a-f]{40})/.exec(out)?.[1] ?? ''])
      }
    })
    child.once('exit', (code) => reject(new Error(`router exited with ${code} before listening: ${out}`)))
  })
  return {
    url,
    key,
    mgmtKey,
    wallet,
    child,
    dir,
    stderr: () => stderr,
    rssMiB() {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8')
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)![1])
      return kb / 1024
    },
  }
}
