/**
 * The Codex CLI (`codex exec`, default tools) as a user runs it against the router: a CODEX_HOME of its own
 * whose config.toml names the router as a Responses provider (README "Use it with"), an sk- key from the
 * environment, its analytics and update check off. Against a Responses-native model (relayed) and an
 * OpenAI-chat-only one (translated): it prints the model's answer and exits 0, within a bounded number of
 * model requests.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { assertAgentRun, clientBin, clientsInstalled, clientStack, MODELS, runCli } from './harness.js'

const RUN_MS = 90_000

t.setTimeout(4 * RUN_MS)

/** config.toml as README shows it; retries off so a refused request fails the run at once instead of backing off. */
function codexConfig(url: string, model: string): string {
  return [
    `model = "${model}"`,
    'model_provider = "svc-router"',
    '',
    '[model_providers.svc-router]',
    'name = "svc-router"',
    `base_url = "${url}/v1"`,
    'env_key = "SVC_ROUTER_API_KEY"',
    'wire_api = "responses"',
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
  ].join('\n')
}

for (const [which, model] of [['native Responses', MODELS.responses], ['translated to chat', MODELS.chat]] as const) {
  t.test(`codex exec against a ${which} model: the answer printed, exit 0, bounded requests`, async (t) => {
    if (!clientsInstalled(t, ['@openai/codex'])) return
    const stack = await clientStack(t)
    const dir = t.testdir()
    const home = join(dir, 'home')
    const codexHome = join(dir, 'codex-home')
    const work = join(dir, 'work')
    for (const d of [home, codexHome, work]) mkdirSync(d)
    writeFileSync(join(codexHome, 'config.toml'), codexConfig(stack.url, model))
    const args = ['exec', '--skip-git-repo-check', '-c', 'analytics.enabled=false', '-c', 'check_for_update_on_startup=false', 'What is the weather like in Paris? Answer in one sentence.']
    const run = await runCli(t, clientBin('codex'), args, {
      env: { PATH: process.env.PATH, HOME: home, CODEX_HOME: codexHome, SVC_ROUTER_API_KEY: stack.key },
      cwd: work,
      timeoutMs: RUN_MS,
    })
    assertAgentRun(t, run, stack)
  })
}
