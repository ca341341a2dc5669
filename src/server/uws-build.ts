/**
 * Which published build of uWebSockets.js this process runs on: the first of an ordered list that loads on
 * the running Node ABI, platform and C library. The only module that loads uWS; app.ts, uws-reply.ts and the
 * e2e floor take it from here. README "Supported platforms" has the matrix, where each build comes from, and
 * how an operator swaps in an official release.
 *
 * Each build's native file is loaded directly (uws_<platform>_<arch>_<abi>.node), not through the package's
 * own index: the trufflesuite package's index falls back, when its binary does not load, to a JavaScript
 * imitation of uWS built on `ws`, which must never be taken for the real thing.
 */
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import type * as Uws from 'uws-build-btc-vision'
import { log } from '../log.js'

/** The uWS API, as the builds share it (typed from the newest build's index.d.ts, btc-vision's 20.57.0). */
export type UwsModule = typeof Uws
export type { HttpRequest, HttpResponse, us_listen_socket, us_socket } from 'uws-build-btc-vision'

/** One build to try. */
export interface UwsCandidate {
  /** The package name it is installed under: an npm alias pinned in package.json, or the official name. */
  readonly name: string
  /** What is behind the name: the published package and version, or what the operator installs there. */
  readonly source: string
  /** The folder inside the package that holds the uws_<platform>_<arch>_<abi>.node files. */
  readonly binaryDir: string
  /**
   * The ABIs whose binary here is an older core that stops reading a request body at res.pause(); every other
   * binary keeps reading past it while the client keeps its socket full (readsPastPause). As measured, not
   * guessed: absent means none.
   */
  readonly pauseHoldsOn?: readonly string[]
}

/**
 * The builds, in the order tried. `uWebSockets.js` comes first and is not a dependency: an operator who installs
 * an official release under that name (`npm install uWebSockets.js@github:uNetworking/uWebSockets.js#v20.57.0`)
 * gets it without a code change. uwebsockets 3.0.6 comes before btc-vision's 20.57.0 although its package is
 * a less clear republish (its binaries carry the paths of uWebSockets.js's own CI): its Node 20 binary is an
 * older core that honours res.pause() (`pauseHoldsOn`), where btc-vision's reads past it, and btc-vision's
 * binaries all need glibc 2.38, where uwebsockets' own load too, so it is reached only for an ABI uwebsockets
 * does not ship.
 */
export const UWS_CANDIDATES: readonly UwsCandidate[] = [
  { name: 'uWebSockets.js', source: 'uWebSockets.js as installed by the operator (not a dependency)', binaryDir: '.' },
  { name: 'uws-build-uwebsockets', source: 'npm uwebsockets@3.0.6, a republished uWebSockets.js v20', binaryDir: '.', pauseHoldsOn: ['115'] },
  { name: 'uws-build-btc-vision', source: 'npm @btc-vision/uwebsockets.js@20.57.0, uWebSockets.js v20.57.0', binaryDir: '.' },
  {
    name: 'uws-build-trufflesuite',
    source: 'npm @trufflesuite/uws-js-unofficial@20.30.0-unofficial.0, uWS core 20.43',
    binaryDir: 'binaries',
    pauseHoldsOn: ['115'],
  },
]

/** The build that loaded. */
export interface UwsBuild {
  readonly candidate: UwsCandidate
  /** The package's version as its package.json says. */
  readonly version: string
  /** Absolute path of the loaded .node file. */
  readonly file: string
  /** The loaded file's sha256, hex. */
  readonly sha256: string
  /** One line per candidate tried before it, with why it did not load. */
  readonly skipped: readonly string[]
  readonly uws: UwsModule
}

/** What the selection needs to know of the running process; the defaults are this process's. */
export interface UwsTarget {
  readonly platform: string
  readonly arch: string
  /** process.versions.modules, e.g. '115' for Node 20. */
  readonly abi: string
  /** The folder whose node_modules are searched (default: this module's). */
  readonly from: string
}

