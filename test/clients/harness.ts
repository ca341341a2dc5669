/**
 * The real agent clients (test/clients/package.json, pinned) run against the router in front of the
 * simulators. They live in a folder of their own, installed by `npm run clients:install` (and .ci/run), not
 * by the root `npm ci`: the two CLIs are ~660 MB. Without them a test skips locally with that reason, and
 * fails in CI (CI=true), where a skip would hide that nothing ran.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { join } from 'node:path'
import type { Test } from 'tap'
import { killChild } from '../helpers/child.js'
import { addr, startStack, type Stack, type TestModel, type TestProvider } from '../helpers/stack.js'

/** The source folder (tests run from dist/test/clients, the packages are installed beside the sources). */
export const CLIENTS_DIR = fileURLToPath(new URL('../../../test/clients/', import.meta.url))

type TapLike = Test

/** Where each pinned client is, by the name its package.json gives it. */
const PINNED = JSON.parse(readFileSync(join(CLIENTS_DIR, 'package.json'), 'utf8')).dependencies as Record<string, string>

/**
 * True when `packages` are installed at their pinned versions. Otherwise the test is failed (CI) or skipped
 * (locally), with what to run.
 */
export function clientsInstalled(t: TapLike, packages: readonly string[]): boolean {
  // .ci/node-lines runs the suite again under Node 22 and 24 without these packages: the clients are programs of
  // their own, run once against the router on the host's line by .ci/run. (Not an SVC_ name: those are config
  // paths, and a router refuses an unknown one.)
  if (process.env.AGENT_CLIENT_TESTS === 'host-line') {
    t.plan(0, 'the real clients run once, on the host Node line (.ci/run); this line runs the rest of the suite')
    return false
  }
  const missing = packages.filter((name) => {
    const manifest = join(CLIENTS_DIR, 'node_modules', name, 'package.json')
    return !existsSync(manifest) || JSON.parse(readFileSync(manifest, 'utf8')).version !== PINNED[name]
  })
  if (missing.length === 0) return true
  const reason = `the client test packages are not installed (${missing.map((m) => `${m}@${PINNED[m]}`).join(', ')}): run \`npm run clients:install\``
  if (process.env.CI === 'true') t.fail(reason)
  else t.plan(0, reason)
  return false
}

/** An installed client's own launcher, from test/clients/node_modules/.bin. */
export function clientBin(name: 'claude' | 'codex'): string {
  return join(CLIENTS_DIR, 'node_modules', '.bin', name)
}

/** The SDKs (@openai/agents, @langchain/openai, zod), imported as ESM from the clients folder. */
export async function clientSdks(): Promise<any> {
  return import(pathToFileURL(join(CLIENTS_DIR, 'sdks.mjs')).href)
}

// Every model is priced as the demo prices them; none cares which provider it lands on.
const PRICE = { prompt: 0.8, completion: 4 }
const PARAMETERS = ['temperature', 'top_p', 'max_tokens', 'stop', 'tools', 'tool_choice', 'response_format', 'reasoning', 'seed']

/** The models of a client stack: one per wire format a provider speaks natively, one that needs translation. */
export const MODELS = {
  /** Anthropic-native only (as the demo's claude-sim-haiku): /v1/messages relayed, the others translated. */
  anthropic: 'claude-sim-native',
  /** Responses-native and chat: /v1/responses relayed. */
  responses: 'gpt-sim-native',
  /** OpenAI chat only: /v1/messages and /v1/responses are translated to it. */
  chat: 'qwen-sim-chat',
} as const

function model(id: string, formats: string[]): TestModel {
  return { id, formats, context_length: 200_000, max_completion_tokens: 32_000, supported_parameters: PARAMETERS, price: PRICE }
}

/** The router in front of three simulators, one per model of MODELS. */
export async function clientStack(t: TapLike): Promise<Stack> {
  const providers: TestProvider[] = [
    { address: addr('a'), models: [model(MODELS.anthropic, ['anthropic'])] },
    { address: addr('b'), models: [model(MODELS.responses, ['openai', 'responses'])] },
    { address: addr('c'), models: [model(MODELS.chat, ['openai'])] },
  ]
  return startStack(t, providers)
}

/**
 * True when the last request a simulator got sent a tool's result back (a tool_result block, a tool message,
 * a *_call_output item): the run went through a whole tool round trip.
 */
export function sentToolResult(stack: Stack): boolean {
  for (const sim of stack.sims.values()) {
    const body = JSON.stringify(sim.stats.lastBody ?? null)
    if (/"type":"tool_result"|"role":"tool"|"type":"[a-z_]+_call_output"/.test(body)) return true
  }
  return false
}

/** Requests the simulators behind `stack` received so far (the bound a client run is held to). */
export function providerRequests(stack: Stack): number {
  let n = 0
  for (const sim of stack.sims.values()) n += sim.stats.requests
  return n
}

export interface CliRun {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  /** True when the run was ended by its timeout. */
  timedOut: boolean
}

/**
 * Runs a CLI to its end with stdin closed and a time bound; the child (and its process group) is killed at the
 * bound and in teardown, so a hung client never outlives its test.
 */
export function runCli(t: TapLike, command: string, args: readonly string[], options: { env: NodeJS.ProcessEnv; cwd: string; timeoutMs: number }): Promise<CliRun> {
  const child: ChildProcess = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  t.teardown(() => killGroup(child))
  let stdout = ''
  let stderr = ''
  child.stdout!.on('data', (b: Buffer) => (stdout += b.toString()))
  child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()))
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    void killGroup(child)
  }, options.timeoutMs)
  return new Promise((resolve) => {
    child.once('error', (err) => {
      clearTimeout(timer)
      resolve({ code: null, signal: null, stdout, stderr: stderr + String(err), timedOut })
    })
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      // The CLI is gone; what it started (a shell of a tool call, a sub-agent) goes with its group.
      void killGroup(child)
      resolve({ code, signal, stdout, stderr, timedOut })
    })
  })
}

function killGroup(child: ChildProcess): Promise<void> {
  if (child.pid !== undefined) {
    try {
      process.kill(-child.pid, 'SIGKILL')
    } catch {
      // the group is already gone
    }
  }
  return killChild(child)
}

/** Model requests a coding-agent CLI run may make at most: one tool round trip, with room for a retry or two. */
export const MAX_CLI_REQUESTS = 8

/**
 * What a coding-agent CLI run (`claude -p`, `codex exec`) must show: exit 0, the model's answer printed, one tool
 * round trip, and 2 to MAX_CLI_REQUESTS model requests in all.
 */
export function assertAgentRun(t: TapLike, run: CliRun, stack: Stack): void {
  const requests = providerRequests(stack)
  t.equal(run.code, 0, 'exit 0', describeRun(run))
  t.match(run.stdout, /quick brown fox/, "the model's answer printed", describeRun(run))
  t.ok(requests >= 2 && requests <= MAX_CLI_REQUESTS, `${requests} model requests (2 to ${MAX_CLI_REQUESTS})`)
  t.ok(sentToolResult(stack), 'a default tool was called and its result sent back before the answer')
}

/** A short description of a run, for an assertion's message. */
export function describeRun(run: CliRun): Record<string, unknown> {
  return { code: run.code, signal: run.signal, timedOut: run.timedOut, stdout: run.stdout.slice(-2000), stderr: run.stderr.slice(-4000) }
}
