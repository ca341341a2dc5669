/**
 * The simulated provider: a real OpenAI-compatible HTTP server on `node:http` that also serves Anthropic's
 * native `/v1/messages`, used by the demo, the router tests and the benchmarks. Deterministic filler content, optional pacing, injectable faults.
 */
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { randomBytes } from 'node:crypto'
import { log } from '../log.js'
import { resolveSettings, type Settings, type SimulatorFault, type SimulatorOptions, type Tunables } from './settings.js'
import {
  answerPieces,
  completionBody,
  contentChunk,
  contentMessage,
  estimatePromptTokens,
  fillerToken,
  jsonMessage,
  parseChatRequest,
  responseMeta,
  roleChunk,
  splitArguments,
  streamEnd,
  streamFrame,
  toolArgumentsChunk,
  toolCallMessage,
  toolCallTokens,
  toolStartChunk,
  usageJson,
  type ChatRequest,
} from './completion.js'
import {
  estimateMessagesPromptTokens,
  inputJsonDelta,
  jsonTextBlock,
  messageBody,
  parseMessagesRequest,
  streamStart,
  streamStop,
  textBlock,
  textDelta,
  textPieceDelta,
  toolUseBlock,
  type MessagesRequest,
} from './messages.js'

import {
  argumentsDelta,
  deltasFrom,
  estimateResponsesPromptTokens,
  functionCallItem,
  messageItem,
  openMessageItem,
  outputTextDelta,
  parseResponsesRequest,
  responseBody,
  responseStreamEnd,
  responseStreamStart,
  responsesUsageJson,
  type ResponsesRequest,
} from './responses.js'
import { fillerText } from './completion.js'

import { audioSeconds } from '../codecs/audio-duration.js'
import { TRANSCRIPTION_FORMATS, transcript } from './audio.js'
import { readForm, type Form } from './form.js'
import { fileSeed, imagesBody, pngImage } from './images.js'
import { TeeSigner } from './tee-signer.js'
import { startBroker, type Broker } from './broker.js'

export { SIMULATOR_FAULTS, TEE_FAULTS, type SimulatorFault, type SimulatorOptions, type TeeFault } from './settings.js'

/** Live counters of `/v1/chat/completions` and `/v1/messages` traffic. */
export interface SimulatorStats {
  requests: number // requests received
  completed: number // responses fully written (error answers included)
  aborted: number // requests whose client went away before the response finished
  lastBody: any // last parsed JSON request body
  lastHeaders: Record<string, string | string[] | undefined>
  lastPath: string // request target of the last request: /v1/chat/completions or /v1/messages
  lastForm: Form | undefined // last multipart body (edits, transcriptions): fields, files' sizes and heads
  unpaid: number // requests a broker simulator refused (no valid session token, or a balance too low): never served
}

/** A running simulator. */
export interface SimulatorHandle {
  readonly url: string // 'http://127.0.0.1:PORT' (no /v1 suffix)
  readonly port: number
  readonly stats: SimulatorStats
  /** Changes behaviour for requests that arrive from now on; setting fault/faultCount re-arms the counter. */
  setOptions(patch: Partial<Omit<SimulatorOptions, 'host' | 'port'>>): void
  /** The 0G broker side, when started with `broker`. */
  readonly broker: Broker | null
  /** Closes the listener and destroys open sockets. */
  close(): Promise<void>
}

/** One chat completion in flight: the pending timer is cleared the moment the client goes away. */
interface Exchange {
  res: ServerResponse
  socket: Socket
  s: Settings
  timer: NodeJS.Timeout | undefined
  /** The request body as received (TEE mode signs its hash). */
  body: Buffer | undefined
}

const ID_PREFIX = randomBytes(4).toString('hex')
let sequence = 0
// Unpaced streams are written in slices of this size so a slow reader still applies backpressure.
const BATCH_CHARS = 64 * 1024

function nextId(prefix: string): string {
  return `${prefix}${ID_PREFIX}${(++sequence).toString(36)}`
}

