/**
 * `svc-router mgmt-keys update` (CLI parity with the console's PATCH /v1/management-keys/:id): a rename and a
 * scope change written to the store by another process, seen by the running router.
 */
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { call, isError, oneProviderStack } from '../auth/http.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname

function cli(args: string[], configFile: string) {
  return spawnSync(process.execPath, [CLI, ...args, '--config', configFile], { encoding: 'utf8', env: { PATH: process.env.PATH } })
}

t.test('mgmt-keys update: rename and re-scope a key; the running router follows', async (t) => {
  const stack = await oneProviderStack(t)
  const config = join(stack.dir, 'cli.yaml')
  writeFileSync(config, stringify({ store: { path: 'svc.db' }, log: { level: 'error' } }))
  const key = await stack.newMgmtKey(['keys:read'])
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: key.auth })).status, 200)

  const updated = cli(['mgmt-keys', 'update', key.id, '--name', 'ops desk', '--scopes', 'account:read'], config)
  t.equal(updated.status, 0, updated.stderr)
  t.match(updated.stdout, `management key ${key.id} updated`)
  t.match(updated.stdout, 'scopes: account:read')
  const record = (await stack.router.store.keys.listMgmtKeys()).find((k) => k.id === key.id)!
  t.equal(record.name, 'ops desk')

  const deadline = Date.now() + 3000
  let answer = await call(stack, 'GET', '/v1/api-keys', { headers: key.auth })
  while (answer.status === 200 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50))
    answer = await call(stack, 'GET', '/v1/api-keys', { headers: key.auth })
  }
  t.ok(isError(answer, 403, 'insufficient_scope'), 'the old scope is gone')
  t.equal((await call(stack, 'GET', '/v1/account/balance', { headers: key.auth })).status, 200, 'the new scope works')

  t.equal(cli(['mgmt-keys', 'update', key.id], config).status, 2, 'nothing to update is a usage error')
  t.equal(cli(['mgmt-keys', 'update', '00000000-0000-4000-8000-000000000000', '--name', 'x'], config).status, 1)
})
