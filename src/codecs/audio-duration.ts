/**
 * How long a piece of audio is, from its own header (DESIGN.md §4: the fallback when a provider reports no
 * duration): WAV (RIFF `fmt `/`data` chunks: exact) and MP3 (the first MPEG-1/2/2.5 Layer III frame header's
 * bitrate, over the audio's size: exact for constant bitrate). Used by the router on the head of an upload and
 * by the simulator on a whole file.
 */

export interface AudioRate {
  readonly format: 'wav' | 'mp3'
  /** The rate as the header states it (WAV: the smallest of its fields that say it). */
  readonly bytesPerSecond: number
  /**
   * The fewest bytes per second any audio with this header can take: the bound of how long the file can be.
   * WAV of whole-byte samples (PCM, float, A-law, µ-law): its rate (the header defines the audio); of a packed
   * coding: at most 8 kbit/s. MP3: the lowest bitrate of its MPEG version, since only the first frame was read
   * and a variable-bitrate file may go lower after it.
   */
  readonly slowestBytesPerSecond: number
  /** Where the audio starts in the file. */
  readonly offset: number
  /** Bytes of audio as the header states them (WAV `data`), null when the header does not say. */
  readonly dataBytes: number | null
}

/** Bytes per second of the slowest speech codec in use (8 kbit/s): what bounds audio whose rate is not known. */
export const FLOOR_BYTES_PER_SECOND = 1000

/** Bytes of the header the router keeps to read the rate (WAV chunks before `data`, an ID3 tag's start). */
export const AUDIO_HEAD_BYTES = 64 * 1024

const MP3_BITRATES_V1 = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
const MP3_BITRATES_V2 = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]

/** The audio's rate as its header gives it, or null when `head` is neither WAV nor MP3. */
export function audioRate(head: Buffer): AudioRate | null {
  return wavRate(head) ?? mp3Rate(head)
}

/** Seconds of audio in a file of `fileBytes` bytes whose head is `head`; null when the format is unknown. */
export function audioSeconds(head: Buffer, fileBytes: number): number | null {
  const rate = audioRate(head)
  if (rate === null || rate.bytesPerSecond <= 0) return null
  const available = Math.max(0, fileBytes - rate.offset)
  const bytes = rate.dataBytes === null ? available : Math.min(rate.dataBytes, available)
  return bytes / rate.bytesPerSecond
}

function wavRate(b: Buffer): AudioRate | null {
  if (b.length < 12 || b.toString('latin1', 0, 4) !== 'RIFF' || b.toString('latin1', 8, 12) !== 'WAVE') return null
  let at = 12
  let byteRate = 0
  let slowest = 0
  while (at + 8 <= b.length) {
    const id = b.toString('latin1', at, at + 4)
    const size = b.readUInt32LE(at + 4)
    if (id === 'fmt ' && at + 24 <= b.length) {
      byteRate = wavByteRate(b, at + 8)
      // Samples of a whole number of bytes each (PCM, float, A-law, µ-law): the fields define the audio, and a
      // decoder reads them as the router does. Any other coding packs samples its own way: its fields bound nothing.
      const format = b.readUInt16LE(at + 8)
      const linear = format === 1 || format === 3 || format === 6 || format === 7 || format === 0xfffe
      slowest = linear && b.readUInt16LE(at + 8 + 14) >= 8 ? byteRate : Math.min(byteRate, FLOOR_BYTES_PER_SECOND)
    }
    if (id === 'data') {
      if (byteRate === 0) return null
      // 0 and 0xFFFFFFFF mark a stream whose length was not known when the header was written.
      const known = size !== 0 && size !== 0xffffffff
      return { format: 'wav', bytesPerSecond: byteRate, slowestBytesPerSecond: slowest, offset: at + 8, dataBytes: known ? size : null }
    }
    at += 8 + size + (size & 1)
  }
  return null
}

/**
 * Bytes per second of a WAV `fmt ` chunk at `at`: the smallest of what its fields say (the byte-rate field,
 * sample rate × block align, sample rate × channels × bits per sample / 8), so that a byte-rate or block-align
 * field written larger than the audio it describes cannot make the file seem shorter than a decoder finds it.
 * 0 when a field it needs is 0.
 */
function wavByteRate(b: Buffer, at: number): number {
  const channels = b.readUInt16LE(at + 2)
  const sampleRate = b.readUInt32LE(at + 4)
  let rate = b.readUInt32LE(at + 8)
  const blockAlign = b.readUInt16LE(at + 12)
  const bits = b.readUInt16LE(at + 14)
  if (sampleRate === 0 || rate === 0) return 0
  if (blockAlign > 0) rate = Math.min(rate, sampleRate * blockAlign)
  // Samples of 8 bits or more take whole bytes (12-bit PCM takes 2); fewer bits are packed (4-bit ADPCM).
  if (channels > 0 && bits > 0) rate = Math.min(rate, sampleRate * channels * (bits >= 8 ? Math.ceil(bits / 8) : bits / 8))
  return rate
}

function mp3Rate(b: Buffer): AudioRate | null {
  let at = 0
  if (b.length >= 10 && b.toString('latin1', 0, 3) === 'ID3') {
    // An ID3v2 tag: its size is four 7-bit bytes.
    at = 10 + ((b[6]! & 0x7f) << 21) + ((b[7]! & 0x7f) << 14) + ((b[8]! & 0x7f) << 7) + (b[9]! & 0x7f)
  }
  if (at + 4 > b.length) return null
  const h1 = b[at + 1]!
  const h2 = b[at + 2]!
  if (b[at] !== 0xff || (h1 & 0xe0) !== 0xe0) return null
  const version = (h1 >> 3) & 3 // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
  const layer = (h1 >> 1) & 3 // 1: Layer III
  if (version === 1 || layer !== 1) return null
  const rates = version === 3 ? MP3_BITRATES_V1 : MP3_BITRATES_V2
  const kbps = rates[h2 >> 4]
  if (kbps === undefined || kbps === 0) return null
  return { format: 'mp3', bytesPerSecond: (kbps * 1000) / 8, slowestBytesPerSecond: (rates[1]! * 1000) / 8, offset: at, dataBytes: null }
}
