/**
 * The router as its own process (`svc-router serve`), for tests that must measure it alone, e.g. its memory
 * while a client is slow. Killed with the test.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname

export interface SpawnedRouter {
  readonly url: string
  readonly child: ChildProcess
  /** Resident set size of the router process, in MiB. */
  rssMiB(): number
}

interface TapLike {
  testdir(): string
  teardown(fn: () => unknown): void
}

export async function spawnRouter(
  t: TapLike,
  providers: object[],
  config: Record<string, Record<string, unknown>> = {},
): Promise<SpawnedRouter> {
  const dir = t.testdir()
  writeFileSync(join(dir, 'providers.yaml'), stringify({ providers }))
  writeFileSync(
    join(dir, 'config.yaml'),
    stringify({
      ...config,
      server: { host: '127.0.0.1', port: 0 },
      registry: { path: 'providers.yaml', watch: false },
      store: { path: join(dir, 'svc.db') },
      log: { level: 'error' },
    }),
  )
  const child = spawn(process.execPath, [CLI, 'serve', '--config', join(dir, 'config.yaml')], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  const url = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString()
      const m = /listening on (http:\/\/\S+)/.exec(out)
      if (m) resolve(m[1]!)
    })
    child.once('exit', (code) => reject(new Error(`router exited with ${code} before listening: ${out}`)))
  })
  return {
    url,
    child,
    rssMiB() {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8')
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)![1])
      return kb / 1024
    },
  }
}
