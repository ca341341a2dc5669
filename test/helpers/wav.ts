/** WAV bytes for tests and the bench: the format svc-router reads exactly (codecs/audio-duration.ts). */

/** Bytes per second of the WAV below: 16 kHz, mono, 16-bit PCM. */
export const WAV_BYTES_PER_SECOND = 32_000

/** The 44-byte header of a PCM WAV (16 kHz, mono, 16-bit) whose `data` chunk holds `dataBytes`. */
export function wavHeader(dataBytes: number): Buffer {
  const h = Buffer.alloc(44)
  h.write('RIFF', 0, 'latin1')
  h.writeUInt32LE(36 + dataBytes, 4)
  h.write('WAVEfmt ', 8, 'latin1')
  h.writeUInt32LE(16, 16)
  h.writeUInt16LE(1, 20) // PCM
  h.writeUInt16LE(1, 22) // mono
  h.writeUInt32LE(WAV_BYTES_PER_SECOND / 2, 24) // sample rate
  h.writeUInt32LE(WAV_BYTES_PER_SECOND, 28) // byte rate
  h.writeUInt16LE(2, 32) // block align
  h.writeUInt16LE(16, 34) // bits per sample
  h.write('data', 36, 'latin1')
  h.writeUInt32LE(dataBytes, 40)
  return h
}