function sendJson(res: ServerResponse, status: number, body: string, name: string, retryAfter?: string): void {
  const headers: OutgoingHttpHeaders = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'x-simulator-name': name,
  }
  if (retryAfter !== undefined) headers['retry-after'] = retryAfter
  res.writeHead(status, headers).end(body)
}

function sendError(res: ServerResponse, status: number, name: string, message: string, type: string, code: string, retryAfter?: string): void {
  sendJson(res, status, JSON.stringify({ error: { message, type, code } }), name, retryAfter)
}

function later(ex: Exchange, ms: number, fn: () => void): void {
  if (ms > 0) ex.timer = setTimeout(fn, ms)
  else fn()
}

const PROXY_PREFIX = '/v1/proxy/'
const SIGNATURE_PREFIX = '/v1/proxy/signature/'

/** Starts a simulator and resolves once it listens. */
export async function startSimulator(options: SimulatorOptions = {}): Promise<SimulatorHandle> {
  const host = options.host ?? '127.0.0.1'
  let tunables: Tunables = { ...options }
  let settings = resolveSettings(tunables)
  let faultsLeft = settings.faultCount
  let listening = false
  let closing: Promise<void> | undefined
  const stats: SimulatorStats = { requests: 0, completed: 0, aborted: 0, lastBody: undefined, lastHeaders: {}, lastPath: '', lastForm: undefined, unpaid: 0 }
  const sockets = new Set<Socket>()
  // Sockets the simulator destroyed on purpose: their requests are faults, not client aborts.
  const killed = new WeakSet<Socket>()

  const tee = new TeeSigner()
  if (options.broker !== undefined && options.teeKey === undefined) throw new Error('simulator: a broker needs a teeKey (it signs its settlements)')
  const broker = options.broker === undefined ? null : startBroker(options.broker, options.teeKey!)
  const server = createServer(handleRequest)
  server.keepAliveTimeout = 65_000
  server.on('connection', function trackSocket(socket: Socket) {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  listening = true
  const port = (server.address() as AddressInfo).port
  const baseUrl = `http://${host.includes(':') ? `[${host}]` : host}:${port}`
  server.on('error', function onListenError(err: Error) {
    log.warn('simulator listener failed', { name: settings.name, port, error: err.message })
  })
  syncListener()

  function kill(socket: Socket): void {
    killed.add(socket)
    socket.destroy()
  }

  function syncListener(): void {
    const wanted = closing === undefined && settings.fault !== 'refuse'
    if (wanted === listening) return
    listening = wanted
    if (wanted) {
      server.listen(port, host)
    } else {
      server.close()
      for (const socket of sockets) kill(socket)
    }
  }

  function takeFault(s: Settings): SimulatorFault {
    if (s.fault === 'none' || s.fault === 'refuse' || faultsLeft <= 0) return 'none'
    faultsLeft--
    return s.fault
  }

  /**
   * Anthropic's token counting: the input tokens its messages answer would report for the same request (no
   * max_tokens needed). Not a generation: no fault, no delay, no count in the stats.
   */
  function countTokens(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', function onCountBody() {
      const s = settings
      let body: unknown
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        return sendError(res, 400, s.name, 'The request body is not valid JSON.', 'invalid_request_error', 'invalid_request')
      }
      const request = parseMessagesRequest(body !== null && typeof body === 'object' ? { max_tokens: 1, ...body } : body)
      if ('error' in request) return sendError(res, 400, s.name, request.error, 'invalid_request_error', 'invalid_request')
      if (s.models !== undefined && !s.models.has(request.model)) {
        return sendError(res, 404, s.name, `model: ${request.model}`, 'not_found_error', 'model_not_found')
      }
      sendJson(res, 200, `{"input_tokens":${estimateMessagesPromptTokens(request)}}`, s.name)
    })
  }

  function handleRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? '/'
    const query = url.indexOf('?')
    let path = query === -1 ? url : url.slice(0, query)
    if (path.startsWith(PROXY_PREFIX)) {
      // As a 0G broker serves them: the OpenAI routes below /v1/proxy, and (TEE mode) the signatures of its answers.
      if (path.startsWith(SIGNATURE_PREFIX) && req.method === 'GET' && settings.teeKey !== undefined) {
        return answerSignature(res, decodeURIComponent(path.slice(SIGNATURE_PREFIX.length)))
      }
      path = '/v1/' + path.slice(PROXY_PREFIX.length)
      if (broker !== null && req.method === 'POST') return paid(req, res, path, broker)
    }
    route(req, res, path)
  }

  /** A broker's request: served only with a session token it accepts, and what it served is owed. */
  function paid(req: IncomingMessage, res: ServerResponse, path: string, b: Broker): void {
    b.check(req.headers.authorization).then(
      (verdict) => {
        if ('status' in verdict) {
          stats.unpaid++
          req.resume()
          return sendError(res, verdict.status, settings.name, verdict.message, 'authentication_error', verdict.status === 401 ? 'invalid_session_token' : 'insufficient_balance')
        }
        const parts: Buffer[] = []
        const write = res.write.bind(res) as (chunk: unknown, ...rest: unknown[]) => boolean
        const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse
        const keep = (chunk: unknown): void => {
          if (typeof chunk === 'string') parts.push(Buffer.from(chunk))
          else if (chunk instanceof Uint8Array) parts.push(Buffer.from(chunk))
        }
        res.write = ((chunk: unknown, ...rest: unknown[]) => (keep(chunk), write(chunk, ...rest))) as typeof res.write
        res.end = ((...args: unknown[]) => (typeof args[0] !== 'function' && keep(args[0]), end(...args))) as typeof res.end
        res.once('finish', () => {
          if (res.statusCode === 200) b.served(verdict.user, Buffer.concat(parts).toString('utf8'))
        })
        route(req, res, path)
      },
      () => sendError(res, 500, settings.name, 'broker check failed', 'server_error', 'server_error'),
    )
  }

  function route(req: IncomingMessage, res: ServerResponse, path: string): void {
    if (path === '/v1/chat/completions' && req.method === 'POST') return handlePost(req, res, respondChat)
    if (path === '/v1/messages' && req.method === 'POST') return handlePost(req, res, respondMessages)
    if (path === '/v1/messages/count_tokens' && req.method === 'POST') return countTokens(req, res)
    if (path === '/v1/responses' && req.method === 'POST') return handlePost(req, res, respondResponses)
    if (path === '/v1/images/generations' && req.method === 'POST') return handlePost(req, res, respondImages)
    if (path === '/v1/images/edits' && req.method === 'POST') return handleForm(req, res, respondEdits)
    if (path === '/v1/audio/transcriptions' && req.method === 'POST') return handleForm(req, res, respondTranscription)
    const seed = req.method === 'GET' ? fileSeed(path) : null
    if (seed !== null) {
      const png = pngImage(seed)
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': png.length }).end(png)
      return
    }
    if (path === '/v1/models' && req.method === 'GET') return sendJson(res, 200, settings.modelsBody, settings.name)
    sendError(res, 404, settings.name, `Unknown request URL: ${req.method} ${path}.`, 'invalid_request_error', 'unknown_url')
  }

  /** Both endpoints: the counters, the fault taken, the body read; `respond` answers in its format. */
  function handlePost(
    req: IncomingMessage,
    res: ServerResponse,
    respond: (ex: Exchange, fault: SimulatorFault, text: string) => void,
    read?: (ex: Exchange, fault: SimulatorFault) => void,
  ): void {
    stats.requests++
    stats.lastHeaders = req.headers
    stats.lastPath = req.url ?? ''
    const ex: Exchange = { res, socket: req.socket, s: settings, timer: undefined, body: undefined }
    const fault = takeFault(ex.s)
    res.once('finish', function countCompleted() {
      stats.completed++
    })
    res.once('close', function stopExchange() {
      if (ex.timer !== undefined) clearTimeout(ex.timer)
      ex.timer = undefined
      if (!res.writableFinished && !killed.has(ex.socket)) stats.aborted++
    })
    if (read !== undefined) return read(ex, fault)
    const chunks: Buffer[] = []
    req.on('data', function readBody(chunk: Buffer) {
      chunks.push(chunk)
    })
    req.on('end', function onBody() {
      const body = Buffer.concat(chunks)
      ex.body = body
      respond(ex, fault, body.toString('utf8'))
    })
  }

  /** The multipart endpoints: counted and faulted as handlePost does, the form read by busboy. */
  function handleForm(req: IncomingMessage, res: ServerResponse, respond: (ex: Exchange, fault: SimulatorFault, form: Form) => void): void {
    handlePost(req, res, respond as never, (ex, fault) => {
      readForm(req, (form) => {
        if (form instanceof Error) {
          // A client that went away mid-upload gets nothing: it is counted as aborted when its socket closes.
          if (!res.headersSent && !req.socket.destroyed) sendError(res, 400, ex.s.name, `multipart body unreadable: ${form.message}`, 'invalid_request_error', 'invalid_request')
          return
        }
        stats.lastForm = form
        stats.lastBody = form.fields
        if (faultAnswered(ex, fault)) return
        respond(ex, fault, form)
      })
    })
  }

  /** Answers the faults that need no body; true when one did. */
  function faultAnswered(ex: Exchange, fault: SimulatorFault): boolean {
    const { res, s } = ex
    switch (fault) {
      case 'reset-before-headers':
        kill(ex.socket)
        return true
      case 'status-500':
        sendError(res, 500, s.name, 'The server had an error while processing your request (simulated).', 'server_error', 'server_error')
        return true
      case 'status-429':
        sendError(res, 429, s.name, 'Rate limit reached (simulated).', 'requests', 'rate_limit_exceeded', '1')
        return true
      case 'status-400':
        sendError(res, 400, s.name, 'Invalid request (simulated).', 'invalid_request_error', 'invalid_request')
        return true
    }
    return false
  }

  /** A media answer after the simulated generation time (ttftMs, plus slowHeadersMs under slow-headers). */
  function sendMedia(ex: Exchange, fault: SimulatorFault, contentType: string, body: string): void {
    const { res, s } = ex
    later(ex, s.ttftMs + (fault === 'slow-headers' ? s.slowHeadersMs : 0), function writeMedia() {
      const bytes = Buffer.from(body)
      res.writeHead(200, { 'content-type': contentType, 'content-length': bytes.length, 'x-simulator-name': s.name, 'x-request-id': nextId('req_') })
      if (fault !== 'reset-mid-stream') return void res.end(bytes)
      res.write(bytes.subarray(0, bytes.length >> 1), () => kill(ex.socket))
    })
  }

  function respondImages(ex: Exchange, fault: SimulatorFault, text: string): void {
    const { res, s } = ex
    const body = readRequest(ex, fault, text) as Record<string, unknown> | undefined
    if (body === undefined) return
    const problem = imageProblem(body.model, body.prompt, body.n, body.response_format)
    if (problem !== null) return sendError(res, 400, s.name, problem, 'invalid_request_error', 'invalid_request')
    sendMedia(ex, fault, 'application/json', imagesBody(nextId('img-'), body.prompt as string, Number(body.n ?? 1), String(body.response_format ?? 'b64_json'), baseUrl))
  }

  function respondEdits(ex: Exchange, fault: SimulatorFault, form: Form): void {
    const { res, s } = ex
    const f = form.fields
    if (!form.files.some((file) => file.field === 'image' || file.field === 'image[]')) {
      return sendError(res, 400, s.name, 'image is required', 'invalid_request_error', 'invalid_request')
    }
    const problem = imageProblem(f.model, f.prompt, f.n, f.response_format)
    if (problem !== null) return sendError(res, 400, s.name, problem, 'invalid_request_error', 'invalid_request')
    const masked = form.files.some((file) => file.field === 'mask') ? ' (masked)' : ''
    sendMedia(ex, fault, 'application/json', imagesBody(nextId('img-'), f.prompt + masked, Number(f.n ?? 1), f.response_format ?? 'b64_json', baseUrl))
  }

  function imageProblem(model: unknown, prompt: unknown, n: unknown, format: unknown): string | null {
    if (typeof model !== 'string' || model === '') return 'model is required'
    if (settings.models !== undefined && !settings.models.has(model)) return `model '${model}' not found`
    if (typeof prompt !== 'string' || prompt === '') return 'prompt is required'
    const count = Number(n ?? 1)
    if (!Number.isInteger(count) || count < 1 || count > 10) return 'n must be an integer from 1 to 10'
    if (format !== undefined && format !== 'b64_json' && format !== 'url') return 'response_format must be b64_json or url'
    return null
  }

  function respondTranscription(ex: Exchange, fault: SimulatorFault, form: Form): void {
    const { res, s } = ex
    const f = form.fields
    const file = form.files.find((x) => x.field === 'file')
    if (file === undefined) return sendError(res, 400, s.name, 'file is required', 'invalid_request_error', 'invalid_request')
    if (typeof f.model !== 'string' || f.model === '') return sendError(res, 400, s.name, 'model is required', 'invalid_request_error', 'invalid_request')
    if (s.models !== undefined && !s.models.has(f.model)) return sendError(res, 404, s.name, `model '${f.model}' not found`, 'invalid_request_error', 'model_not_found')
    const format = f.response_format ?? 'json'
    if (!TRANSCRIPTION_FORMATS.has(format)) return sendError(res, 400, s.name, `response_format ${format} is not supported`, 'invalid_request_error', 'invalid_request')
    const seconds = audioSeconds(file.head, file.bytes)
    if (seconds === null) return sendError(res, 400, s.name, 'the audio file is not WAV or MP3', 'invalid_request_error', 'invalid_audio')
    const answer = transcript(format, seconds, f.language ?? 'en', fault !== 'no-usage')
    sendMedia(ex, fault, answer.contentType, answer.body)
  }

  /**
   * The parsed body, or undefined once the request was answered: by a fault that needs no body, or a 400 for
   * a body that is not JSON. Shared by both endpoints, so their faults are the same.
   */
  function readRequest(ex: Exchange, fault: SimulatorFault, text: string): unknown {
    const { res, s } = ex
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      body = undefined
    }
    stats.lastBody = body
    if (faultAnswered(ex, fault)) return undefined
    if (body === undefined) sendError(res, 400, s.name, 'The request body is not valid JSON.', 'invalid_request_error', 'invalid_json')
    return body
  }

  function respondChat(ex: Exchange, fault: SimulatorFault, text: string): void {
    const { res, s } = ex
    const body = readRequest(ex, fault, text)
    if (body === undefined) return
    const request = parseChatRequest(body)
    if ('error' in request) return sendError(res, 400, s.name, request.error, 'invalid_request_error', 'invalid_request')
    if (s.models !== undefined && !s.models.has(request.model)) {
      return sendError(res, 404, s.name, `model '${request.model}' not found`, 'invalid_request_error', 'model_not_found')
    }
    later(ex, fault === 'slow-headers' ? s.slowHeadersMs : 0, function startCompletion() {
      complete(ex, request, fault)
    })
  }

  function complete(ex: Exchange, request: ChatRequest, fault: SimulatorFault): void {
    const { s } = ex
    const id = nextId('chatcmpl-')
    if (s.teeKey !== undefined) {
      ex.res.setHeader('zg-res-key', id)
      tee.record(ex.res, ex.body ?? Buffer.alloc(0), id, s.teeKey, s.teeFault)
    }
    const object = request.stream ? 'chat.completion.chunk' : 'chat.completion'
    const meta = responseMeta(object, id, Math.floor(Date.now() / 1000), JSON.stringify(request.model), s.nameJson)
    const reset = fault === 'reset-mid-stream'
    const tool = request.tool
    // A structured answer: its pieces are its tokens, and max_tokens cuts it as it cuts filler.
    const json = tool === undefined && request.json !== undefined ? answerPieces(request.json) : undefined
    let tokens = json?.length ?? s.completionTokens
    let finishReason = 'stop'
    if (tool !== undefined) {
      tokens = toolCallTokens(tool)
      finishReason = 'tool_calls'
    } else if (request.maxTokens !== undefined && request.maxTokens < tokens) {
      tokens = request.maxTokens
      finishReason = 'length'
    }
    const usage = fault === 'no-usage' ? undefined : usageJson(estimatePromptTokens(request.messages), tokens)
    const callId = tool === undefined ? '' : nextId('call_')
    if (!request.stream) {
      const text = json === undefined ? contentMessage(tokens) : jsonMessage(json.slice(0, tokens))
      const message = tool === undefined ? text : toolCallMessage(callId, tool)
      const units = tool === undefined ? tokens : splitArguments(tool.arguments).length
      return sendCompletion(ex, completionBody(meta, message, finishReason, usage), units, reset)
    }
    const frame = streamFrame(meta, request.includeUsage && usage !== undefined)
    const end = streamEnd(frame, finishReason, usage ?? '')
    if (tool === undefined) {
      const token = json === undefined ? fillerToken : (i: number) => json[i]!
      return stream(ex, roleChunk(frame), tokens, (i) => contentChunk(frame, token(i)), end, reset)
    }
    const pieces = splitArguments(tool.arguments)
    const first = toolStartChunk(frame, callId, tool.name)
    stream(ex, first, pieces.length, (i) => toolArgumentsChunk(frame, pieces[i]!), end, reset)
  }

  function respondMessages(ex: Exchange, fault: SimulatorFault, text: string): void {
    const { res, s } = ex
    const body = readRequest(ex, fault, text)
    if (body === undefined) return
    const request = parseMessagesRequest(body)
    if ('error' in request) return sendError(res, 400, s.name, request.error, 'invalid_request_error', 'invalid_request')
    if (s.models !== undefined && !s.models.has(request.model)) {
      return sendError(res, 404, s.name, `model: ${request.model}`, 'not_found_error', 'model_not_found')
    }
    later(ex, fault === 'slow-headers' ? s.slowHeadersMs : 0, function startMessage() {
      completeMessage(ex, request, fault)
    })
  }

  /** The native Anthropic answer: text (max_tokens caps it) or one tool_use block, as JSON or SSE. */
  function completeMessage(ex: Exchange, request: MessagesRequest, fault: SimulatorFault): void {
    const { s } = ex
    const id = nextId('msg_')
    const modelJson = JSON.stringify(request.model)
    const reset = fault === 'reset-mid-stream'
    const tool = request.tool
    const json = tool === undefined && request.json !== undefined ? answerPieces(request.json) : undefined
    let tokens = json?.length ?? s.completionTokens
    let stopReason = 'end_turn'
    if (tool !== undefined) {
      tokens = toolCallTokens(tool)
      stopReason = 'tool_use'
    } else if (request.maxTokens < tokens) {
      tokens = request.maxTokens
      stopReason = 'max_tokens'
    }
    const input = fault === 'no-usage' ? undefined : estimateMessagesPromptTokens(request)
    const toolId = tool === undefined ? '' : nextId('toolu_')
    if (!request.stream) {
      const text = json === undefined ? textBlock(tokens) : jsonTextBlock(json.slice(0, tokens))
      const content = tool === undefined ? text : toolUseBlock(toolId, tool)
      const units = tool === undefined ? tokens : splitArguments(tool.arguments).length
      const usage: [number, number] | undefined = input === undefined ? undefined : [input, tokens]
      return sendCompletion(ex, messageBody(id, modelJson, content, stopReason, usage), units, reset)
    }
    const end = streamStop(stopReason, input === undefined ? undefined : tokens)
    if (tool === undefined) {
      const delta = json === undefined ? textDelta : (i: number) => textPieceDelta(json[i]!)
      return stream(ex, streamStart(id, modelJson, input, '{"type":"text","text":""}'), tokens, delta, end, reset)
    }
    const pieces = splitArguments(tool.arguments)
    const block = `{"type":"tool_use","id":"${toolId}","name":${JSON.stringify(tool.name)},"input":{}}`
    stream(ex, streamStart(id, modelJson, input, block), pieces.length, (i) => inputJsonDelta(pieces[i]!), end, reset)
  }

  function respondResponses(ex: Exchange, fault: SimulatorFault, text: string): void {
    const { res, s } = ex
    const body = readRequest(ex, fault, text)
    if (body === undefined) return
    const request = parseResponsesRequest(body)
    if ('error' in request) return sendError(res, 400, s.name, request.error, 'invalid_request_error', 'invalid_request')
    if (s.models !== undefined && !s.models.has(request.model)) {
      return sendError(res, 404, s.name, `model '${request.model}' not found`, 'invalid_request_error', 'model_not_found')
    }
    later(ex, fault === 'slow-headers' ? s.slowHeadersMs : 0, function startResponse() {
      completeResponse(ex, request, fault)
    })
  }

  /** The native Responses answer: text (max_output_tokens caps it) or one function_call item, as JSON or SSE. */
  function completeResponse(ex: Exchange, request: ResponsesRequest, fault: SimulatorFault): void {
    const { s } = ex
    const id = nextId('resp_')
    const created = Math.floor(Date.now() / 1000)
    const modelJson = JSON.stringify(request.model)
    const reset = fault === 'reset-mid-stream'
    const tool = request.tool
    const json = tool === undefined && request.json !== undefined ? answerPieces(request.json) : undefined
    let tokens = json?.length ?? s.completionTokens
    let status = 'completed'
    if (tool !== undefined) tokens = toolCallTokens(tool)
    else if (request.maxOutputTokens !== undefined && request.maxOutputTokens < tokens) {
      tokens = request.maxOutputTokens
      status = 'incomplete'
    }
    const usage = fault === 'no-usage' ? undefined : responsesUsageJson(estimateResponsesPromptTokens(request), tokens)
    const itemId = nextId(tool === undefined ? 'msg_' : 'fc_')
    const callId = tool === undefined ? '' : nextId('call_')
    const jsonText = json?.slice(0, tokens).join('')
    const item = tool === undefined ? messageItem(itemId, tokens, 'completed', jsonText) : functionCallItem(itemId, callId, tool)
    if (!request.stream) {
      const units = tool === undefined ? tokens : splitArguments(tool.arguments).length
      return sendCompletion(ex, responseBody(id, created, modelJson, status, item, usage), units, reset)
    }
    const text = tool === undefined
    const open = text ? openMessageItem(itemId) : functionCallItem(itemId, callId, tool!, '', 'in_progress')
    const start = responseStreamStart(responseBody(id, created, modelJson, 'in_progress', '', undefined), open, text)
    const first = deltasFrom(text)
    const pieces = text ? [] : splitArguments(tool!.arguments)
    const units = text ? tokens : pieces.length
    const end = responseStreamEnd(first + units, itemId, item, text ? (jsonText ?? fillerText(tokens)) : null, text ? null : tool!.arguments, responseBody(id, created, modelJson, status, item, usage), status)
    const unit = !text
      ? (i: number) => argumentsDelta(itemId, first + i, pieces[i]!)
      : json === undefined
        ? (i: number) => outputTextDelta(itemId, first + i, i)
        : (i: number) => outputTextDelta(itemId, first + i, i, json[i])
    stream(ex, start, units, unit, end, reset)
  }

  function sendCompletion(ex: Exchange, body: string, units: number, reset: boolean): void {
    const { res, s } = ex
    const generation = s.tokensPerS > 0 ? (Math.max(0, units - 1) * 1000) / s.tokensPerS : 0
    later(ex, s.ttftMs + generation, function writeCompletion() {
      if (!reset) return sendJson(res, 200, body, s.name)
      const bytes = Buffer.from(body)
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': bytes.length, 'x-simulator-name': s.name })
      res.write(bytes.subarray(0, bytes.length >> 1), () => kill(ex.socket))
    })
  }

  /**
   * Writes `first`, then `units` chunks from `unit(i)`, then `end`. Unpaced, everything goes out in a
   * few large writes; paced, one chunk per tick on a drift-free schedule. Either way a `false` from
   * `write()` parks generation until 'drain', so a slow reader stalls the simulator instead of
   * growing its buffers.
   */
  function stream(ex: Exchange, first: string, units: number, unit: (i: number) => string, end: string, reset: boolean): void {
    const { res, s } = ex
    const stopAt = reset ? Math.min(s.faultAfterChunks, units) : units
    const interval = s.tokensPerS > 0 ? 1000 / s.tokensPerS : 0
    let next = 0
    let origin = 0
    let pending = first
    res.writeHead(200, s.sseHeaders)
    if (s.ttftMs > 0) {
      res.write(pending)
      pending = ''
      ex.timer = setTimeout(emit, s.ttftMs)
    } else {
      emit()
    }

    function emit(): void {
      ex.timer = undefined
      if (interval > 0) {
        if (next === 0) origin = performance.now()
        if (next < stopAt) pending += unit(next++)
        if (next < stopAt) {
          const flowing = res.write(pending)
          pending = ''
          if (flowing) ex.timer = setTimeout(emit, Math.max(0, origin + next * interval - performance.now()))
          else res.once('drain', resume)
          return
        }
      } else {
        while (next < stopAt) {
          pending += unit(next++)
          if (pending.length >= BATCH_CHARS && next < stopAt) {
            const flowing = res.write(pending)
            pending = ''
            if (!flowing) return void res.once('drain', emit)
          }
        }
      }
      if (reset) res.write(pending, () => kill(ex.socket))
      else res.end(pending + end)
    }

    // After a stall the schedule restarts from now, rather than bursting the tokens it fell behind on.
    function resume(): void {
      origin = performance.now() - next * interval
      emit()
    }
  }

  function answerSignature(res: ServerResponse, chatId: string): void {
    const s = settings
    const signed = s.teeFault === 'no-signature' ? undefined : tee.get(chatId)
    if (signed === undefined) return sendError(res, 404, s.name, `no signature for ${chatId}`, 'invalid_request_error', 'not_found')
    const timer = setTimeout(
      () => signed.then((answer) => sendJson(res, 200, JSON.stringify(answer), s.name), () => sendError(res, 500, s.name, 'signing failed', 'server_error', 'server_error')),
      s.teeFault === 'slow-signature' ? s.slowHeadersMs : 0,
    )
    res.once('close', () => clearTimeout(timer))
  }

  function setOptions(patch: Partial<Tunables>): void {
    const merged = { ...tunables, ...patch }
    settings = resolveSettings(merged)
    tunables = merged
    if ('fault' in patch || 'faultCount' in patch) faultsLeft = settings.faultCount
    syncListener()
  }

  function close(): Promise<void> {
    void broker?.close()
    closing ??= new Promise<void>((resolve) => {
      const stopped = listening ? new Promise<void>((done) => server.close(() => done())) : undefined
      listening = false
      const gone = [...sockets].map((socket) => new Promise<void>((done) => socket.once('close', () => done())))
      for (const socket of sockets) kill(socket)
      void Promise.all([stopped, ...gone]).then(() => resolve())
    })
    return closing
  }

  return { url: baseUrl, port, stats, broker, setOptions, close }
}