/** No candidate loaded: the message names each with its reason. */
export class NoUwsBuildError extends Error {
  constructor(target: UwsTarget, reasons: readonly string[]) {
    super(
      `no build of uWebSockets.js loads on Node ${process.version} (${target.platform}-${target.arch}, ABI ${target.abi}); tried, in order:\n` +
        reasons.map((r) => `  - ${r}`).join('\n') +
        '\nREADME "Supported platforms" lists the Node versions and C libraries each build needs.',
    )
    this.name = 'NoUwsBuildError'
  }
}

const HERE = dirname(new URL(import.meta.url).pathname)

function defaultTarget(): UwsTarget {
  return { platform: process.platform, arch: process.arch, abi: process.versions.modules, from: HERE }
}

/** The folder of package `name` as Node resolves it from `from`, or null when it is not installed. */
export function packageRoot(name: string, from: string): { root: string; version: string } | null {
  let main: string
  try {
    main = createRequire(join(from, 'noop.js')).resolve(name)
  } catch {
    return null
  }
  // The package's main may sit in a subfolder (trufflesuite: src/uws.js); its root holds package.json.
  for (let dir = dirname(main); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json')
    if (existsSync(manifest)) {
      const version = (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: unknown }).version
      return { root: dir, version: typeof version === 'string' ? version : 'unknown' }
    }
  }
  return null
}

/** The first reason-worthy line of a load error (dlopen's message names the missing GLIBC version). */
function firstLine(err: unknown): string {
  const text = String((err as Error)?.message ?? err)
  const line = text.split('\n').find((l) => l.trim() !== '') ?? text
  return line.length > 300 ? line.slice(0, 300) + '…' : line
}

/**
 * Loads the first candidate that works on `target`: installed, shipping a binary for its platform, arch and
 * ABI, that binary loading (the C library is new enough), and exporting uWS's App. Throws NoUwsBuildError
 * naming every candidate and why it failed when none does.
 */
export function selectUwsBuild(candidates: readonly UwsCandidate[], target: UwsTarget = defaultTarget()): UwsBuild {
  const reasons: string[] = []
  const req = createRequire(join(target.from, 'noop.js'))
  for (const candidate of candidates) {
    const pkg = packageRoot(candidate.name, target.from)
    if (pkg === null) {
      reasons.push(`${candidate.name} (${candidate.source}): not installed`)
      continue
    }
    const label = `${candidate.name} ${pkg.version} (${candidate.source})`
    const file = join(pkg.root, candidate.binaryDir, `uws_${target.platform}_${target.arch}_${target.abi}.node`)
    if (!existsSync(file)) {
      reasons.push(`${label}: no binary for ${target.platform}-${target.arch} ABI ${target.abi}`)
      continue
    }
    let uws: UwsModule
    try {
      uws = req(file) as UwsModule
    } catch (err) {
      reasons.push(`${label}: ${firstLine(err)}`)
      continue
    }
    if (typeof uws?.App !== 'function' || typeof uws.us_listen_socket_close !== 'function') {
      reasons.push(`${label}: ${file} loaded but is not a uWS build (no App)`)
      continue
    }
    const sha256 = createHash('sha256').update(readFileSync(file)).digest('hex')
    return { candidate, version: pkg.version, file, sha256, skipped: reasons, uws }
  }
  throw new NoUwsBuildError(target, reasons)
}

let loaded: UwsBuild | null = null
/** The limit uWS was loaded with (undefined: it was not given one, and keeps its own). */
let loadedHeadBytes: number | undefined
/** uWS's own limit when UWS_HTTP_MAX_HEADERS_SIZE is not set. */
const UWS_DEFAULT_HEAD_BYTES = 4096

/**
 * The process's uWS build, loaded on first call. `maxHeadBytes` (config server.max_head_bytes) is handed to uWS
 * as UWS_HTTP_MAX_HEADERS_SIZE, which uWS reads once, when it loads: a later call with another value cannot
 * change it, and says so.
 */
