/**
 * The choice of uWS build (src/server/uws-build.ts): against fake candidate lists in a test folder (first that
 * loads wins, every failure named when none does), against the real pinned builds (the one loaded here is the
 * first whose binary suits this Node and glibc, and every pinned binary is the one recorded), and as an
 * operator sees it (--version, svc_build_info).
 */
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { request } from 'undici'
import { MAX_HEADER_BYTES, UWS_HEAD_LIMIT_FACTOR } from '../../src/server/app.js'
import {
  NoUwsBuildError,
  packageRoot,
  pauseWarning,
  readsPastPause,
  selectUwsBuild,
  tcpReceiveBufferMax,
  UWS_CANDIDATES,
  UWS_RECV_BUFFER_BYTES,
  uwsBuild,
  type UwsCandidate,
} from '../../src/server/uws-build.js'
import { spawnRouter } from '../helpers/spawn-router.js'
import { addr, startStack } from '../helpers/stack.js'
import { KNOWN_BINARIES, knownBinary, runningGlibc } from '../helpers/uws-builds.js'
import { eventually } from '../helpers/wait.js'

const HERE = dirname(fileURLToPath(import.meta.url))
const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url))
const ABI = process.versions.modules
const BINARY = `uws_${process.platform}_${process.arch}_${ABI}.node`

/** The real uWS binary this process loads, with the head limit every listen here asks: fake packages that must load link to it. */
const real = uwsBuild({ maxHeadBytes: UWS_HEAD_LIMIT_FACTOR * MAX_HEADER_BYTES })

interface FakePackage {
  readonly name: string
  /** Where the package's main sits (a subfolder, as trufflesuite's src/uws.js). */
  readonly main?: string
  /** The binary's folder inside the package. */
  readonly binaryDir?: string
  /** What the binary for this ABI is: absent, garbage bytes, or a link to a real file. */
  readonly binary: 'none' | 'garbage' | { link: string }
  /** A binary for another ABI only. */
  readonly otherAbi?: boolean
}

/** Writes fake packages under `dir`/node_modules; returns their candidates, in order. */
function fakePackages(dir: string, packages: readonly FakePackage[]): UwsCandidate[] {
  for (const p of packages) {
    const root = join(dir, 'node_modules', p.name)
    const main = p.main ?? 'index.js'
    mkdirSync(dirname(join(root, main)), { recursive: true })
    writeFileSync(join(root, 'package.json'), JSON.stringify({ name: p.name, version: '1.2.3', main }))
    writeFileSync(join(root, main), 'module.exports = {}\n')
    const binDir = join(root, p.binaryDir ?? '.')
    mkdirSync(binDir, { recursive: true })
    const file = join(binDir, p.otherAbi === true ? `uws_${process.platform}_${process.arch}_1.node` : BINARY)
    if (p.binary === 'garbage') writeFileSync(file, 'not an ELF file\n')
    else if (p.binary !== 'none') symlinkSync(p.binary.link, file)
  }
  return packages.map((p) => ({ name: p.name, source: `fake ${p.name}`, binaryDir: p.binaryDir ?? '.' }))
}

const target = (from: string) => ({ platform: process.platform, arch: process.arch, abi: ABI, from })

/** A native module that loads but is not uWS: better-sqlite3's. */
function notUwsBinary(): string {
  const pkg = packageRoot('better-sqlite3', HERE)
  if (pkg === null) throw new Error('better-sqlite3 is not installed')
  return join(pkg.root, 'build', 'Release', 'better_sqlite3.node')
}

t.test('the first candidate that loads wins; the ones before it are skipped with their reasons', async (t) => {
  const dir = t.testdir()
  const candidates = fakePackages(dir, [
    { name: 'fake-other-abi', binary: 'none', otherAbi: true },
    { name: 'fake-garbage', binary: 'garbage' },
    { name: 'fake-not-uws', binary: { link: notUwsBinary() } },
    { name: 'fake-good', main: 'src/uws.js', binaryDir: 'binaries', binary: { link: real.file } },
    { name: 'fake-also-good', binary: { link: real.file } },
  ])
  candidates.unshift({ name: 'fake-missing', source: 'fake fake-missing', binaryDir: '.' })
  const build = selectUwsBuild(candidates, target(dir))
  t.equal(build.candidate.name, 'fake-good', 'the first that loads, not a later one')
  t.equal(build.version, '1.2.3', "the version is the package's own, found above its main's subfolder")
  t.equal(build.file, join(dir, 'node_modules', 'fake-good', 'binaries', BINARY))
  t.equal(build.sha256, createHash('sha256').update(readFileSync(real.file)).digest('hex'))
  t.equal(typeof build.uws.App, 'function')
  t.equal(build.skipped.length, 4)
  t.match(build.skipped[0], /^fake-missing \(fake fake-missing\): not installed$/)
  t.match(build.skipped[1], new RegExp(`^fake-other-abi 1\\.2\\.3 \\(fake fake-other-abi\\): no binary for ${process.platform}-${process.arch} ABI ${ABI}$`))
  t.match(build.skipped[2], /^fake-garbage 1\.2\.3 \(fake fake-garbage\): .*(invalid ELF header|too short|file)/)
  t.match(build.skipped[3], /^fake-not-uws 1\.2\.3 \(fake fake-not-uws\): .* loaded but is not a uWS build \(no App\)$/)
})

