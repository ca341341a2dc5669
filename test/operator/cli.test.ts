/**
 * The operator CLI as an operator runs it (a separate process on the store file), including against a
 * running router, and the `npm start` dev bootstrap (keys printed once, on an empty store only).
 */
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { formatUsd, parseUsd } from '../../src/billing/money.js'
import { accountsCommand, mgmtKeysCommand, OperatorUsageError, type OperatorIo } from '../../src/operator/commands.js'
import { startSimulator } from '../../src/simulator/simulator.js'
import { call, chat, isError, MODEL, oneProviderStack, P } from '../auth/http.js'

const CLI = new URL('../../src/cli.js', import.meta.url).pathname
const WALLET = '0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed'

interface Run {
  status: number | null
  stdout: string
  stderr: string
}

function cli(args: string[], configFile: string): Run {
  const res = spawnSync(process.execPath, [CLI, ...args, '--config', configFile], { encoding: 'utf8', env: { PATH: process.env.PATH } })
  return { status: res.status, stdout: res.stdout, stderr: res.stderr }
}

function configIn(dir: string, extra: object = {}): string {
  const file = join(dir, 'cli.yaml')
  writeFileSync(file, stringify({ store: { path: 'svc.db' }, log: { level: 'error' }, ...extra }))
  return file
}

t.test('accounts deposit, credit, show: exact amounts, checksummed wallets stored lower-case', async (t) => {
  const config = configIn(t.testdir())
  const deposit = cli(['accounts', 'deposit', WALLET, '12.000000000000000001', '--memo', 'wire #1'], config)
  t.equal(deposit.status, 0, deposit.stderr)
  t.match(deposit.stdout, `deposit of 12.000000000000000001 USD recorded for ${WALLET.toLowerCase()}`)
  t.equal(cli(['accounts', 'credit', WALLET.toLowerCase(), '0.5'], config).status, 0)
  const show = cli(['accounts', 'show', WALLET], config)
  t.equal(show.status, 0)
  t.match(show.stdout, /deposited\s+12\.000000000000000001 USD/)
  t.match(show.stdout, /credited\s+0\.5 USD/)
  t.match(show.stdout, /available\s+12\.500000000000000001 USD/)
  t.match(show.stdout, /rate_limit\s+default/)
})

/** The commands in-process, for the input checks (no process start per case). */
const quietIo: OperatorIo = { out: () => {}, err: () => {}, env: {} }

t.test('accounts: bad input is refused with exit code 2 and a message', async (t) => {
  const config = configIn(t.testdir())
  const badChecksum = WALLET.replace('aA', 'Aa')
  for (const [args, message] of [
    [['deposit', badChecksum, '1'], /checksum/],
    [['deposit', '0x1234', '1'], /40 hex/],
    [['deposit', WALLET, '1.2.3'], /invalid amount/],
    [['deposit', WALLET, '--', '-1'], /invalid amount/],
    [['deposit', WALLET, '0'], /invalid amount/],
    [['deposit', WALLET], /missing <usd>/],
    [['rate-limit', WALLET, 'fast'], /positive integer or "default"/],
    [['explode'], /unknown accounts command/],
  ] as [string[], RegExp][]) {
    await t.rejects(accountsCommand([...args, '--config', config], quietIo), new OperatorUsageError(''), args.join(' '))
    await t.rejects(accountsCommand([...args, '--config', config], quietIo), { message }, args.join(' '))
  }
  // As the operator sees it: the message on stderr and exit code 2.
  const run = cli(['accounts', 'deposit', badChecksum, '1'], config)
  t.equal(run.status, 2)
  t.match(run.stderr, /svc-router: invalid wallet .*checksum/)
  t.equal(cli(['accounts', 'show', WALLET], config).status, 1, 'nothing was written: no such account')
})