export function uwsBuild(options: { maxHeadBytes?: number } = {}): UwsBuild {
  if (loaded === null) {
    if (options.maxHeadBytes !== undefined) process.env.UWS_HTTP_MAX_HEADERS_SIZE = String(options.maxHeadBytes)
    loaded = selectUwsBuild(UWS_CANDIDATES)
    loadedHeadBytes = options.maxHeadBytes
    log.info('uWS loaded', {
      build: loaded.candidate.name,
      version: loaded.version,
      file: loaded.file,
      sha256: loaded.sha256,
      skipped: loaded.skipped,
    })
    const rmemMax = tcpReceiveBufferMax()
    const warning = pauseWarning(loaded, rmemMax)
    if (warning !== null) log.warn(warning, { build: loaded.candidate.name, file: loaded.file, tcp_rmem_max: rmemMax })
  } else if (options.maxHeadBytes !== undefined && options.maxHeadBytes !== (loadedHeadBytes ?? UWS_DEFAULT_HEAD_BYTES)) {
    throw new Error(
      `uWS was loaded with a head limit of ${loadedHeadBytes ?? UWS_DEFAULT_HEAD_BYTES} bytes; it cannot take ${options.maxHeadBytes} in the same process`,
    )
  }
  return loaded
}

/** The build loaded so far, or null before the first listen (for svc_build_info, which must not load it). */
export function loadedUwsBuild(): UwsBuild | null {
  return loaded
}

/** One line for logs and --version: which build, its file, its sha256. */
export function describeUwsBuild(build: UwsBuild): string {
  return `uWS build ${build.candidate.name} ${build.version} (${build.candidate.source}), ${build.file}, sha256 ${build.sha256}`
}

/** uSockets reads a socket into a buffer of this size (LIBUS_RECV_BUFFER_LENGTH, the same in every build). */
export const UWS_RECV_BUFFER_BYTES = 512 * 1024

/**
 * Whether this build keeps delivering a request body after res.pause(). Every current uSockets (since its
 * "Always read again immediately after reading a full recv buffer", February 2024) reads a readable socket again
 * at once, within the same event, whenever a read filled its whole UWS_RECV_BUFFER_BYTES buffer, whether or not
 * onData paused the socket meanwhile: pause() only takes the socket out of the poll, which that loop never
 * looks at. A client that keeps the socket's kernel queue at 512 KiB or more (one on the same host or a fast
 * network, faster than the router reads) is read on, in one synchronous run that also holds off the upstream
 * writes waiting for the event loop, until it slows down or its upload ends. README "Known issues".
 */
export function readsPastPause(build: Pick<UwsBuild, 'candidate' | 'file'>): boolean {
  const abi = /_(\d+)\.node$/.exec(build.file)?.[1]
  return abi === undefined || build.candidate.pauseHoldsOn?.includes(abi) !== true
}

/**
 * The largest receive buffer the kernel lets a TCP socket grow to here (the third field of Linux's
 * net.ipv4.tcp_rmem, per network namespace), or null where it cannot be read. `text` stands for the file's.
 */
export function tcpReceiveBufferMax(text?: string): number | null {
  let fields = text
  if (fields === undefined) {
    try {
      fields = readFileSync('/proc/sys/net/ipv4/tcp_rmem', 'utf8')
    } catch {
      return null
    }
  }
  const max = Number(fields.trim().split(/\s+/)[2])
  return Number.isSafeInteger(max) && max > 0 ? max : null
}

/**
 * Why a streamed upload may be held in the router's memory in full with this build here, or null when it cannot
 * be: the build reads past a pause, and the kernel lets a socket's receive buffer reach the UWS_RECV_BUFFER_BYTES
 * a read must fill for the core to read again (unknown counts as yes).
 */
export function pauseWarning(build: Pick<UwsBuild, 'candidate' | 'file'>, rmemMax: number | null): string | null {
  if (!readsPastPause(build)) return null
  if (rmemMax !== null && rmemMax < UWS_RECV_BUFFER_BYTES) return null
  const allowed = rmemMax === null ? 'may grow' : `may grow to ${rmemMax} bytes (net.ipv4.tcp_rmem)`
  return (
    `this uWS build keeps reading a request body after pause() while each read fills its ${UWS_RECV_BUFFER_BYTES}-byte buffer, ` +
    `and a socket's receive buffer ${allowed}: a client faster than the provider can make the router hold a multipart ` +
    `upload whole (up to server.max_multipart_body_bytes). A third field of net.ipv4.tcp_rmem below ${UWS_RECV_BUFFER_BYTES} ` +
    `in the router's network namespace bounds it (README "Known issues")`
  )
}
