/**
 * The simulator's images: small real PNGs (8×8, one colour drawn from the prompt), as b64_json or as a URL the
 * simulator itself serves (GET /v1/images/files/<seed>.png, regenerated from the seed, so nothing is stored).
 */
import { createHash } from 'node:crypto'
import { deflateSync } from 'node:zlib'

const SIDE = 8
const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
export const IMAGE_FILES_PATH = '/v1/images/files/'

const CRC_TABLE = (() => {
  const table = new Uint32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    table[n] = c >>> 0
  }
  return table
})()

function crc32(bytes: Buffer): number {
  let c = 0xffffffff
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8)
  head.writeUInt32BE(data.length, 0)
  head.write(type, 4, 'latin1')
  const crc = Buffer.alloc(4)
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0)
  return Buffer.concat([head, data, crc])
}

/** A valid 8×8 RGB PNG of one colour taken from `seed`. */
export function pngImage(seed: string): Buffer {
  const rgb = createHash('sha256').update(seed).digest().subarray(0, 3)
  const ihdr = Buffer.alloc(13)
  ihdr.writeUInt32BE(SIDE, 0)
  ihdr.writeUInt32BE(SIDE, 4)
  ihdr[8] = 8 // bit depth
  ihdr[9] = 2 // colour type: RGB
  const row = Buffer.alloc(1 + SIDE * 3) // filter byte 0, then pixels
  for (let x = 0; x < SIDE; x++) rgb.copy(row, 1 + x * 3)
  const raw = Buffer.concat(Array.from({ length: SIDE }, () => row))
  return Buffer.concat([SIGNATURE, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))])
}

/** A seed as it may appear in a file URL: hex only. */
export function seedOf(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 24)
}

/** The images answer: `n` PNGs for `prompt` as b64_json or URLs below `baseUrl`. */
export function imagesBody(id: string, prompt: string, n: number, format: string, baseUrl: string): string {
  const data = []
  for (let i = 0; i < n; i++) {
    const seed = seedOf(`${prompt}#${i}`)
    data.push(format === 'url' ? { url: `${baseUrl}${IMAGE_FILES_PATH}${seed}.png`, revised_prompt: prompt } : { b64_json: pngImage(seed).toString('base64'), revised_prompt: prompt })
  }
  return JSON.stringify({ id, created: Math.floor(Date.now() / 1000), data })
}

/** The seed of a file URL's path, or null when the path names no image. */
export function fileSeed(path: string): string | null {
  if (!path.startsWith(IMAGE_FILES_PATH) || !path.endsWith('.png')) return null
  const seed = path.slice(IMAGE_FILES_PATH.length, -4)
  return /^[0-9a-f]{1,64}$/.test(seed) ? seed : null
}
