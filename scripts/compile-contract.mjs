#!/usr/bin/env node
// Compiles contracts/InferenceServing.sol and contracts/LedgerManager.sol with the npm solc package into
// contracts/<Name>.json (ABI + creation bytecode), the artifacts the tests and `npm run demo:chain` deploy. Run
// after editing a source: `npm run compile:contract`. `--check` exits 1 when a committed artifact differs from a
// fresh build.
import { readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const solc = require('solc')
const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const NAMES = ['InferenceServing', 'LedgerManager']

let stale = false
for (const name of NAMES) {
  const source = join(root, 'contracts', `${name}.sol`)
  const target = join(root, 'contracts', `${name}.json`)
  const input = {
    language: 'Solidity',
    sources: { [`${name}.sol`]: { content: readFileSync(source, 'utf8') } },
    settings: {
      optimizer: { enabled: true, runs: 200 },
      viaIR: true,
      evmVersion: 'paris',
      outputSelection: { '*': { [name]: ['abi', 'evm.bytecode.object'] } },
    },
  }
  const output = JSON.parse(solc.compile(JSON.stringify(input)))
  const errors = (output.errors ?? []).filter((e) => e.severity === 'error')
  if (errors.length > 0) {
    for (const e of errors) console.error(e.formattedMessage)
    process.exit(1)
  }
  const contract = output.contracts[`${name}.sol`][name]
  const artifact = JSON.stringify({ compiler: `solc ${solc.version()}`, abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` }, null, 2) + '\n'
  if (process.argv.includes('--check')) {
    if (readFileSync(target, 'utf8') !== artifact) {
      console.error(`contracts/${name}.json is out of date: run npm run compile:contract`)
      stale = true
    } else console.log(`contracts/${name}.json matches its source`)
  } else {
    writeFileSync(target, artifact)
    console.log(`wrote ${target} (${(contract.evm.bytecode.object.length / 2) | 0} bytes)`)
  }
}
if (stale) process.exit(1)
