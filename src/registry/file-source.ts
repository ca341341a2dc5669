/**
 * The registry from a YAML file (`registry.source: file`): parse it into a frozen `RegistrySnapshot`, and
 * watch it for hot reload. A bad file never replaces a good snapshot: the watcher reports it and waits for
 * the next change.
 */

import { watch, readFileSync, type FSWatcher } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { basename, dirname, resolve } from 'node:path'
import { parseDocument } from 'yaml'
import { deepFreeze, describeIssues, FileProblemsError, formatPath, yamlErrorLine } from '../config/index.js'
import { RegistryFileSchema, duplicateIssues } from './schema.js'
import type { RegistrySnapshot, RegistrySource } from './types.js'

/** A registry file that cannot be used. */
export class RegistryError extends FileProblemsError {
  override name = 'RegistryError'
}

/** Parse registry YAML. `origin` (a file name) only goes into error messages. */
export function parseRegistry(text: string, version: number, origin?: string): RegistrySnapshot {
  const where = origin === undefined ? '' : ` (${origin})`
  const fail = (problems: string[]): never => {
    throw new RegistryError(`invalid registry${where}`, problems)
  }

  const doc = parseDocument(text)
  // yaml's messages end in a code frame; the first line names the problem with its line and column.
  if (doc.errors.length > 0) fail(doc.errors.map((err) => yamlErrorLine(err.message)))
  const raw: unknown = doc.toJS()
  if (raw === null || raw === undefined) fail(['the file is empty: expected a mapping with a providers list'])

  const problems = duplicateIssues(raw).map((issue) => `${formatPath(issue.path)}: ${issue.message}`)
  const result = RegistryFileSchema.safeParse(raw, { reportInput: true })
  if (!result.success) problems.unshift(...describeIssues(result.error.issues, RegistryFileSchema))
  if (!result.success || problems.length > 0) return fail(problems)
  return deepFreeze({ providers: result.data.providers, version }) as RegistrySnapshot
}

/** Read and parse a registry file; read errors become `RegistryError` too. */
export function loadRegistryFile(path: string, version: number): RegistrySnapshot {
  const file = resolve(path)
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    throw new RegistryError(`cannot read registry file ${file}: ${errorCode(err)}`)
  }
  return parseRegistry(text, version, file)
}

export interface RegistryWatcher {
  close(): void
}

export interface RegistryWatchHandlers {
  /** A new, valid registry; its version is the previous one + 1. */
  onChange(snapshot: RegistrySnapshot): void
  /** The file is unreadable or invalid; the previous snapshot stays in force. */
  onError(err: Error): void
}

export interface RegistryWatchOptions {
  /** Quiet period after the last file event before reading (editors write in bursts). Default 50 ms. */
  readonly debounceMs?: number
  /** Version of the snapshot the caller already holds; the first change is `firstVersion + 1`. Default 1. */
  readonly firstVersion?: number
}

/**
 * Watch a registry file for changes. The DIRECTORY is watched, not the file: editors save by writing a new
 * file and renaming it over the old one, which would leave a watch on the old inode deaf.
 */
export function watchRegistryFile(
  path: string,
  handlers: RegistryWatchHandlers,
  options: RegistryWatchOptions = {},
): RegistryWatcher {
  const file = resolve(path)
  const name = basename(file)
  const debounceMs = options.debounceMs ?? 50
  let version = options.firstVersion ?? 1
  // Text of the snapshot in force, and the text last read (good or bad): rereading either is not a change,
  // so a touch or a duplicate event neither reloads nor repeats an error.
  let currentText = initialText(file, version)
  let lastSeenText = currentText
  let timer: NodeJS.Timeout | undefined
  let reading = false
  let readAgain = false
  let closed = false

  const watcher: FSWatcher = watch(dirname(file), function onDirectoryEvent(_event, filename) {
    // Some platforms omit the name; then any event in the directory may be ours.
    if (filename !== null && filename !== name) return
    schedule()
  })
  watcher.on('error', function onWatchError(err: Error) {
    if (!closed) handlers.onError(new RegistryError(`watching ${file} failed: ${err.message}`))
  })

  function schedule(): void {
    if (closed) return
    if (timer !== undefined) clearTimeout(timer)
    timer = setTimeout(function onQuiet() {
      timer = undefined
      reload().catch((err: unknown) => {
        if (!closed) handlers.onError(err instanceof Error ? err : new Error(String(err)))
      })
    }, debounceMs)
  }

  async function reload(): Promise<void> {
    // One read at a time; events during a read trigger one more read afterwards.
    if (reading) {
      readAgain = true
      return
    }
    reading = true
    try {
      let text: string
      try {
        text = await readFile(file, 'utf8')
      } catch (err) {
        if (closed) return
        lastSeenText = undefined
        handlers.onError(new RegistryError(`cannot read registry file ${file}: ${errorCode(err)}; keeping the current registry`))
        return
      }
      if (closed || text === lastSeenText) return
      lastSeenText = text
      if (text === currentText) return
      const snapshot = parseRegistry(text, version + 1, file)
      version = snapshot.version
      currentText = text
      handlers.onChange(snapshot)
    } finally {
      reading = false
      if (readAgain && !closed) {
        readAgain = false
        schedule()
      }
    }
  }

  return {
    close() {
      if (closed) return
      closed = true
      if (timer !== undefined) clearTimeout(timer)
      timer = undefined
      watcher.close()
    },
  }
}

/** The file's text if it parses (the caller has most likely just loaded it), else undefined. */
function initialText(file: string, version: number): string | undefined {
  try {
    const text = readFileSync(file, 'utf8')
    parseRegistry(text, version, file)
    return text
  } catch {
    return undefined
  }
}

function errorCode(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | null)?.code
  return typeof code === 'string' ? code : String(err)
}

/** The registry file as a registry source: read at start (a bad file stops the start), then watched when `watch`. */
export function createFileSource(path: string, watch: boolean): RegistrySource {
  let watcher: RegistryWatcher | null = null
  return {
    async start(handlers) {
      const snapshot = loadRegistryFile(path, 1)
      if (watch) watcher = watchRegistryFile(path, handlers, { firstVersion: snapshot.version })
      return snapshot
    },
    notReadyReason: () => null,
    close() {
      watcher?.close()
    },
  }
}
