/**
 * Claude Code (`claude -p`, default tools) as a user runs it against the router: ANTHROPIC_BASE_URL at the
 * router, an sk- key, its own HOME, its traffic to its vendor switched off. Against an Anthropic-native model
 * (the bytes relayed) and an OpenAI-only one (translated): it prints the model's answer and exits 0, within
 * a bounded number of model requests.
 */
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { assertAgentRun, clientBin, clientsInstalled, clientStack, MODELS, runCli } from './harness.js'

// One prompt is a handful of model requests (a tool call, its sub-agent's, the answers); far fewer than this.
const RUN_MS = 90_000

t.setTimeout(4 * RUN_MS)

/** The environment Claude Code gets: the router, the key, a HOME of its own, and no vendor traffic. */
function claudeEnv(home: string, url: string, key: string, model: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: url,
    ANTHROPIC_API_KEY: key,
    // Every role Claude Code picks a model for (main loop, background work, sub-agents) on the router's model.
    ANTHROPIC_MODEL: model,
    ANTHROPIC_DEFAULT_OPUS_MODEL: model,
    ANTHROPIC_DEFAULT_SONNET_MODEL: model,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
    CLAUDE_CODE_SUBAGENT_MODEL: model,
    DISABLE_TELEMETRY: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
  }
}

for (const [which, model] of [['native Anthropic', MODELS.anthropic], ['translated to chat', MODELS.chat]] as const) {
  t.test(`claude -p against a ${which} model: the answer printed, exit 0, bounded requests`, async (t) => {
    if (!clientsInstalled(t, ['@anthropic-ai/claude-code'])) return
    const stack = await clientStack(t)
    const dir = t.testdir()
    const home = join(dir, 'home')
    const work = join(dir, 'work')
    mkdirSync(home)
    mkdirSync(work)
    const run = await runCli(t, clientBin('claude'), ['-p', 'What is the weather like in Paris? Answer in one sentence.'], {
      env: claudeEnv(home, stack.url, stack.key, model),
      cwd: work,
      timeoutMs: RUN_MS,
    })
    assertAgentRun(t, run, stack)
  })
}
