import t from 'tap'
import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  RegistryError,
  loadRegistryFile,
  parseRegistry,
  watchRegistryFile,
  type RegistryWatcher,
} from '../../src/registry/file-source.js'
import type { RegistrySnapshot } from '../../src/registry/types.js'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

// Compiled to dist/test/registry/: the repo root is three levels up.
const DEMO = fileURLToPath(new URL('../../../config/providers.yaml', import.meta.url))

const A1 = '0x1111111111111111111111111111111111111111'
const A2 = '0x2222222222222222222222222222222222222222'

/** A registry with one provider whose first model is `model` (YAML flow text). */
function oneModel(model: string, provider = ''): string {
  return `providers:\n  - { address: "${A1}", url: "http://127.0.0.1:9001", models: [${model}]${provider} }\n`
}

const CHAT = '{ id: m, price: { prompt: 0.1, completion: 0.3 } }'

/** The problems of the RegistryError that parsing `text` throws. */
function problemsOf(t: Test, text: string): readonly string[] {
  try {
    parseRegistry(text, 1, 'test.yaml')
  } catch (err) {
    t.type(err, RegistryError)
    const problems = (err as RegistryError).problems
    for (const p of problems) t.match((err as Error).message, p)
    return problems
  }
  t.fail('expected a RegistryError')
  return []
}

t.test('the demo providers.yaml parses', async (t) => {
  const snapshot = loadRegistryFile(DEMO, 7)
  t.equal(snapshot.version, 7)
  t.equal(snapshot.providers.length, 4)
  t.strictSame(
    snapshot.providers.map((p) => [p.address.slice(0, 6), p.url, p.trust_mode, p.verifiability]),
    [
      ['0x1111', 'http://127.0.0.1:9101', 'private', 'TeeML'],
      ['0x2222', 'http://127.0.0.1:9102', 'verified', 'TeeTLS'],
      ['0x3333', 'http://127.0.0.1:9103', 'standard', ''],
      ['0x4444', 'http://127.0.0.1:9104', 'standard', ''],
    ],
  )
  for (const p of snapshot.providers) t.not(p.simulate, null, `${p.address} is simulated`)

  const qwen = snapshot.providers.map((p) => ({ p, m: p.models.find((m) => m.id === 'qwen-2.5-7b-instruct') }))
  t.ok(qwen.every(({ m }) => m !== undefined), 'qwen on every provider')
  const cheapest = [...qwen].sort((a, b) => Number(a.m!.price.prompt) - Number(b.m!.price.prompt))[0]!.p
  const fastest = [...qwen].sort((a, b) => a.p.simulate!.ttft_ms - b.p.simulate!.ttft_ms)[0]!.p
  t.not(cheapest.address, fastest.address, 'sort by price and by latency pick different providers')
  t.ok(qwen.some(({ m }) => m!.max_completion_tokens === null), 'one provider does not report max_completion_tokens')
  t.equal(new Set(qwen.map(({ m }) => m!.max_completion_tokens)).size, 4)
  t.equal(new Set(qwen.map(({ m }) => m!.supported_parameters.join())).size > 1, true)

  const llama = snapshot.providers.flatMap((p) => p.models.filter((m) => m.id === 'llama-3.3-70b-instruct'))
  t.equal(llama.length, 2)
  t.ok(llama.some((m) => m.formats.includes('anthropic')))
  t.ok(llama.some((m) => m.formats.includes('responses')), 'npm start shows /v1/responses native and translated')
  t.ok(llama.some((m) => !m.formats.includes('responses')))
  const types = snapshot.providers.flatMap((p) => p.models.map((m) => `${m.id}:${m.type}`))
  t.ok(types.includes('flux-schnell:text-to-image'))
  t.ok(types.includes('whisper-large-v3:speech-to-text'))
})

