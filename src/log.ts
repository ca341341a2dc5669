/**
 * Structured logging through pino: one JSON line per event on stderr (`time` ISO, `level` by name, `msg`),
 * or pino-pretty lines when the operator asks for them or stderr is a terminal (`log.format: auto`).
 * Never pass a secret (a key, an Authorization header) or a prompt in `fields`; the redaction below is a
 * second line of defence, not the first.
 */
import pino, { type Logger } from 'pino'
import pretty from 'pino-pretty'

export type LogLevel = 'error' | 'warn' | 'info' | 'debug'
export type LogFormat = 'auto' | 'json' | 'pretty'

/** Field names that must never reach a log line, wherever they appear one level deep. */
const REDACTED = ['authorization', 'key', 'api_key', 'xApiKey', 'secret', 'password', 'token', 'cookie', 'headers']
/** The same for names that are not identifiers (bracket notation, as pino's redact paths want them). */
const REDACTED_QUOTED = ['x-api-key', 'set-cookie']
const REDACT_PATHS = [
  ...REDACTED,
  ...REDACTED.map((k) => `*.${k}`),
  ...REDACTED_QUOTED.map((k) => `["${k}"]`),
  ...REDACTED_QUOTED.map((k) => `*["${k}"]`),
]

function build(level: LogLevel, format: LogFormat): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  }
  const usePretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true)
  // Synchronous writes: a line logged just before process.exit is not lost, as with process.stderr.write before.
  const stream = usePretty ? pretty({ destination: 2, sync: true, colorize: process.stderr.isTTY === true }) : pino.destination({ dest: 2, sync: true })
  return pino(options, stream)
}

let logger = build('info', 'json')

export function setLogLevel(level: LogLevel, format: LogFormat = 'json'): void {
  logger = build(level, format)
}

/** True when info lines are written: the access log builds its line only then. */
export function infoEnabled(): boolean {
  return logger.isLevelEnabled('info')
}

/** True when debug lines are written (the only level at which a prompt may be logged). */
export function debugEnabled(): boolean {
  return logger.isLevelEnabled('debug')
}

export const log = {
  error: (msg: string, fields?: Record<string, unknown>) => (fields === undefined ? logger.error(msg) : logger.error(fields, msg)),
  warn: (msg: string, fields?: Record<string, unknown>) => (fields === undefined ? logger.warn(msg) : logger.warn(fields, msg)),
  info: (msg: string, fields?: Record<string, unknown>) => (fields === undefined ? logger.info(msg) : logger.info(fields, msg)),
  debug: (msg: string, fields?: Record<string, unknown>) => (fields === undefined ? logger.debug(msg) : logger.debug(fields, msg)),
}