t.test('when none loads, one error names every candidate and why it failed', async (t) => {
  const dir = t.testdir()
  const candidates = fakePackages(dir, [
    { name: 'fake-other-abi', binary: 'none', otherAbi: true },
    { name: 'fake-garbage', binary: 'garbage' },
    { name: 'fake-not-uws', binary: { link: notUwsBinary() } },
  ])
  candidates.push({ name: 'fake-missing', source: 'fake fake-missing', binaryDir: '.' })
  let caught: unknown
  try {
    selectUwsBuild(candidates, target(dir))
  } catch (err) {
    caught = err
  }
  t.ok(caught instanceof NoUwsBuildError, 'a NoUwsBuildError')
  const lines = String((caught as Error).message).split('\n')
  t.match(lines[0], new RegExp(`^no build of uWebSockets\\.js loads on Node ${process.version.replace(/\./g, '\\.')} \\(${process.platform}-${process.arch}, ABI ${ABI}\\); tried, in order:$`))
  t.match(lines[1], /^ {2}- fake-other-abi 1\.2\.3 .*: no binary for/)
  t.match(lines[2], /^ {2}- fake-garbage 1\.2\.3 .*: /)
  t.match(lines[3], /^ {2}- fake-not-uws 1\.2\.3 .*: .* loaded but is not a uWS build/)
  t.match(lines[4], /^ {2}- fake-missing \(fake fake-missing\): not installed$/)
  t.match(lines[5], /README "Supported platforms"/)
  t.equal(lines.length, 6)

  t.throws(() => selectUwsBuild([], target(dir)), NoUwsBuildError, 'an empty list is an error too, not a crash')
  // A Node ABI no build ships: every real candidate says so (or that it is not installed).
  try {
    selectUwsBuild(UWS_CANDIDATES, { ...target(HERE), abi: '9999' })
    t.fail('ABI 9999 loaded')
  } catch (err) {
    const message = (err as Error).message
    for (const c of UWS_CANDIDATES) t.match(message, c.name, `${c.name} is named`)
    t.match(message, 'uws-build-btc-vision 20.57.0 (npm @btc-vision/uwebsockets.js@20.57.0, uWebSockets.js v20.57.0): no binary for')
  }
})

t.test('every pinned Linux x64 binary is byte for byte the one recorded', async (t) => {
  for (const known of KNOWN_BINARIES) {
    const pkg = packageRoot(known.build, HERE)
    if (pkg === null) {
      t.fail(`${known.build} is not installed`)
      continue
    }
    const sha256 = createHash('sha256').update(readFileSync(join(pkg.root, known.file))).digest('hex')
    t.equal(sha256, known.sha256, `${known.build}/${known.file}`)
  }
  const pinned = JSON.parse(readFileSync(join(HERE, '../../../package.json'), 'utf8')) as { dependencies: Record<string, string> }
  for (const c of UWS_CANDIDATES.slice(1)) t.match(pinned.dependencies[c.name], /^npm:[^@]*@?[^@]+@\d+\.\d+\.\d+(-[\w.]+)?$/, `${c.name} is pinned to one version`)
  t.equal(pinned.dependencies['uWebSockets.js'], undefined, 'uWebSockets.js is left to the operator')
})

