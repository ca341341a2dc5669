/**
 * The parts of the 0G contracts' ABI the payer uses, typed `as const` with the contracts' own names (the same
 * layout as the ABI in @0gfoundation/0g-compute-ts-sdk 0.9.x): the payer's ledger on LedgerManager, its
 * sub-accounts and session-token revocation on InferenceServing, and the settlement event a provider's
 * settlement emits. contracts/*.sol implement the same ABI for tests and the demo.
 */

const LEDGER_COMPONENTS = [
  { name: 'user', type: 'address' },
  { name: 'availableBalance', type: 'uint256' },
  { name: 'totalBalance', type: 'uint256' },
  { name: 'additionalInfo', type: 'string' },
] as const

export const LEDGER_MANAGER_ABI = [
  { type: 'function', name: 'getLedger', stateMutability: 'view', inputs: [{ name: 'user', type: 'address' }], outputs: [{ name: '', type: 'tuple', components: LEDGER_COMPONENTS }] },
  { type: 'function', name: 'addLedger', stateMutability: 'payable', inputs: [{ name: 'additionalInfo', type: 'string' }], outputs: [{ name: '', type: 'uint256' }, { name: '', type: 'uint256' }] },
  { type: 'function', name: 'depositFund', stateMutability: 'payable', inputs: [], outputs: [] },
  {
    type: 'function',
    name: 'getLedgerProviders',
    stateMutability: 'view',
    inputs: [
      { name: 'user', type: 'address' },
      { name: 'serviceName', type: 'string' },
    ],
    outputs: [{ name: '', type: 'address[]' }],
  },
  { type: 'function', name: 'refund', stateMutability: 'nonpayable', inputs: [{ name: 'amount', type: 'uint256' }], outputs: [] },
  {
    type: 'function',
    name: 'transferFund',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'provider', type: 'address' },
      { name: 'serviceName', type: 'string' },
      { name: 'amount', type: 'uint256' },
    ],
    outputs: [],
  },
  {
    type: 'function',
    name: 'retrieveFund',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'providers', type: 'address[]' },
      { name: 'serviceName', type: 'string' },
    ],
    outputs: [],
  },
  {
    type: 'function',
    name: 'getRecommendedService',
    stateMutability: 'view',
    inputs: [{ name: 'serviceType', type: 'string' }],
    outputs: [
      { name: 'version', type: 'string' },
      { name: 'serviceAddress', type: 'address' },
    ],
  },
  { type: 'function', name: 'MIN_TRANSFER_AMOUNT', stateMutability: 'view', inputs: [], outputs: [{ name: '', type: 'uint256' }] },
  { type: 'error', name: 'LedgerNotExists', inputs: [{ name: 'user', type: 'address' }] },
  { type: 'error', name: 'InsufficientAvailableBalance', inputs: [{ name: 'available', type: 'uint256' }, { name: 'required', type: 'uint256' }] },
  { type: 'error', name: 'MinimumDepositRequired', inputs: [{ name: 'provided', type: 'uint256' }, { name: 'required', type: 'uint256' }] },
  { type: 'error', name: 'InsufficientBalance', inputs: [{ name: 'user', type: 'address' }] },
  { type: 'error', name: 'ServiceNotFound', inputs: [{ name: 'serviceAddress', type: 'address' }] },
  { type: 'error', name: 'LedgerLocked', inputs: [] },
] as const

const ACCOUNT_COMPONENTS = [
  { name: 'user', type: 'address' },
  { name: 'provider', type: 'address' },
  { name: 'nonce', type: 'uint256' },
  { name: 'balance', type: 'uint256' },
  { name: 'pendingRefund', type: 'uint256' },
  {
    name: 'refunds',
    type: 'tuple[]',
    components: [
      { name: 'index', type: 'uint256' },
      { name: 'amount', type: 'uint256' },
      { name: 'createdAt', type: 'uint256' },
      { name: 'processed', type: 'bool' },
    ],
  },
  { name: 'additionalInfo', type: 'string' },
  { name: 'acknowledged', type: 'bool' },
  { name: 'validRefundsLength', type: 'uint256' },
  { name: 'generation', type: 'uint256' },
  { name: 'revokedBitmap', type: 'uint256' },
] as const

