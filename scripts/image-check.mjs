#!/usr/bin/env node
// The sidecar image, run as CI runs it (README "Deploy as a sidecar"): `buildah run --isolation chroot` of the
// image's own entrypoint and user, its config dir and volume mounted from host folders, against a simulated
// provider on loopback. Prints TAP lines and closes with `image: N passed, N failed`; exits 1 on any failure.
// Usage: node scripts/image-check.mjs [localhost/svc-router:<version>]   (after `npm run image`)
import { spawn, execFileSync } from 'node:child_process'
import { existsSync, readdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, chownSync, chmodSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer } from 'node:net'
import { startSimulator } from '../dist/src/simulator/simulator.js'

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
const tag = process.argv[2] ?? `localhost/svc-router:${pkg.version}`
const UID = 10001
let n = 0
let failed = 0
function check(ok, name, detail) {
  n++
  if (!ok) failed++
  console.log(`${ok ? 'ok' : 'not ok'} ${n} - ${name}`)
  if (!ok && detail !== undefined) console.log(`  # ${String(detail).split('\n').join('\n  # ')}`)
  return ok
}
const buildah = (...args) => execFileSync('buildah', args, { encoding: 'utf8' }).trim()
const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const work = mkdtempSync(join(tmpdir(), 'svc-image-'))
let ctr = null
let child = null
let sim = null
try {
  // The image's configuration: what `podman run` / Kubernetes would take from it.
  const config = JSON.parse(buildah('inspect', '--type', 'image', tag)).OCIv1.config
  check(JSON.stringify(config.Entrypoint) === JSON.stringify(['/usr/local/bin/svc-router', 'serve']), 'ENTRYPOINT is svc-router serve', config.Entrypoint)
  check(config.User === `${UID}:${UID}`, 'runs as a non-root user', config.User)
  check(config.ExposedPorts !== undefined && '8080/tcp' in config.ExposedPorts, 'port 8080 exposed', JSON.stringify(config.ExposedPorts))
  check(config.Volumes !== undefined && '/var/lib/svc-router' in config.Volumes, 'volume /var/lib/svc-router', JSON.stringify(config.Volumes))

  ctr = buildah('from', '--pull-never', tag)
  const mnt = buildah('mount', ctr)
  const absent = ['usr/bin/gcc', 'usr/bin/cc', 'usr/bin/g++', 'usr/bin/make', 'usr/local/bin/npm', 'opt/svc-router/dist/test',
    'opt/svc-router/node_modules/tap', 'opt/svc-router/node_modules/typescript', 'root/.npm', 'usr/share/doc']
  const present = absent.filter((p) => existsSync(join(mnt, p)))
  check(present.length === 0, 'no compiler, npm, npm cache, test files or dev dependencies in the image', present.join(', '))
  check(existsSync(join(mnt, 'etc/svc-router/config.yaml')), 'the demo config at /etc/svc-router/config.yaml')
  buildah('umount', ctr)

  // A simulated provider on the host's loopback; the router inside reaches it there.
  sim = await startSimulator({ host: '127.0.0.1', port: 0, completionTokens: 5 })
  const port = await freePort()
  const etc = join(work, 'etc')
  const state = join(work, 'state')
  mkdirSync(etc)
  mkdirSync(state)
  chownSync(state, UID, UID)
  chmodSync(state, 0o700)
  writeFileSync(join(etc, 'config.yaml'), [
    'server:   { host: 0.0.0.0, port: 8080 }',
    'registry: { source: file, path: providers.yaml }',
    'store:    { kind: sqlite, path: /var/lib/svc-router/svc.db }',
    'dev:      { bootstrap: true }',
    '',
  ].join('\n'))
  writeFileSync(join(etc, 'providers.yaml'), [
    'providers:',
    '  - address: "0x1111111111111111111111111111111111111111"',
    `    url: "${sim.url}"`,
    '    models:',
    '      - id: qwen-2.5-7b-instruct',
    '        type: chatbot',
    '        price: { prompt: 0.20, completion: 0.60 }',
    '',
  ].join('\n'))

  // buildah run mounts a scratch copy for each volume the image declares, in no fixed order with --volume's bind
  // mounts: the working container drops the declaration so the host folder is the one mounted there (podman and
  // docker mount a named volume over the declared one by themselves).
  buildah('config', '--volume', '/var/lib/svc-router-', ctr)
  // The image's entrypoint, as its configuration names it; SVC_SERVER_PORT overrides the file's 8080 here,
  // since a chroot shares the host's network.
  child = spawn('buildah', ['run', '--isolation', 'chroot', '--env', `SVC_SERVER_PORT=${port}`,
    '--volume', `${etc}:/etc/svc-router:ro`, '--volume', `${state}:/var/lib/svc-router`,
    ctr, '--', ...config.Entrypoint], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  child.stderr.on('data', (d) => { out += d })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  let key = null
  for (let i = 0; i < 600 && child.exitCode === null; i++) {
    key = /sk- key \(inference\):\s+(sk-\S+)/.exec(out)?.[1] ?? null
    if (key !== null && out.includes('svc-router listening')) break
    await sleep(100)
  }
  if (!check(key !== null, 'the router starts in the image and prints the dev keys', out.slice(-3000))) throw new Error('not started')
  const mgmtKey = /mk- key \(account and keys, all scopes\):\s+(mk-\S+)/.exec(out)?.[1]
  const base = `http://127.0.0.1:${port}`

  let ready = null
  for (let i = 0; i < 100; i++) {
    ready = await fetch(`${base}/readyz`).then((r) => r.status, () => null)
    if (ready === 200) break
    await sleep(100)
  }
  check(ready === 200, '/readyz is ready', ready)

  // The router's process, seen from the host (chroot isolation shares the PID namespace): buildah's descendant.
  const procs = execFileSync('ps', ['-e', '-o', 'pid=,ppid=,uid=,args='], { encoding: 'utf8' }).split('\n')
    .map((l) => l.trim().split(/\s+/)).filter((f) => f.length >= 4)
  const tree = new Set([child.pid])
  for (let grew = true; grew;) {
    grew = false
    for (const [pid, ppid] of procs) if (tree.has(Number(ppid)) && !tree.has(Number(pid))) { tree.add(Number(pid)); grew = true }
  }
  const router = procs.filter(([pid, , , ...args]) => tree.has(Number(pid)) && args.join(' ').includes('/opt/svc-router/dist/src/cli.js'))
  check(router.length === 1 && Number(router[0][2]) === UID, 'the router process runs as uid 10001', JSON.stringify(router))

  if (router.length === 1) {
    const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${router[0][0]}/status`, 'utf8'))?.[1]
    console.log(`# the router's RSS idle, once ready: ${rss === undefined ? 'unknown' : (Number(rss) / 1024).toFixed(1)} MiB`)
  }

  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen-2.5-7b-instruct', messages: [{ role: 'user', content: 'hi' }] }),
  })
  const body = await res.json().catch(() => null)
  check(res.status === 200 && typeof body?.choices?.[0]?.message?.content === 'string', 'a chat request is answered', `${res.status} ${JSON.stringify(body)}`)
  // The dev account starts with 10 USD: a billed request leaves less.
  const balance = await fetch(`${base}/v1/account/balance`, { headers: { authorization: `Bearer ${mgmtKey}` } }).then((r) => r.json(), () => null)
  const total = Number(balance?.total_balance ?? NaN)
  check(total < 10 && total > 9, 'the chat request is billed against the account', JSON.stringify(balance))

  // SIGTERM to the router itself, as a container runtime sends it to the entrypoint (buildah run does not relay it).
  if (router.length === 1) process.kill(Number(router[0][0]), 'SIGTERM')
  const end = await Promise.race([exited, sleep(30_000).then(() => null)])
  check(end !== null && end.code === 0, 'SIGTERM drains and exits 0', `${JSON.stringify(end)}\n${out.slice(-2000)}`)
  check(/drained and closed/.test(out), 'the router logs that it drained and closed', out.slice(-2000))
  child = null

  const db = join(state, 'svc.db')
  const st = existsSync(db) ? statSync(db) : null
  check(st !== null && st.uid === UID, 'the store file lands in the volume, owned by the router user', JSON.stringify({ files: readdirSync(state), uid: st?.uid, size: st?.size }))
} catch (err) {
  check(false, 'the image check ran to its end', err?.stack ?? err)
} finally {
  if (child !== null) child.kill('SIGKILL')
  if (sim !== null) await sim.close()
  if (ctr !== null) try { buildah('rm', ctr) } catch { /* already gone */ }
  rmSync(work, { recursive: true, force: true })
}
console.log(`1..${n}`)
console.log(`image: ${n - failed} passed, ${failed} failed`)
process.exitCode = failed === 0 ? 0 : 1