t.test('the build loaded here is a recorded binary, the first pinned one this Node and glibc can run', async (t) => {
  const known = knownBinary(real.sha256)
  t.ok(known, `the loaded ${real.file} (sha256 ${real.sha256}) is recorded in test/helpers/uws-builds.ts`)
  t.not(real.candidate.name, 'uWebSockets.js', 'CI runs the pinned builds')
  const glibc = runningGlibc()
  if (process.platform !== 'linux' || process.arch !== 'x64' || glibc === null) return
  const runs = (b: (typeof KNOWN_BINARIES)[number]) => b.glibc[0] < glibc[0] || (b.glibc[0] === glibc[0] && b.glibc[1] <= glibc[1])
  const expected = UWS_CANDIDATES.map((c) => KNOWN_BINARIES.find((b) => b.build === c.name && b.file.endsWith(BINARY) && runs(b))).find(
    (b) => b !== undefined,
  )
  t.equal(real.candidate.name, expected?.build, `on glibc ${glibc.join('.')} and ABI ${ABI}`)
  t.equal(real.file.endsWith(join(expected?.file ?? '?')), true, real.file)
  t.same(
    real.skipped.map((line) => line.split(' ')[0]),
    UWS_CANDIDATES.slice(0, UWS_CANDIDATES.findIndex((c) => c.name === real.candidate.name)).map((c) => c.name),
    'every candidate before it was tried and skipped',
  )
})

t.test('whether a build reads a request body past pause() is as recorded for each pinned binary', async (t) => {
  for (const known of KNOWN_BINARIES) {
    const candidate = UWS_CANDIDATES.find((c) => c.name === known.build)!
    const pkg = packageRoot(known.build, HERE)
    if (pkg === null) continue
    t.equal(readsPastPause({ candidate, file: join(pkg.root, known.file) }), known.readsPastPause, `${known.build}/${known.file}`)
  }
  const official = UWS_CANDIDATES[0]!
  t.equal(readsPastPause({ candidate: official, file: `/x/uws_linux_x64_${ABI}.node` }), true, 'an official release is taken to have the current core')
})

t.test('the start warning: where the build reads past pause() and the kernel lets a read fill its buffer', async (t) => {
  const holds = { candidate: { name: 'old', source: 'old core', binaryDir: '.', pauseHoldsOn: ['115'] }, file: '/x/uws_linux_x64_115.node' }
  const reads = { candidate: holds.candidate, file: '/x/uws_linux_x64_137.node' }
  t.equal(pauseWarning(holds, 32 * 1024 * 1024), null, 'a core that honours pause: nothing to say')
  t.equal(pauseWarning(reads, UWS_RECV_BUFFER_BYTES - 1), null, 'a receive buffer a read can never fill: pause holds')
  t.match(pauseWarning(reads, UWS_RECV_BUFFER_BYTES), /keeps reading a request body after pause\(\).*may grow to 524288 bytes \(net\.ipv4\.tcp_rmem\).*below 524288/)
  t.match(pauseWarning(reads, null), /keeps reading .* may grow: /, 'unknown (no /proc): said, without a number')
  t.equal(tcpReceiveBufferMax('4096\t131072\t6291456\n'), 6291456)
  t.equal(tcpReceiveBufferMax('4096 131072'), null)
  t.equal(tcpReceiveBufferMax('garbage'), null)
  if (process.platform === 'linux') t.ok((tcpReceiveBufferMax() ?? 0) > 0, 'read from /proc here')
})

t.test('a core recorded as honouring pause() reads at most one receive buffer per event loop turn', async (t) => {
  // The property pause() relies on: a core that reads again within the same event whenever a read filled its
  // buffer (readsPastPause) goes on reading a paused socket. A client in another process sends as fast as it can.
  const known = knownBinary(real.sha256)
  let turn = 0
  let ticking = true
  const tick = (): void => {
    turn++
    if (ticking) setImmediate(tick)
  }
  setImmediate(tick)
  let lastTurn = -1
  let inTurn = 0
  let most = 0
  const total = 64 * 1024 * 1024
  const app = real.uws.App()
  let port = 0
  const done = new Promise<void>((resolve) => {
    app.post('/*', (res) => {
      res.onAborted(() => resolve())
      res.onData((chunk, last) => {
        inTurn = turn === lastTurn ? inTurn + chunk.byteLength : chunk.byteLength
        lastTurn = turn
        most = Math.max(most, inTurn)
        if (last) {
          res.end('ok')
          resolve()
        }
      })
    })
  })
  let listenSocket: unknown = null
  app.listen('127.0.0.1', 0, (ls) => {
    listenSocket = ls
    if (ls !== false) port = real.uws.us_socket_local_port(ls)
  })
  t.teardown(() => {
    ticking = false
    if (listenSocket !== null && listenSocket !== false) real.uws.us_listen_socket_close(listenSocket as never)
  })
  const sender = `const s = require('net').connect(${port}, '127.0.0.1', () => {
    s.write('POST /up HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: ${total}\\r\\n\\r\\n')
    const chunk = Buffer.alloc(1024 * 1024, 7); let n = 0
    const pump = () => { while (n < ${total / (1024 * 1024)}) { n++; if (!s.write(chunk)) return s.once('drain', pump) } }
    pump()
  }); s.on('data', () => s.destroy())`
  const child = spawn(process.execPath, ['-e', sender], { stdio: 'ignore' })
  await done
  await new Promise((resolve) => child.on('close', resolve))
  t.comment(`${real.candidate.name} ${real.file}: at most ${(most / 1048576).toFixed(2)} MiB read in one turn of a ${total / 1048576} MiB upload`)
  if (known?.readsPastPause === false) t.ok(most <= UWS_RECV_BUFFER_BYTES, `one receive buffer at most (${most} bytes)`)
  else t.pass('a core that reads past pause() may read more in one turn; README "Known issues"')
})