t.test('defaults are applied and values normalised', async (t) => {
  const text = `providers:
  - address: "0xABCDEFabcdef0000000000000000000000000001"
    url: "https://Provider.Example:443/api/v1/"
    models:
      - id: chat
        price: { prompt: 0.10, completion: "0.30" }
      - id: img
        type: text-to-image
        price: { image: 0.003 }
      - id: stt
        type: speech-to-text
        price: { audio_second: 1e-4 }
    simulate: {}
  - address: "${A2}"
    url: "http://127.0.0.1:9002/"
    trust_mode: private
    verifiability: TeeML
    tee_type: Intel TDX
    models:
      - id: chat
        formats: [anthropic]
        context_length: 8192
        max_completion_tokens: 1024
        supported_parameters: [tools]
        price: { prompt: 1e-9, completion: 0 }
    simulate: { ttft_ms: 5 }
`
  const snapshot = parseRegistry(text, 3)
  const [p1, p2] = snapshot.providers as [RegistrySnapshot['providers'][0], RegistrySnapshot['providers'][0]]
  t.strictSame(p1, {
    address: '0xabcdefabcdef0000000000000000000000000001',
    url: 'https://provider.example/api',
    api_path: '/v1',
    trust_mode: 'standard',
    verifiability: '',
    tee_type: '',
    tee_verifier: '',
    tee_signer: '',
    models: [
      {
        id: 'chat',
        type: 'chatbot',
        formats: ['openai'],
        context_length: null,
        max_completion_tokens: null,
        supported_parameters: [],
        price: { prompt: '0.1', completion: '0.30' },
      },
      {
        id: 'img',
        type: 'text-to-image',
        formats: [],
        context_length: null,
        max_completion_tokens: null,
        supported_parameters: [],
        price: { image: '0.003' },
      },
      {
        id: 'stt',
        type: 'speech-to-text',
        formats: [],
        context_length: null,
        max_completion_tokens: null,
        supported_parameters: [],
        price: { audio_second: '0.0001' },
      },
    ],
    simulate: { ttft_ms: 20, tokens_per_s: 200 },
  })
  t.equal(p2.url, 'http://127.0.0.1:9002')
  t.equal(p2.tee_type, 'Intel TDX')
  t.strictSame(p2.models[0], {
    id: 'chat',
    type: 'chatbot',
    formats: ['anthropic'],
    context_length: 8192,
    max_completion_tokens: 1024,
    supported_parameters: ['tools'],
    price: { prompt: '0.000000001', completion: '0' },
  })
  t.strictSame(p2.simulate, { ttft_ms: 5, tokens_per_s: 200 })
  t.equal(parseRegistry(oneModel(CHAT), 1).providers[0]!.simulate, null, 'no simulate block → null')
  t.strictSame(parseRegistry('providers: []\n', 1).providers, [], 'an empty registry is valid')
})

t.test('the snapshot is deep-frozen', async (t) => {
  const snapshot = loadRegistryFile(DEMO, 1)
  const model = snapshot.providers[0]!.models[0]!
  for (const value of [snapshot, snapshot.providers, snapshot.providers[0], model, model.price, model.formats]) {
    t.ok(Object.isFrozen(value))
  }
  t.throws(() => {
    ;(model.price as { prompt: string }).prompt = '0'
  }, TypeError)
})