export const SERVING_PAYMENT_ABI = [
  { type: 'function', name: 'ledgerAddress', stateMutability: 'view', inputs: [], outputs: [{ name: '', type: 'address' }] },
  {
    type: 'function',
    name: 'getAccount',
    stateMutability: 'view',
    inputs: [
      { name: 'user', type: 'address' },
      { name: 'provider', type: 'address' },
    ],
    outputs: [{ name: '', type: 'tuple', components: ACCOUNT_COMPONENTS }],
  },
  {
    type: 'function',
    name: 'isTokenRevoked',
    stateMutability: 'view',
    inputs: [
      { name: 'user', type: 'address' },
      { name: 'provider', type: 'address' },
      { name: 'tokenId', type: 'uint8' },
    ],
    outputs: [{ name: '', type: 'bool' }],
  },
  {
    type: 'function',
    name: 'acknowledgeTEESigner',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'provider', type: 'address' },
      { name: 'acknowledged', type: 'bool' },
    ],
    outputs: [],
  },
  { type: 'function', name: 'revokeAllTokens', stateMutability: 'nonpayable', inputs: [{ name: 'provider', type: 'address' }], outputs: [] },
  {
    type: 'function',
    name: 'revokeToken',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'provider', type: 'address' },
      { name: 'tokenId', type: 'uint8' },
    ],
    outputs: [],
  },
  {
    type: 'function',
    name: 'settleFeesWithTEE',
    stateMutability: 'nonpayable',
    inputs: [
      {
        name: 'settlements',
        type: 'tuple[]',
        components: [
          { name: 'user', type: 'address' },
          { name: 'provider', type: 'address' },
          { name: 'totalFee', type: 'uint256' },
          { name: 'requestsHash', type: 'bytes32' },
          { name: 'nonce', type: 'uint256' },
          { name: 'signature', type: 'bytes' },
        ],
      },
    ],
    outputs: [{ name: 'statuses', type: 'uint8[]' }],
  },
  {
    type: 'event',
    name: 'TEESettlementResult',
    anonymous: false,
    inputs: [
      { name: 'user', type: 'address', indexed: true },
      { name: 'status', type: 'uint8', indexed: false },
      { name: 'unsettledAmount', type: 'uint256', indexed: false },
    ],
  },
  {
    type: 'event',
    name: 'BalanceUpdated',
    anonymous: false,
    inputs: [
      { name: 'user', type: 'address', indexed: true },
      { name: 'provider', type: 'address', indexed: true },
      { name: 'amount', type: 'uint256', indexed: false },
      { name: 'pendingRefund', type: 'uint256', indexed: false },
    ],
  },
  { type: 'error', name: 'AccountNotExists', inputs: [{ name: 'user', type: 'address' }, { name: 'provider', type: 'address' }] },
] as const

/** A sub-account as the payer reads it. */
export interface SubAccount {
  readonly balance: bigint
  readonly pendingRefund: bigint
  readonly acknowledged: boolean
  readonly generation: bigint
  readonly revokedBitmap: bigint
  /** The provider's last settlement nonce. */
  readonly nonce: bigint
}

/** The ledger as the payer reads it. */
export interface PayerLedger {
  readonly availableBalance: bigint
  readonly totalBalance: bigint
}

/** Neuron per 0G. */
export const NEURON_PER_0G = 10n ** 18n

/** A decimal 0G string ("1.5") as neuron, exactly; null when it is not one. */
export function parse0g(text: string): bigint | null {
  const m = /^(\d{1,12})(?:\.(\d{1,18}))?$/.exec(text)
  if (m === null) return null
  return BigInt(m[1]!) * NEURON_PER_0G + BigInt((m[2] ?? '').padEnd(18, '0'))
}

/** Neuron as a decimal 0G string, exactly, without trailing zeros ("1.5", "0", "-0.25"). */
export function format0g(neuron: bigint): string {
  const sign = neuron < 0n ? '-' : ''
  const abs = neuron < 0n ? -neuron : neuron
  const whole = abs / NEURON_PER_0G
  const frac = (abs % NEURON_PER_0G).toString().padStart(18, '0').replace(/0+$/, '')
  return `${sign}${whole}${frac === '' ? '' : '.' + frac}`
}
