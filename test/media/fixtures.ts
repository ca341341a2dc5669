/** Shared by the media tests: providers of image and speech models, real audio files, the ledger's charges. */
import type { JournalEntry } from '../../src/store/ledger.js'
import { addr, type Stack, type TestProvider } from '../helpers/stack.js'
import { WAV_BYTES_PER_SECOND, wavHeader } from '../helpers/wav.js'

export const IMAGE_MODEL = 'img-model'
export const AUDIO_MODEL = 'stt-model'
/** Cheaper first under sort=price: A, then B. */
export const A = addr('a')
export const B = addr('b')
export const PRICE_SORT = { 'X-SVC-Provider-Sort': 'price' }

/** Two providers of both media models, A cheaper than B. */
export function mediaProviders(simA: TestProvider['sim'] = {}, simB: TestProvider['sim'] = {}): TestProvider[] {
  return [
    {
      address: A,
      models: [
        { id: IMAGE_MODEL, type: 'text-to-image', price: { image: '0.003' } },
        { id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.0001' } },
      ],
      sim: simA,
    },
    {
      address: B,
      models: [
        { id: IMAGE_MODEL, type: 'text-to-image', price: { image: '0.005' } },
        { id: AUDIO_MODEL, type: 'speech-to-text', price: { audio_second: '0.0002' } },
      ],
      sim: simB,
    },
  ]
}

/** A PCM WAV file: 16 kHz, mono, 16-bit, `seconds` long (silence). */
export function wav(seconds: number): Buffer {
  const data = Math.round((seconds * WAV_BYTES_PER_SECOND) / 2) * 2
  return Buffer.concat([wavHeader(data), Buffer.alloc(data)])
}

/** An MP3 of `frames` MPEG-1 Layer III frames at 128 kbit/s, 44.1 kHz (417-byte frames of silence). */
export function mp3(frames: number): Buffer {
  const frame = Buffer.alloc(417)
  frame[0] = 0xff
  frame[1] = 0xfb
  frame[2] = 0x90
  frame[3] = 0x64
  return Buffer.concat(Array.from({ length: frames }, () => frame))
}

/** The account's charges, oldest first. */
export async function charges(stack: Stack): Promise<JournalEntry[]> {
  return (await stack.router.store.ledger.journal(stack.account)).filter((e) => e.kind === 'charge')
}

/** USD decimal → atto-USD, for hand computations. */
export function atto(usd: string): bigint {
  const [whole, frac = ''] = usd.split('.')
  return BigInt(whole!) * 10n ** 18n + BigInt((frac + '0'.repeat(18)).slice(0, 18))
}
