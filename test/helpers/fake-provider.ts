/**
 * A provider played by a small `http` server on loopback, for behaviour the simulator does not have (interim
 * responses, redirects, bodies cut short, error objects sent with a 200). The handler gets the request body
 * whole; every connection is closed at teardown so a test never waits for a keep-alive socket.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export type FakeHandler = (req: IncomingMessage, res: ServerResponse, body: string) => void

interface TapLike {
  teardown(fn: () => unknown): void
}

/** Starts the server; returns its base URL and how many requests it got. */
export async function fakeProvider(t: TapLike, handle: FakeHandler): Promise<{ url: string; hits: () => number }> {
  let hits = 0
  const server = createServer((req, res) => {
    hits++
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => handle(req, res, body))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits: () => hits }
}

/** A whole chat.completion body answering 'ok', as a fake provider sends it. */
export function completionJson(id: string, model: string, promptTokens = 3, completionTokens = 1): string {
  return JSON.stringify({
    id,
    object: 'chat.completion',
    created: 0,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
  })
}
