/**
 * The simulator's transcriptions: the duration read from the uploaded audio itself (WAV or MP3 header,
 * codecs/audio-duration.ts), filler text, and the five OpenAI response formats.
 */

export const TRANSCRIPTION_FORMATS = new Set(['json', 'text', 'srt', 'verbose_json', 'vtt'])

const TEXT = 'The quick brown fox jumps over the lazy dog.'

function clock(seconds: number, comma: boolean): string {
  const ms = Math.round(seconds * 1000)
  const h = Math.floor(ms / 3_600_000)
  const m = Math.floor(ms / 60_000) % 60
  const s = Math.floor(ms / 1000) % 60
  const pad = (n: number, w = 2): string => String(n).padStart(w, '0')
  return `${pad(h)}:${pad(m)}:${pad(s)}${comma ? ',' : '.'}${pad(ms % 1000, 3)}`
}

export interface Transcript {
  readonly contentType: string
  readonly body: string
}

/**
 * The answer in `format` for `seconds` of audio. `withUsage` false: JSON carries no `usage`, and verbose_json
 * no `duration` (the no-usage fault), so the router must fall back on the upload's own header.
 */
export function transcript(format: string, seconds: number, language: string, withUsage: boolean): Transcript {
  const end = Math.round(seconds * 1000) / 1000
  switch (format) {
    case 'text':
      return { contentType: 'text/plain; charset=utf-8', body: TEXT + '\n' }
    case 'srt':
      return { contentType: 'application/x-subrip', body: `1\n${clock(0, true)} --> ${clock(end, true)}\n${TEXT}\n\n` }
    case 'vtt':
      return { contentType: 'text/vtt; charset=utf-8', body: `WEBVTT\n\n${clock(0, false)} --> ${clock(end, false)}\n${TEXT}\n\n` }
    case 'verbose_json': {
      const segments = [{ id: 0, seek: 0, start: 0, end, text: TEXT }]
      const body = withUsage ? { task: 'transcribe', language, duration: end, text: TEXT, segments } : { task: 'transcribe', language, text: TEXT, segments }
      return { contentType: 'application/json', body: JSON.stringify(body) }
    }
    default: {
      const body = withUsage ? { text: TEXT, usage: { type: 'duration', seconds: end } } : { text: TEXT }
      return { contentType: 'application/json', body: JSON.stringify(body) }
    }
  }
}
