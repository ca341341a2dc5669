/**
 * `svc-router chain …` run as an operator runs it (its own process, the router's config) against anvil (issue
 * 44): status before and after, a deposit the router funds a provider from, a withdrawal, and sub-accounts asked
 * back once the router is stopped (a running router tops a provider it routes up again). Status and deposit in
 * a process of their own; the rest through the same command in this process.
 */
import t from 'tap'
import { join } from 'node:path'
import { createPublicClient, http } from 'viem'
import { chainAccount } from '../../src/demo/local-chain.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI } from '../../src/settlement/abi.js'
import { payerKeyFile, PAYER_INDEX, startChainStack, type ChainProvider } from '../helpers/chain-stack.js'
import { runCli } from '../helpers/child.js'
import { chainCommand } from '../../src/operator/chain-command.js'
import { eventually } from '../helpers/wait.js'
import { request } from 'undici'

const G = 10n ** 18n
const CHAT: ChainProvider = { account: 1, model: 'qwen', inputPrice: G / 1000n, outputPrice: G / 1000n, tee: true, broker: { settleIntervalMs: 600_000 } }

t.test('chain status, deposit, withdraw and retrieve from the command line', async (t) => {
  const chain = await startChainStack(t, [CHAT], { extra: { settlement: { key_file: payerKeyFile(t), interval_ms: 100, sub_account: { min_0g: '1', target_0g: '2' } } } })
  const { stack, providers: [p] } = chain
  const config = join(stack.dir, 'config.yaml')
  const payer = chainAccount(PAYER_INDEX).address
  const client = createPublicClient({ transport: http(chain.chain.rpcUrl) })
  const ledger = () => client.readContract({ address: chain.contract.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [payer] })
  const account = () => client.readContract({ address: chain.contract.address, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [payer, p!.account.address] })
  const routable = async () => {
    const res = await request(`${stack.url}/v1/providers?model=qwen`)
    const body = (await res.body.json()) as { data?: { address: string; routable?: boolean }[] }
    return (body.data ?? []).some((r) => r.address === p!.address && r.routable !== false)
  }

  let run = await runCli(['chain', 'status'], config)
  t.equal(run.status, 0, run.stderr)
  t.match(run.stdout, new RegExp(`payer ${payer}`))
  t.match(run.stdout, /none \(svc-router chain deposit\)/, 'no ledger yet')

  // The refusals in this process (a spawn costs seconds): what chainCommand writes, and its exit code.
  const inProcess = async (...args: string[]) => {
    let out = ''
    let err = ''
    const io = { out: (s: string) => void (out += s), err: (s: string) => void (err += s), env: {} }
    const status = await chainCommand([...args, '--config', config], io).catch((e: unknown) => (err += String(e), -1))
    return { status, out, err }
  }
  let refused = await inProcess('deposit', '2.5')
  t.equal(refused.status, 1, 'a first deposit below the contract\'s minimum is refused')
  t.match(refused.err, /svc-router: /)
  t.notMatch(refused.err + refused.out, /[0-9a-f]{64}/i, 'and no key is printed')

  run = await runCli(['chain', 'deposit', '10'], config)
  t.equal(run.status, 0, run.stderr)
  t.match(run.stdout, /deposited 10 0G/)
  t.ok(await eventually(routable, 30_000), 'the router funds the provider from it')
  t.equal((await account()).balance, 2n * G)

  const withdrew = await inProcess('withdraw', '3')
  t.equal(withdrew.status, 0, withdrew.err)
  const l = await ledger()
  t.equal(l.totalBalance, 7n * G, 'the ledger holds 3 0G less')
  t.equal(l.availableBalance, 5n * G, 'of which 2 are in the sub-account')

  run = await runCli(['chain', 'status'], config)
  t.equal(run.status, 0, run.stderr)
  t.match(run.stdout, /available 5 0G, total 7 0G/)
  t.match(run.stdout, new RegExp(`${p!.address}\\s+2\\s+0\\s+true\\s+0\\s+0\\s+-`), 'the sub-account: balance 2, no refund pending, acknowledged, nothing served or settled, no flag')

  await stack.router.close()
  const retrieved = await inProcess('retrieve', '--all')
  t.equal(retrieved.status, 0, retrieved.err)
  t.match(retrieved.out, /asked back 1 sub-account/)
  const a = await account()
  t.equal(a.pendingRefund, a.balance, 'the whole sub-account is pending refund')

  for (const [args, message] of [
    [['withdraw', 'lots'], /an amount of 0G is required/],
    [['retrieve', '0x12'], /a provider address/],
    [['clear-flag', p!.address], /is not flagged/],
  ] as const) {
    refused = await inProcess(...args)
    t.not(refused.status, 0, args.join(' '))
    t.match(refused.err, message)
  }
})