t.test('accounts rate-limit: set and back to default; unknown account is exit 1', async (t) => {
  const config = configIn(t.testdir())
  let out = ''
  const io: OperatorIo = { out: (s) => (out += s), err: () => {}, env: {} }
  const run = (...args: string[]) => accountsCommand([...args, '--config', config], io)
  t.equal(await run('rate-limit', WALLET, '5'), 1)
  t.equal(await run('deposit', WALLET, '1'), 0)
  t.equal(await run('rate-limit', WALLET, '5'), 0)
  out = ''
  await run('show', WALLET)
  t.match(out, /rate_limit\s+5\/min/)
  t.equal(await run('rate-limit', WALLET, 'default'), 0)
  out = ''
  await run('show', WALLET)
  t.match(out, /rate_limit\s+default/)
})

t.test('mgmt-keys create/list/revoke against a running router', async (t) => {
  const stack = await oneProviderStack(t)
  const config = configIn(stack.dir)
  const created = cli(['mgmt-keys', 'create', stack.account, '--scopes', 'keys:read,account:read', '--name', 'ops laptop'], config)
  t.equal(created.status, 0, created.stderr)
  const secret = /^(mk-[A-Za-z0-9_-]{43})$/m.exec(created.stdout)?.[1]
  t.ok(secret, 'the secret is printed on a line of its own')
  const keyId = /management key ([0-9a-f-]{36}) created/.exec(created.stdout)?.[1]
  const auth = { authorization: `Bearer ${secret}` }
  t.equal((await call(stack, 'GET', '/v1/api-keys', { headers: auth })).status, 200, 'the router accepts it at once')
  t.ok(isError(await call(stack, 'POST', '/v1/api-keys', { headers: auth, body: { name: 'x' } }), 403, 'insufficient_scope'), 'only its scopes')

  const listed = cli(['mgmt-keys', 'list', stack.account], config)
  t.equal(listed.status, 0)
  t.match(listed.stdout, keyId!)
  t.match(listed.stdout, 'keys:read,account:read')
  t.match(listed.stdout, /127\.0\.0\.1/, 'last_source_ip recorded by the router')
  t.notMatch(listed.stdout, secret!, 'the list never prints a secret')
  t.notMatch(listed.stdout, secret!.slice(7, -4))

  const revoked = cli(['mgmt-keys', 'revoke', keyId!], config)
  t.equal(revoked.status, 0)
  const deadline = Date.now() + 3000
  let answer = await call(stack, 'GET', '/v1/api-keys', { headers: auth })
  while (answer.status === 200 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50))
    answer = await call(stack, 'GET', '/v1/api-keys', { headers: auth })
  }
  t.ok(isError(answer, 401, 'invalid_api_key'), 'the running router noticed the revoke')
  t.equal(cli(['mgmt-keys', 'revoke', '00000000-0000-4000-8000-000000000000'], config).status, 1)
})

/** Calls `attempt` every 50 ms until `done` holds of its answer or 3 s passed (a poll of the router is 1 s). */
async function eventually<T>(attempt: () => Promise<T>, done: (answer: T) => boolean): Promise<T> {
  const deadline = Date.now() + 3000
  let answer = await attempt()
  while (!done(answer) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50))
    answer = await attempt()
  }
  return answer
}

t.test('accounts deposit against a running router: its budget check sees the new balance within a poll', async (t) => {
  const stack = await oneProviderStack(t)
  const config = configIn(stack.dir)
  const wallet = await stack.newAccount('0.000000000000000001')
  const key = await stack.newApiKey({ account: wallet })
  t.ok(isError(await chat(stack, key.auth), 402, 'insufficient_balance'), 'the router holds the book of a nearly empty account')
  const deposit = cli(['accounts', 'deposit', wallet, '10'], config)
  t.equal(deposit.status, 0, deposit.stderr)
  const answer = await eventually(() => chat(stack, key.auth), (a) => a.status !== 402)
  t.equal(answer.status, 200, 'the deposit reached the running router')
})

t.test('accounts rate-limit against a running router: the cached keys of that account take it within a poll', async (t) => {
  const stack = await oneProviderStack(t)
  const config = configIn(stack.dir)
  const wallet = await stack.newAccount()
  const key = await stack.newApiKey({ account: wallet })
  t.equal((await chat(stack, key.auth)).status, 200, 'warm in the cache at the default limit')
  t.equal(cli(['accounts', 'rate-limit', wallet, '1'], config).status, 0)
  const answer = await eventually(() => chat(stack, key.auth), (a) => a.status === 429)
  t.ok(isError(answer, 429, 'rate_limit_exceeded'), 'one request a minute, and one was made already')
  t.equal((await chat(stack, stack.auth)).status, 200, 'another account keeps its limit')
})

