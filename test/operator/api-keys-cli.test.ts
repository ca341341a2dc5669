/**
 * `svc-router api-keys` as an operator runs it: a separate process on the store of a running router.
 */
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { chat, isError, oneProviderStack } from '../auth/http.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname

function cli(args: string[], configFile: string) {
  const res = spawnSync(process.execPath, [CLI, 'api-keys', ...args, '--config', configFile], { encoding: 'utf8', env: { PATH: process.env.PATH } })
  return { status: res.status, stdout: res.stdout, stderr: res.stderr }
}

t.test('api-keys create/list/revoke against a running router', async (t) => {
  const stack = await oneProviderStack(t)
  const config = join(stack.dir, 'cli.yaml')
  writeFileSync(config, stringify({ store: { path: 'svc.db' }, log: { level: 'error' } }))

  const created = cli(['create', stack.account, '--name', 'batch job', '--trust-mode', 'standard', '--credit-limit', '2.5', '--reset-period', 'daily'], config)
  t.equal(created.status, 0, created.stderr)
  const secret = /^(sk-[A-Za-z0-9_-]{43})$/m.exec(created.stdout)?.[1]
  const keyId = /API key ([0-9a-f-]{36}) created/.exec(created.stdout)?.[1]
  t.ok(secret, 'the secret is printed once, on its own line')
  const auth = { authorization: `Bearer ${secret}` }
  t.equal((await chat(stack, auth)).status, 200, 'the running router accepts the new key at once')

  const listed = cli(['list', stack.account], config)
  t.equal(listed.status, 0)
  t.match(listed.stdout, keyId!)
  t.match(listed.stdout, /batch job\s+active/)
  t.match(listed.stdout, /standard\s+2\.5\s+daily/)
  t.notMatch(listed.stdout, secret!, 'a list never prints a secret')

  // Not spawnSync: the router runs in this process, and its loop must run while the command waits for it.
  const revoke = spawn(process.execPath, [CLI, 'api-keys', 'revoke', stack.account, keyId!, '--config', config], { stdio: 'ignore', env: { PATH: process.env.PATH } })
  const [code] = (await once(revoke, 'exit')) as [number | null]
  t.equal(code, 0)
  t.ok(isError(await chat(stack, auth), 401, 'invalid_api_key'), 'once the command has answered, the running router refuses the key (spec §3: at once)')
  t.equal(cli(['revoke', stack.account, '00000000-0000-4000-8000-000000000000'], config).status, 1, 'unknown key')
})

t.test('api-keys: bad arguments are usage errors with exit code 2', async (t) => {
  const config = join(t.testdir(), 'cli.yaml')
  writeFileSync(config, stringify({ store: { path: 'svc.db' }, log: { level: 'error' } }))
  const wallet = '0x' + 'ab'.repeat(20)
  for (const [args, message] of [
    [['create', wallet], /--name is required/],
    [['create', wallet, '--name', 'x', '--trust-mode', 'high'], /--trust-mode must be one of standard, verified, private/],
    [['create', wallet, '--name', 'x', '--reset-period', 'hourly'], /--reset-period must be one of never, daily, weekly, monthly/],
    [['create', wallet, '--name', 'x', '--credit-limit=-1'], /invalid amount/],
    [['create', '0x123', '--name', 'x'], /invalid wallet/],
    [['revoke', wallet], /missing <key_id>/],
  ] as const) {
    const res = cli([...args], config)
    t.equal(res.status, 2, args.join(' '))
    t.match(res.stderr, message)
  }
})
