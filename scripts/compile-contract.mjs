#!/usr/bin/env node
// Compiles contracts/InferenceServing.sol with the npm solc package into contracts/InferenceServing.json
// (ABI + creation bytecode), the artifact the tests and `npm run demo:chain` deploy. Run after editing the
// source: `npm run compile:contract`. `--check` exits 1 when the committed artifact differs from a fresh build.
import { readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const solc = require('solc')
const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const source = join(root, 'contracts', 'InferenceServing.sol')
const target = join(root, 'contracts', 'InferenceServing.json')

const input = {
  language: 'Solidity',
  sources: { 'InferenceServing.sol': { content: readFileSync(source, 'utf8') } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    viaIR: true,
    evmVersion: 'paris',
    outputSelection: { '*': { InferenceServing: ['abi', 'evm.bytecode.object'] } },
  },
}
const output = JSON.parse(solc.compile(JSON.stringify(input)))
const errors = (output.errors ?? []).filter((e) => e.severity === 'error')
if (errors.length > 0) {
  for (const e of errors) console.error(e.formattedMessage)
  process.exit(1)
}
const contract = output.contracts['InferenceServing.sol'].InferenceServing
const artifact = JSON.stringify({ compiler: `solc ${solc.version()}`, abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` }, null, 2) + '\n'
if (process.argv.includes('--check')) {
  const committed = readFileSync(target, 'utf8')
  if (committed !== artifact) {
    console.error('contracts/InferenceServing.json is out of date: run npm run compile:contract')
    process.exit(1)
  }
  console.log('contracts/InferenceServing.json matches its source')
} else {
  writeFileSync(target, artifact)
  console.log(`wrote ${target}`)
}
