/**
 * The part of the InferenceServing contract's ABI the router reads (0G Compute Network; the same layout as the
 * ABI that ships in @0gfoundation/0g-compute-ts-sdk 0.9.x), typed `as const` so viem decodes `Service` records
 * with the contract's own names. contracts/InferenceServing.sol implements the same ABI for tests and the demo.
 */

const SERVICE_COMPONENTS = [
  { name: 'provider', type: 'address' },
  { name: 'serviceType', type: 'string' },
  { name: 'url', type: 'string' },
  { name: 'inputPrice', type: 'uint256' },
  { name: 'outputPrice', type: 'uint256' },
  { name: 'updatedAt', type: 'uint256' },
  { name: 'model', type: 'string' },
  { name: 'verifiability', type: 'string' },
  { name: 'additionalInfo', type: 'string' },
  { name: 'teeSignerAddress', type: 'address' },
  { name: 'teeSignerAcknowledged', type: 'bool' },
] as const

export const INFERENCE_SERVING_ABI = [
  {
    type: 'function',
    name: 'getAllServices',
    stateMutability: 'view',
    inputs: [
      { name: 'offset', type: 'uint256' },
      { name: 'limit', type: 'uint256' },
    ],
    outputs: [
      { name: 'services', type: 'tuple[]', internalType: 'struct Service[]', components: SERVICE_COMPONENTS },
      { name: 'total', type: 'uint256' },
    ],
  },
  {
    type: 'event',
    name: 'ServiceUpdated',
    anonymous: false,
    inputs: [
      { name: 'service', type: 'address', indexed: true },
      { name: 'serviceType', type: 'string', indexed: false },
      { name: 'url', type: 'string', indexed: false },
      { name: 'inputPrice', type: 'uint256', indexed: false },
      { name: 'outputPrice', type: 'uint256', indexed: false },
      { name: 'updatedAt', type: 'uint256', indexed: false },
      { name: 'model', type: 'string', indexed: false },
      { name: 'verifiability', type: 'string', indexed: false },
    ],
  },
  {
    type: 'event',
    name: 'ServiceRemoved',
    anonymous: false,
    inputs: [{ name: 'service', type: 'address', indexed: true }],
  },
  {
    type: 'event',
    name: 'ProviderTEESignerAcknowledged',
    anonymous: false,
    inputs: [
      { name: 'provider', type: 'address', indexed: true },
      { name: 'teeSignerAddress', type: 'address', indexed: true },
      { name: 'acknowledged', type: 'bool', indexed: false },
    ],
  },
] as const

/** A `Service` record as viem decodes it. */
export interface ChainService {
  readonly provider: `0x${string}`
  readonly serviceType: string
  readonly url: string
  readonly inputPrice: bigint
  readonly outputPrice: bigint
  readonly updatedAt: bigint
  readonly model: string
  readonly verifiability: string
  readonly additionalInfo: string
  readonly teeSignerAddress: `0x${string}`
  readonly teeSignerAcknowledged: boolean
}

/** The most services one getAllServices call asks for (the contract refuses larger pages). */
export const PAGE_SIZE = 50n
