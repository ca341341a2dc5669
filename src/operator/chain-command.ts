/**
 * `svc-router chain …`: the payer's side of a chain registry from the operator's shell (DESIGN.md §8). The
 * operator funds and empties the payer's ledger; the router moves funds into sub-accounts itself. Status reads
 * the chain and the store's settlement books; clear-flag writes the books (a running router sees it at its next
 * round). Transactions go through the same sender as the router's (settlement/sender.ts).
 */
import { createPublicClient, http, type PublicClient } from 'viem'
import { loadConfig, type Config } from '../config/index.js'
import { LEDGER_MANAGER_ABI, SERVING_PAYMENT_ABI, format0g, parse0g } from '../settlement/abi.js'
import { loadPayer } from '../settlement/payer.js'
import { errorText, TxSender } from '../settlement/sender.js'
import { openStore } from '../store/open.js'
import { OperatorUsageError, parseCommand, table, type OperatorIo } from './commands.js'

export const CHAIN_USAGE = `usage: svc-router chain <command> [--config FILE]

commands:
  status                        payer address, ledger balance, each sub-account: balance, pending refund,
                                acknowledged, served, settled (0G), flag
  deposit <0g>                  add to the payer's ledger (opens it: at least 3 0G the first time)
  retrieve <provider|--all>     ask a sub-account back to the ledger (released after the contract's lock time)
  withdraw <0g>                 take 0G from the ledger back to the payer's wallet
  clear-flag <provider>         route and fund a flagged provider again (what it took beyond what it served is accepted)

--config FILE is the config the router runs with (registry.source: chain, a settlement key).
`

interface Chain {
  readonly client: PublicClient
  readonly sender: TxSender
  readonly payer: `0x${string}`
  readonly serving: `0x${string}`
  readonly ledger: `0x${string}`
  readonly serviceName: string
}

async function connect(config: Config, env: NodeJS.ProcessEnv): Promise<Chain> {
  if (config.registry.source !== 'chain') throw new OperatorUsageError('registry.source is not chain in this config')
  const payer = loadPayer(config.settlement, env)
  const rpc = config.registry.chain.rpc_url
  const client = createPublicClient({ transport: http(rpc, { timeout: 15_000, retryCount: 1 }) }) as PublicClient
  const serving = config.registry.chain.contract as `0x${string}`
  const ledger = config.settlement.ledger !== '' ? (config.settlement.ledger as `0x${string}`) : await client.readContract({ address: serving, abi: SERVING_PAYMENT_ABI, functionName: 'ledgerAddress' })
  let serviceName = config.settlement.service_name
  if (serviceName === '') serviceName = `inference-${(await client.readContract({ address: ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getRecommendedService', args: ['inference'] }))[0]}`
  return { client, sender: new TxSender(client, payer, rpc, undefined, 15_000), payer: payer.address, serving, ledger, serviceName }
}

function amount(text: string | undefined): bigint {
  const v = text === undefined ? null : parse0g(text)
  if (v === null || v === 0n) throw new OperatorUsageError(`an amount of 0G is required, e.g. 10 or 2.5 (got ${JSON.stringify(text)})`)
  return v
}

function address(text: string | undefined): `0x${string}` {
  if (text === undefined || !/^0x[0-9a-fA-F]{40}$/.test(text)) throw new OperatorUsageError(`a provider address (0x and 40 hex digits) is required (got ${JSON.stringify(text)})`)
  return text.toLowerCase() as `0x${string}`
}

/** `svc-router chain …`; resolves to the exit code. */
export async function chainCommand(argv: string[], io: OperatorIo): Promise<number> {
  const parsed = parseCommand(argv, { all: { type: 'boolean' } }, CHAIN_USAGE, io)
  if (typeof parsed === 'number') return parsed
  const { values, command, args } = parsed
  const config = loadConfig({ file: values.config, env: io.env })
  const store = await openStore(config.store, { besideServer: true })
  try {
    const books = new Map((await store.settlement.rows()).map((r) => [r.provider, r]))
    if (command === 'clear-flag') {
      const provider = address(args[0])
      if (!(await store.settlement.clearFlag(provider))) throw new OperatorUsageError(`${provider} is not flagged (nothing to clear)`)
      io.out(`cleared the flag of ${provider}: it is funded and routed again at the router's next round\n`)
      return 0
    }
    const chain = await connect(config, io.env)
    try {
      switch (command) {
        case 'status': {
          const ledger = await chain.client
            .readContract({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [chain.payer] })
            .catch(() => null)
          io.out(`payer ${chain.payer}\nledger ${chain.ledger} (${chain.serviceName}): ${ledger === null ? 'none (svc-router chain deposit)' : `available ${format0g(ledger.availableBalance)} 0G, total ${format0g(ledger.totalBalance)} 0G`}\n`)
          const providers =
            ledger === null ? [] : await chain.client.readContract({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedgerProviders', args: [chain.payer, chain.serviceName] })
          const rows: string[][] = []
          for (const p of providers) {
            const a = await chain.client.readContract({ address: chain.serving, abi: SERVING_PAYMENT_ABI, functionName: 'getAccount', args: [chain.payer, p] })
            const b = books.get(p.toLowerCase())
            rows.push([p.toLowerCase(), format0g(a.balance), format0g(a.pendingRefund), String(a.acknowledged), format0g(b?.served ?? 0n), format0g(b?.settled ?? 0n), b?.flagged === true ? 'FLAGGED' : '-'])
          }
          io.out(table(['provider', 'balance', 'pending_refund', 'acknowledged', 'served', 'settled', 'flag'], rows))
          return 0
        }
        case 'deposit': {
          const value = amount(args[0])
          const exists = await chain.client.readContract({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedger', args: [chain.payer] }).then(() => true, () => false)
          await chain.sender.send({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: exists ? 'depositFund' : 'addLedger', args: exists ? [] : [''], value })
          io.out(`deposited ${format0g(value)} 0G into the payer's ledger\n`)
          return 0
        }
        case 'withdraw': {
          const value = amount(args[0])
          await chain.sender.send({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'refund', args: [value] })
          io.out(`withdrew ${format0g(value)} 0G to ${chain.payer}\n`)
          return 0
        }
        case 'retrieve': {
          const providers = values.all === true
            ? await chain.client.readContract({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'getLedgerProviders', args: [chain.payer, chain.serviceName] })
            : [address(args[0])]
          for (let i = 0; i < providers.length; i += 20) {
            await chain.sender.send({ address: chain.ledger, abi: LEDGER_MANAGER_ABI, functionName: 'retrieveFund', args: [providers.slice(i, i + 20), chain.serviceName] })
          }
          io.out(`asked back ${providers.length} sub-account(s); refunds past the lock time are on the ledger now, the rest after it (retrieve again)\n`)
          return 0
        }
        default:
          throw new OperatorUsageError(`unknown chain command ${JSON.stringify(command)}`)
      }
    } catch (err) {
      if (err instanceof OperatorUsageError) throw err
      io.err(`svc-router: ${errorText(err)}\n`)
      return 1
    }
  } finally {
    await store.close()
  }
}
