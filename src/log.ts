/**
 * Structured logging: one JSON line per event on stderr. Never pass a secret (a key, an Authorization
 * header) in `fields`.
 */

export type LogLevel = 'error' | 'warn' | 'info' | 'debug'
const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 }

let threshold = RANK.info

export function setLogLevel(level: LogLevel): void {
  threshold = RANK[level]
}

function emit(level: LogLevel, msg: string, fields?: Record<string, unknown>): void {
  if (RANK[level] > threshold) return
  const line = JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })
  process.stderr.write(line + '\n')
}

export const log = {
  error: (msg: string, fields?: Record<string, unknown>) => emit('error', msg, fields),
  warn: (msg: string, fields?: Record<string, unknown>) => emit('warn', msg, fields),
  info: (msg: string, fields?: Record<string, unknown>) => emit('info', msg, fields),
  debug: (msg: string, fields?: Record<string, unknown>) => emit('debug', msg, fields),
}