t.test('validation', async (t) => {
  t.test('bad address', async (t) => {
    t.strictSame(problemsOf(t, oneModel(CHAT).replace(A1, '0x123')), [
      'providers[0].address: must be 0x followed by 40 hex digits (got "0x123")',
    ])
    t.strictSame(problemsOf(t, oneModel(CHAT).replace(`"${A1}"`, A1)), [
      'providers[0].address: must be a quoted string: YAML reads an unquoted 0x… as a number',
    ])
    t.strictSame(problemsOf(t, oneModel(CHAT).replace(A1, A1.replace(/1$/, 'g'))), [
      `providers[0].address: must be 0x followed by 40 hex digits (got "${A1.replace(/1$/, 'g')}")`,
    ])
  })

  t.test('duplicate address, in any case', async (t) => {
    const text = `providers:
  - { address: "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", url: "http://a", models: [${CHAT}] }
  - { address: "0xAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", url: "http://b", models: [${CHAT}] }
`
    t.strictSame(problemsOf(t, text), ['providers[1].address: duplicate address, also providers[0]'])
  })

  t.test('duplicate model id within a provider', async (t) => {
    t.strictSame(problemsOf(t, oneModel(`${CHAT}, ${CHAT}`)), [
      'providers[0].models[1].id: duplicate model id m, also models[0]',
    ])
  })

  t.test('bad tier and verifiability', async (t) => {
    t.strictSame(problemsOf(t, oneModel(CHAT, ', trust_mode: secret, verifiability: SGX')), [
      'providers[0].trust_mode: must be one of "standard" | "verified" | "private" (got "secret")',
      'providers[0].verifiability: must be one of "TeeML" | "TeeTLS" | "" (got "SGX")',
    ])
  })

  t.test('bad url', async (t) => {
    t.strictSame(problemsOf(t, oneModel(CHAT).replace('http://127.0.0.1:9001', 'ftp://x')), [
      'providers[0].url: must be an http:// or https:// URL (got "ftp://x")',
    ])
    t.strictSame(problemsOf(t, oneModel(CHAT).replace('http://127.0.0.1:9001', 'localhost:9001/x?y')), [
      'providers[0].url: must be an http:// or https:// URL (got "localhost:9001/x?y")',
    ])
    t.strictSame(problemsOf(t, oneModel(CHAT).replace('http://127.0.0.1:9001', 'http://h/?q=1')), [
      'providers[0].url: must not have a query or a fragment (got "http://h/?q=1")',
    ])
  })

  t.test('price that does not belong to the model type', async (t) => {
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: 0.1, completion: 0.3, image: 0.01 } }')), [
      'providers[0].models[0].price.image: not a price of a chatbot model (it takes prompt and completion)',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, type: text-to-image, price: { prompt: 0.1 } }')), [
      'providers[0].models[0].price.image: required for a text-to-image model',
      'providers[0].models[0].price.prompt: not a price of a text-to-image model (it takes image)',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: 0.1 } }')), [
      'providers[0].models[0].price.completion: required for a chatbot model',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, type: speech-to-text, price: {} }')), [
      'providers[0].models[0].price.audio_second: required for a speech-to-text model',
    ])
  })

  t.test('too many decimals', async (t) => {
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: 0.0000000000001, completion: 1 } }')), [
      'providers[0].models[0].price.prompt: too many decimals: at most 12 for a price per 1M tokens (got 0.0000000000001)',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: "0.1234567890123", completion: 1 } }')), [
      'providers[0].models[0].price.prompt: too many decimals: at most 12 for a price per 1M tokens (got 0.1234567890123)',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, type: text-to-image, price: { image: "0.0000000000000000001" } }')), [
      'providers[0].models[0].price.image: too many decimals: at most 18 (got 0.0000000000000000001)',
    ])
    // 12 decimals per 1M tokens is exactly representable: accepted.
    const ok = parseRegistry(oneModel('{ id: m, price: { prompt: "0.000000000001", completion: 1 } }'), 1)
    t.equal(ok.providers[0]!.models[0]!.price.prompt, '0.000000000001')
  })

  t.test('1e-9 is normalised to a plain decimal', async (t) => {
    const snapshot = parseRegistry(oneModel('{ id: m, price: { prompt: 1e-9, completion: 2.5e-7 } }'), 1)
    t.strictSame(snapshot.providers[0]!.models[0]!.price, { prompt: '0.000000001', completion: '0.00000025' })
  })

  t.test('negative, NaN and non-decimal prices', async (t) => {
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: -0.1, completion: .nan } }')), [
      'providers[0].models[0].price.prompt: must be a non-negative decimal (got -0.1)',
      'providers[0].models[0].price.completion: must be a non-negative decimal (got NaN)',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: "1e-9", completion: "free" } }')), [
      'providers[0].models[0].price.prompt: must be a non-negative decimal (got "1e-9")',
      'providers[0].models[0].price.completion: must be a non-negative decimal (got "free")',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: true, completion: 1 } }')), [
      'providers[0].models[0].price.prompt: must be a decimal number or string, e.g. 0.10 or "0.10"',
    ])
  })

  t.test('formats only on chatbots', async (t) => {
    t.strictSame(problemsOf(t, oneModel('{ id: m, type: text-to-image, formats: [openai], price: { image: 1 } }')), [
      'providers[0].models[0].formats: only chatbot models have formats (this is text-to-image)',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, formats: [openai, grpc], price: { prompt: 1, completion: 1 } }')), [
      'providers[0].models[0].formats[1]: must be one of "openai" | "anthropic" | "responses" (got "grpc")',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, formats: [responses], price: { prompt: 1, completion: 1 } }')), [
      'providers[0].models[0].formats: a chatbot needs at least one of openai, anthropic (responses is in addition to them)',
    ])
    const both = parseRegistry(oneModel('{ id: m, formats: [anthropic, responses], price: { prompt: 1, completion: 1 } }'), 1, 'test.yaml')
    t.strictSame(both.providers[0]!.models[0]!.formats, ['anthropic', 'responses'])
  })

  t.test('counts are positive integers', async (t) => {
    t.strictSame(
      problemsOf(t, oneModel('{ id: m, context_length: 0, max_completion_tokens: 1.5, price: { prompt: 1, completion: 1 } }')),
      [
        'providers[0].models[0].context_length: must be > 0 (got 0)',
        'providers[0].models[0].max_completion_tokens: expected an integer (got 1.5)',
      ],
    )
  })

  t.test('a provider needs models', async (t) => {
    t.strictSame(problemsOf(t, oneModel('')), ['providers[0].models: must not be empty'])
  })

  t.test('unknown keys, with a hint', async (t) => {
    t.strictSame(problemsOf(t, oneModel(CHAT, ', trust: private')), [
      'unknown key providers[0].trust; did you mean providers[0].trust_mode?',
    ])
    t.strictSame(problemsOf(t, oneModel('{ id: m, price: { prompt: 1, completion: 1, input: 1 } }')), [
      'unknown key providers[0].models[0].price.input (known keys of providers[0].models[0].price: prompt, completion, image, audio_second)',
    ])
    t.strictSame(problemsOf(t, `version: 2\n${oneModel(CHAT)}`), ['unknown key version (known keys: providers)'])
  })

  t.test('every problem is listed with its path', async (t) => {
    const text = `providers:
  - address: "0x1"
    url: "http://a"
    trust_mode: secret
    models:
      - { id: a, price: { prompt: 0.1, completion: 0.3 } }
      - { id: b, price: { prompt: 0.1, completion: "x" } }
  - address: "${A2}"
    url: "http://b"
    models: [{ id: c, type: text-to-image, price: { image: 1, prompt: 1 } }]
`
    const problems = problemsOf(t, text)
    t.strictSame(problems, [
      'providers[0].address: must be 0x followed by 40 hex digits (got "0x1")',
      'providers[0].trust_mode: must be one of "standard" | "verified" | "private" (got "secret")',
      'providers[0].models[1].price.completion: must be a non-negative decimal (got "x")',
      'providers[1].models[0].price.prompt: not a price of a text-to-image model (it takes image)',
    ])
  })

  t.test('malformed YAML and wrong shapes', async (t) => {
    const [yamlProblem] = problemsOf(t, 'providers: [\n')
    t.match(yamlProblem, /at line \d+, column \d+$/)
    t.strictSame(problemsOf(t, ''), ['the file is empty: expected a mapping with a providers list'])
    t.strictSame(problemsOf(t, 'providers: 1\n'), ['providers: expected a list (got 1)'])
    t.strictSame(problemsOf(t, '- a\n'), ['top level: expected a mapping (got a list)'])
  })

  t.test('an unreadable file is a RegistryError', async (t) => {
    const dir = t.testdir({})
    t.throws(() => loadRegistryFile(join(dir, 'missing.yaml'), 1), RegistryError)
  })
})

