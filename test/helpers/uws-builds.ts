/**
 * The Linux x64 binaries of every pinned uWS build (package.json's uws-build-* aliases), as published: their
 * sha256, the glibc they need (objdump -T), how their uWS core treats a head it cannot parse, and whether it reads
 * a request body past res.pause(). A tarball
 * republished with other bytes under the same version fails test/server/uws-build.test.ts until it is looked
 * at and recorded here; README "Supported platforms" says where each comes from.
 */
export interface KnownBinary {
  /** The alias it is installed under. */
  readonly build: string
  /** Its path inside the package. */
  readonly file: string
  readonly sha256: string
  /** The newest GLIBC_ symbol version it needs, as [major, minor]. */
  readonly glibc: readonly [number, number]
  /**
   * true: a head the core cannot parse (more than 98 fields, no Host, a malformed field line) is taken for an
   * incomplete one and held until uWS's idle timeout closes it (8–12 s), unanswered. false: the core answers
   * it at once with 400 or 431.
   */
  readonly holdsUnparsable: boolean
  /**
   * true: the core reads a socket again at once whenever a read filled its 512 KiB buffer, paused or not, so a
   * client that keeps the socket full is read on past res.pause() (measured with a bare uWS server that pauses at
   * 4 MiB of a 256 MiB upload from a raw socket on loopback: 2 to 49 MiB more arrived; false: none, and never more
   * than 512 KiB read in one event loop turn). Measured on every binary here but the Node 25 ones (ABI 141, no
   * Node 25 on these machines), recorded as their package's Node 22/24 binaries, from the same release.
   */
  readonly readsPastPause: boolean
}

export const KNOWN_BINARIES: readonly KnownBinary[] = [
  { build: 'uws-build-btc-vision', file: 'uws_linux_x64_115.node', sha256: '5b126ee00bf754b02e97e4c27090365a8562c5820c93f93918ac2212d4503e91', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-btc-vision', file: 'uws_linux_x64_127.node', sha256: '4b55b1f2cb7a7913febbb65a89496412b96af77e838552980092ba6b33723aac', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-btc-vision', file: 'uws_linux_x64_137.node', sha256: '98128405dba2fb608448e921a979530f70c946a2cc9889c15f2fa70c2d00ab05', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-btc-vision', file: 'uws_linux_x64_141.node', sha256: '813d788b347c6fd76b779d8932311ec05a044e612b4b83af220f16e6ea789683', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-uwebsockets', file: 'uws_linux_x64_115.node', sha256: 'f4fa5d7b697529b45ac8aa3d57385d9af51bc1d2b26aa9f5b68ca4361542e665', glibc: [2, 27], holdsUnparsable: true, readsPastPause: false },
  { build: 'uws-build-uwebsockets', file: 'uws_linux_x64_127.node', sha256: '78e38a9a163b1cf33ce539619e5908111dea95a12e7943d95fbcdd524879caa8', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-uwebsockets', file: 'uws_linux_x64_137.node', sha256: '3b549c14e01d9d1faf234cdf4b6f0fb08158605e3692cd0eb1b905e327bd3449', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-uwebsockets', file: 'uws_linux_x64_141.node', sha256: 'd22bae7642b872152cd0eeb682c6c2ffd186e91af8cf18cdf98be984a6549d49', glibc: [2, 38], holdsUnparsable: false, readsPastPause: true },
  { build: 'uws-build-trufflesuite', file: 'binaries/uws_linux_x64_115.node', sha256: 'f158fb441f7e2e37b3ab9a56782fe37f4c0d33b5cd32e96ee5c0120ce7db7ced', glibc: [2, 27], holdsUnparsable: true, readsPastPause: false },
]

/** The recorded binary with this sha256, or undefined. */
export function knownBinary(sha256: string): KnownBinary | undefined {
  return KNOWN_BINARIES.find((b) => b.sha256 === sha256)
}

/** The running C library's version as [major, minor] (glibc's, from process.report), or null off glibc. */
export function runningGlibc(): [number, number] | null {
  const header = (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header
  const m = /^(\d+)\.(\d+)/.exec(header?.glibcVersionRuntime ?? '')
  return m === null ? null : [Number(m[1]), Number(m[2])]
}
