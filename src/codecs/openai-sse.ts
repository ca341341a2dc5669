// TEMPORARY shim over the old relay until the new SSE codec lands (not committed).
import { SseRelay } from '../upstream/sse-relay.js'
import type { Emit } from './codec.js'
export class OpenAiSseCodec {
  readonly #r: SseRelay
  constructor(withholdUsage: boolean) { this.#r = new SseRelay(withholdUsage) }
  get chatId(): string { return this.#r.chatId }
  get usage(): unknown { return this.#r.usage }
  get events(): number { return this.#r.events }
  get forwardedBytes(): number { return this.#r.forwardedBytes }
  get sawDone(): boolean { return this.#r.done }
  push(c: Buffer, e: Emit): void { this.#r.push(c, e) }
  finish(e: Emit): void { this.#r.finish(e) }
}