/** Records watcher callbacks and lets a test wait for the next one. */
function recorder() {
  const events: ({ kind: 'change'; snapshot: RegistrySnapshot } | { kind: 'error'; err: Error })[] = []
  let wake: (() => void) | undefined
  const push = (event: (typeof events)[number]) => {
    events.push(event)
    wake?.()
  }
  return {
    events,
    handlers: {
      onChange: (snapshot: RegistrySnapshot) => push({ kind: 'change', snapshot }),
      onError: (err: Error) => push({ kind: 'error', err }),
    },
    /** Resolves once `count` events have been recorded (or rejects after `ms`). */
    async waitFor(count: number, ms = 5000): Promise<void> {
      const deadline = Date.now() + ms
      while (events.length < count) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for event ${count}`)
        await new Promise<void>((resolve) => {
          wake = resolve
          setTimeout(resolve, 50)
        })
      }
    },
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function fsWatchers(): number {
  return process.getActiveResourcesInfo().filter((name) => name === 'FSEventWrap').length
}

t.test('hot reload', async (t) => {
  const dir = t.testdir({ 'providers.yaml': oneModel(CHAT) })
  const file = join(dir, 'providers.yaml')
  const initial = loadRegistryFile(file, 4)
  const rec = recorder()
  const watchersBefore = fsWatchers()
  const watcher: RegistryWatcher = watchRegistryFile(file, rec.handlers, { debounceMs: 20, firstVersion: initial.version })
  t.teardown(() => watcher.close())
  t.equal(fsWatchers(), watchersBefore + 1)

  // A change: version + 1.
  writeFileSync(file, oneModel('{ id: m2, price: { prompt: 0.2, completion: 0.4 } }'))
  await rec.waitFor(1)
  const first = rec.events[0]!
  t.equal(first.kind, 'change')
  if (first.kind === 'change') {
    t.equal(first.snapshot.version, 5)
    t.equal(first.snapshot.providers[0]!.models[0]!.id, 'm2')
  }

  // Rewriting the same text is not a change.
  writeFileSync(file, oneModel('{ id: m2, price: { prompt: 0.2, completion: 0.4 } }'))
  await sleep(150)
  t.equal(rec.events.length, 1, 'same text: no event')

  // A broken file: onError, no onChange, no version bump.
  writeFileSync(file, oneModel('{ id: m3, price: { prompt: -1, completion: 0.4 } }'))
  await rec.waitFor(2)
  const second = rec.events[1]!
  t.equal(second.kind, 'error')
  if (second.kind === 'error') {
    t.type(second.err, RegistryError)
    t.match(second.err.message, 'providers[0].models[0].price.prompt: must be a non-negative decimal')
  }
  await sleep(150)
  t.equal(rec.events.length, 2, 'the broken file is reported once')

  // Fixed, by an editor-style save (write a temp file, rename it over): onChange again, version 6.
  const tmp = join(dir, '.providers.yaml.swp')
  writeFileSync(tmp, oneModel('{ id: m4, price: { prompt: 0.3, completion: 0.5 } }'))
  renameSync(tmp, file)
  await rec.waitFor(3)
  const third = rec.events[2]!
  t.equal(third.kind, 'change')
  if (third.kind === 'change') {
    t.equal(third.snapshot.version, 6)
    t.equal(third.snapshot.providers[0]!.models[0]!.id, 'm4')
    t.ok(Object.isFrozen(third.snapshot.providers[0]))
  }

  // Other files in the directory are ignored.
  writeFileSync(join(dir, 'other.yaml'), 'not: a registry\n')
  await sleep(150)
  t.equal(rec.events.length, 3, 'a sibling file does not trigger a reload')

  // close() stops everything: no handle left (the test process must exit), no more events.
  watcher.close()
  watcher.close()
  writeFileSync(file, oneModel('{ id: m5, price: { prompt: 0.3, completion: 0.5 } }'))
  await sleep(150)
  // The handle goes away when libuv has closed it, a tick after close(): waited for, not assumed.
  for (const deadline = Date.now() + 5000; fsWatchers() !== watchersBefore && Date.now() < deadline; ) await sleep(20)
  t.equal(fsWatchers(), watchersBefore, 'the fs watcher is closed')
  t.equal(rec.events.length, 3, 'no events after close')
})

t.test('close() during the debounce window cancels the pending reload', async (t) => {
  // A 1 s debounce: the file event arrives and arms the reload well before close(), and close() comes long
  // before the reload would run, even on a slow machine. Then the test waits past the whole window.
  const DEBOUNCE_MS = 1000
  const dir = t.testdir({ 'providers.yaml': oneModel(CHAT) })
  const file = join(dir, 'providers.yaml')
  const rec = recorder()
  const watcher = watchRegistryFile(file, rec.handlers, { debounceMs: DEBOUNCE_MS })
  writeFileSync(file, oneModel('{ id: m2, price: { prompt: 0.2, completion: 0.4 } }'))
  const written = performance.now()
  await sleep(100)
  t.ok(performance.now() - written < DEBOUNCE_MS, 'closed inside the debounce window')
  watcher.close()
  await sleep(DEBOUNCE_MS + 300)
  t.equal(rec.events.length, 0)
})

t.test('the default first version is 1, so the first change is version 2', async (t) => {
  const dir = t.testdir({ 'providers.yaml': oneModel(CHAT) })
  const file = join(dir, 'providers.yaml')
  const rec = recorder()
  const watcher = watchRegistryFile(file, rec.handlers, { debounceMs: 10 })
  t.teardown(() => watcher.close())
  writeFileSync(file, oneModel('{ id: m2, price: { prompt: 0.2, completion: 0.4 } }'))
  await rec.waitFor(1)
  const event = rec.events[0]!
  t.equal(event.kind === 'change' ? event.snapshot.version : -1, 2)
})

t.test('tee_signer: an optional address, stored lower-case, whose signatures src/tee checks', async (t) => {
  const yaml = (signer: string) =>
    `providers:\n  - address: "0x${'1'.repeat(40)}"\n    url: http://127.0.0.1:1\n${signer}    models: [{ id: m, price: { prompt: 1, completion: 1 } }]\n`
  t.equal(parseRegistry(yaml(''), 1).providers[0]!.tee_signer, '')
  t.equal(parseRegistry(yaml(`    tee_signer: "0x${'A'.repeat(40)}"\n`), 1).providers[0]!.tee_signer, `0x${'a'.repeat(40)}`)
  t.throws(() => parseRegistry(yaml('    tee_signer: "0x12"\n'), 1), /tee_signer: must be 0x followed by 40 hex digits/)
})