t.test('the router warns at start exactly where an upload can outrun pause()', async (t) => {
  const expected = pauseWarning(real, tcpReceiveBufferMax())
  const provider = { address: addr('a'), url: 'http://127.0.0.1:9', models: [{ id: 'm-chat', price: { prompt: 0.1, completion: 0.1 } }] }
  const router = await spawnRouter(t, [provider], { health: { probes: false }, log: { level: 'warn', format: 'json' } }, { captureStderr: true })
  const warned = () => router.stderr().includes('keeps reading a request body after pause()')
  if (expected === null) {
    // Logged before the router listens: by its listening line it would be out.
    t.notOk(warned(), `no warning with ${real.candidate.name} ${real.file}`)
    return
  }
  t.ok(await eventually(warned), 'the warning is logged')
  const line = router
    .stderr()
    .split('\n')
    .find((l) => l.includes('keeps reading a request body after pause()'))
  t.match(JSON.parse(line!), { level: 'warn', build: real.candidate.name, file: real.file, tcp_rmem_max: tcpReceiveBufferMax(), msg: expected })
})

t.test('a second listen in one process cannot change the head limit uWS was loaded with', async (t) => {
  t.throws(() => uwsBuild({ maxHeadBytes: 12345 }), /loaded with a head limit of 8192 bytes; it cannot take 12345/)
  t.equal(uwsBuild({ maxHeadBytes: 8192 }), real, 'the same limit is the same build')
  t.equal(uwsBuild(), real, 'no limit asked: the build as loaded')
})

t.test('svc-router --version prints the build, its file and sha256', async (t) => {
  const child = spawn(process.execPath, [CLI, '--version'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', (b: Buffer) => (out += b.toString()))
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  t.equal(code, 0)
  const pkg = JSON.parse(readFileSync(join(HERE, '../../../package.json'), 'utf8')) as { version: string }
  const lines = out.trim().split('\n')
  t.equal(lines[0], `svc-router ${pkg.version}`)
  t.equal(lines[1], `node ${process.version} (ABI ${ABI}, ${process.platform}-${process.arch})`)
  t.equal(lines[2], `uWS build ${real.candidate.name} ${real.version} (${real.candidate.source}), ${real.file}, sha256 ${real.sha256}`)
})

t.test('svc_build_info carries Node, the uWS build and its sha256', async (t) => {
  const stack = await startStack(t, [{ address: addr('f'), models: [{ id: 'm-chat' }] }])
  const res = await request(stack.url + '/metrics')
  const text = await res.body.text()
  t.equal(res.statusCode, 200)
  const line = text.split('\n').find((l) => l.startsWith('svc_build_info{'))
  t.equal(
    line,
    `svc_build_info{node="${process.version}",abi="${ABI}",uws_build="${real.candidate.name}",uws_version="${real.version}",uws_sha256="${real.sha256}"} 1`,
  )
})

// createRequire is what selectUwsBuild resolves with: the fake packages above are found from their folder only.
t.test('a candidate is looked up from the given folder, not from wherever the test runs', async (t) => {
  const dir = t.testdir()
  fakePackages(dir, [{ name: 'fake-good', binary: { link: real.file } }])
  t.throws(() => createRequire(join(HERE, 'x.js')).resolve('fake-good'))
  t.equal(selectUwsBuild([{ name: 'fake-good', source: 'fake', binaryDir: '.' }], target(dir)).candidate.name, 'fake-good')
})
