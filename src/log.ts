/**
 * Structured logging through pino: one JSON line per event on stderr (`time` ISO, `level` by name, `msg`),
 * or pino-pretty lines when the operator asks for them or stderr is a terminal (`log.format: auto`).
 * Never pass a secret (a key, an Authorization header) or a prompt in `fields`; the redaction below is a
 * second line of defence, not the first.
 */
import pino, { type Logger } from 'pino'
import { createRequire } from 'node:module'

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

/**
 * The access log's own stream (JSON only): lines are buffered and written in batches of 4 KiB, at least every
 * ACCESS_FLUSH_MS, and all at exit. A line per request written synchronously cost a write syscall, and a
 * wake-up of whatever reads stderr, per request (measured in bench:e2e's telemetry rows).
 */
const ACCESS_FLUSH_MS = 250
let accessStream: ReturnType<typeof pino.destination> | null = null

function bufferedStderr(): ReturnType<typeof pino.destination> {
  if (accessStream !== null) return accessStream
  const stream = pino.destination({ dest: 2, sync: false, minLength: 4096 })
  // An asynchronous write that fails (stderr's reader gone: EPIPE) is reported as an 'error' event, which
  // with no listener would end the process. Losing access lines is the lesser harm.
  stream.on('error', () => {})
  setInterval(() => {
    try {
      stream.flush()
    } catch {
      // Not open yet (the next tick retries) or destroyed.
    }
  }, ACCESS_FLUSH_MS).unref()
  process.once('exit', () => {
    try {
      stream.flushSync()
    } catch {
      // Not open yet, or stderr is gone: nothing more can be written anyway.
    }
  })
  return (accessStream = stream)
}

/** pino-pretty, loaded only when lines are pretty (about 10 MiB of memory otherwise spent on every start). */
function loadPretty(): typeof import('pino-pretty') {
  return createRequire(import.meta.url)('pino-pretty') as typeof import('pino-pretty')
}

function build(level: LogLevel, format: LogFormat): { logger: Logger; access: Logger } {
  const options: pino.LoggerOptions = {
    level,
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  }
  const usePretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true)
  // Synchronous writes: a line logged just before process.exit is not lost, as with process.stderr.write before.
  const stream = usePretty ? loadPretty()({ destination: 2, sync: true, colorize: process.stderr.isTTY === true }) : pino.destination({ dest: 2, sync: true })
  return {
    logger: pino({ ...options, redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, stream),
    // The access line's fields are fixed (access-log.ts) and none can hold a secret: no redaction pass, which
    // with these wildcard paths is most of a line's cost (17 µs against 4 µs a line, measured).
    access: pino(options, usePretty ? stream : bufferedStderr()),
  }
}

let { logger, access } = build('info', 'json')

export function setLogLevel(level: LogLevel, format: LogFormat = 'json'): void {
  ;({ logger, access } = build(level, format))
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
  /** An access-log line (telemetry/access-log.ts): info level, buffered, fixed fields that hold no secret. */
  access: (fields: Record<string, unknown>) => access.info(fields, 'request'),
}
