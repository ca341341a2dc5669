/**
 * The console's static files (HTML, CSS, ES modules), served by the router at /console. They are read once,
 * at start, from the `static/` folder beside this module (the build copies src/console/static to
 * dist/src/console/static), so a request never touches the disk and no path from a client reaches the file
 * system: only names found at start are served.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { extname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { RouterError } from '../errors.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError } from '../server/respond.js'

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json',
  '.ico': 'image/x-icon',
}

/**
 * The page may run only its own scripts and talk only to its own origin; the wallet is an injected
 * extension (window.ethereum), which a CSP does not restrict.
 */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

interface StaticFile {
  readonly type: string
  readonly body: Buffer
}

export const STATIC_DIR = fileURLToPath(new URL('./static/', import.meta.url))

function readAll(dir: string, prefix: string, out: Map<string, StaticFile>): void {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) {
      readAll(path, `${prefix}${name}/`, out)
      continue
    }
    const type = TYPES[extname(name)]
    if (type !== undefined) out.set(prefix + name, { type, body: readFileSync(path) })
  }
}

export type Handler = (head: RequestHead, reply: Reply) => void

/** The handler of GET /console and /console/*; files missing at start (an unbuilt tree) are 404s. */
export function createConsoleFiles(dir: string = STATIC_DIR): Handler {
  const files = new Map<string, StaticFile>()
  try {
    readAll(dir, '', files)
  } catch {
    // No static folder (tsc run without the copy step): the API works, the console answers 404.
  }
  return function serveConsoleFile(head, reply) {
    const rest = head.path === '/console' || head.path === '/console/' ? 'index.html' : head.path.slice('/console/'.length)
    const file = files.get(rest)
    if (file === undefined) {
      sendError(reply, new RouterError('not_found', `no console file ${head.path}`), head.requestId, ['x-request-id', head.requestId])
      return
    }
    reply.send(200, [
      'Content-Type', file.type,
      'Cache-Control', 'no-cache',
      'X-Content-Type-Options', 'nosniff',
      'Referrer-Policy', 'no-referrer',
      'X-Frame-Options', 'DENY',
      'Content-Security-Policy', CSP,
    ], file.body)
  }
}