t.test('mgmt-keys create: scopes and name are required and checked', async (t) => {
  const config = configIn(t.testdir())
  for (const [args, message] of [
    [['create', WALLET, '--name', 'x'], /--scopes is required/],
    [['create', WALLET, '--scopes', 'keys:write', '--name', 'x'], /unknown scope "keys:write"/],
    [['create', WALLET, '--scopes', 'all'], /--name is required/],
    [['create', WALLET, '--scopes', 'all', '--name', '  '], /--name is required/],
    [['revoke'], /missing <key_id>/],
  ] as [string[], RegExp][]) {
    await t.rejects(mgmtKeysCommand([...args, '--config', config], quietIo), { name: 'OperatorUsageError', message }, args.join(' '))
  }
  let out = ''
  t.equal(await mgmtKeysCommand(['create', WALLET, '--scopes', 'all', '--name', 'root', '--config', config], { ...quietIo, out: (s) => (out += s) }), 0)
  t.match(out, 'account:read, keys:read, keys:create, keys:manage')
})

t.test('serve with dev.bootstrap on an empty store prints a dev sk- and mk- key once, and they work', async (t) => {
  const sim = await startSimulator({ name: 'dev' })
  // A teardown before t.testdir(): tap runs them all, the routers' kills below included, before it removes the dir.
  t.teardown(() => sim.close())
  const dir = t.testdir()
  writeFileSync(join(dir, 'providers.yaml'), stringify({ providers: [{ address: P, url: sim.url, trust_mode: 'standard', models: [{ id: MODEL, type: 'chatbot', price: { prompt: 0.1, completion: 0.1 } }] }] }))
  const config = configIn(dir, {
    server: { host: '127.0.0.1', port: 0 },
    registry: { path: 'providers.yaml', watch: false },
    dev: { bootstrap: true, deposit_usd: 10 },
  })

  async function start(): Promise<{ url: string; out: () => string; stop: () => Promise<void> }> {
    const child = spawn(process.execPath, [CLI, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout!.on('data', (b: Buffer) => (out += b.toString()))
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 10_000)
      child.stdout!.on('data', () => {
        const m = /listening on (http:\/\/\S+)\n/.exec(out)
        if (m) {
          clearTimeout(timer)
          resolve(m[1]!)
        }
      })
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)))
    })
    // The banner is written right after the listening line, in the same tick.
    await new Promise((r) => setTimeout(r, 100))
    const stop = () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve())
        child.kill('SIGTERM')
      })
    t.teardown(() => {
      if (child.exitCode === null) child.kill('SIGKILL')
    })
    return { url, out: () => out, stop }
  }

  const first = await start()
  const sk = /(sk-[A-Za-z0-9_-]{43})/.exec(first.out())?.[1]
  const mk = /(mk-[A-Za-z0-9_-]{43})/.exec(first.out())?.[1]
  t.ok(sk && mk, 'both keys printed')
  t.match(first.out(), /deposit of 10 USD/)
  const served = await chat({ url: first.url }, { authorization: `Bearer ${sk}` })
  t.equal(served.status, 200, 'the sk- key serves inference')
  t.ok(isError(await chat({ url: first.url }, {}), 401, 'missing_authorization'))
  const balance = await call({ url: first.url }, 'GET', '/v1/account/balance', { headers: { authorization: `Bearer ${mk}` } })
  const billed = parseUsd(served.json.x_svc_trace.billing.total_cost)!
  t.equal(balance.json.total_balance, formatUsd(parseUsd('10')! - billed), 'the mk- key reads the funded account, less the call it paid for')
  await first.stop()

  const second = await start()
  t.notMatch(second.out(), /[sm]k-[A-Za-z0-9_-]{43}/, 'a store that has an account is left alone: no new keys printed')
  t.match(second.out(), /dev bootstrap skipped/)
  t.equal((await chat({ url: second.url }, { authorization: `Bearer ${sk}` })).status, 200, 'the dev key survives a restart')
  await second.stop()
})
