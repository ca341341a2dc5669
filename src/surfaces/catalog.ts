/**
 * The public live catalog (spec §2.3, §2.4, §4.6): GET /v1/models, GET /v1/models/{id} (OpenAI's retrieve-model)
 * and GET /v1/providers?model=. No credential. The model list only changes with the registry, so its JSON (and
 * each entry's) is cached per table version; the provider list carries live health and latency and is built
 * per call.
 */
import { RouterError } from '../errors.js'
import type { Offer } from '../routing/offers.js'
import type { RoutingTable } from '../routing/table.js'
import type { Reply } from '../server/reply.js'
import type { RequestHead } from '../server/request-head.js'
import { sendError, sendJson } from '../server/respond.js'
import type { Verifiability } from '../registry/types.js'

const VERIFIABILITY_RANK: Record<Verifiability, number> = { '': 0, TeeTLS: 1, TeeML: 2 }

/**
 * Spec §2.3 supported_formats, "which chat surface accepts the model": both, for every chat model, since the
 * router translates between the two (a chat model is routed on /v1/chat/completions and /v1/messages alike,
 * to every provider, natively or translated); none for other types. native_formats says which formats some
 * provider speaks itself (no translation).
 */
const CHAT_FORMATS: readonly string[] = ['openai', 'anthropic']
const NO_FORMATS: readonly string[] = []

function modelEntry(id: string, offers: readonly Offer[]): Record<string, unknown> {
  // The strongest enclave among the providers describes the model; native formats are what any provider speaks.
  let best = offers[0]!
  const formats = new Set<string>()
  let context: number | null = null
  for (const o of offers) {
    if (VERIFIABILITY_RANK[o.provider.record.verifiability] > VERIFIABILITY_RANK[best.provider.record.verifiability]) best = o
    for (const f of o.model.formats) formats.add(f)
    if (o.model.context_length !== null) context = Math.max(context ?? 0, o.model.context_length)
  }
  return {
    id,
    object: 'model',
    type: best.model.type,
    supported_formats: best.model.type === 'chatbot' ? CHAT_FORMATS : NO_FORMATS,
    native_formats: [...formats],
    verifiability: best.provider.record.verifiability,
    tee_type: best.provider.record.tee_type,
    tee_verifier: best.provider.record.tee_verifier,
    provider_count: offers.length,
    context_length: context,
  }
}

function providerEntry(offer: Offer, now: number): Record<string, unknown> {
  const p = offer.provider
  const price = offer.model.price
  return {
    address: p.address,
    is_healthy: p.health.isHealthy(now),
    trust_mode: p.trustMode,
    verifiability: p.record.verifiability,
    latency: Number.isNaN(offer.stats.ewmaTtfbMs) ? null : Math.round(offer.stats.ewmaTtfbMs * 1000) / 1000,
    uptime: p.health.uptime(),
    max_completion_tokens: offer.model.max_completion_tokens,
    context_length: offer.model.context_length,
    supported_parameters: offer.model.supported_parameters,
    pricing: {
      prompt: price.prompt ?? null,
      completion: price.completion ?? null,
      image: price.image ?? null,
      audio_second: price.audio_second ?? null,
      currency: 'USD',
    },
  }
}

/** Providers of a model left out of routing, and why (src/settlement/: the ones the router cannot pay). */
export interface UnroutedProviders {
  unrouted(model: string): { address: string; reason: string }[]
}

/** A provider the router does not route to: listed with `routable: false` and the reason. */
function unroutedEntry(u: { address: string; reason: string }): Record<string, unknown> {
  return { address: u.address, is_healthy: false, routable: false, unrouted_reason: u.reason }
}

/** The path under which GET /v1/models/{id} takes the id (a route of its own: `/v1/models/*`). */
export const MODEL_PATH = '/v1/models/'

export function createCatalog(table: RoutingTable, unrouted: UnroutedProviders | null = null): {
  listModels: (head: RequestHead, reply: Reply) => void
  getModel: (head: RequestHead, reply: Reply) => void
  listProviders: (head: RequestHead, reply: Reply) => void
} {
  let cachedVersion = -1
  let cachedModels = ''
  let cachedEntries = new Map<string, string>()

  function refresh(): void {
    if (cachedVersion === table.version) return
    const data = [...table.models()].map(([id, index]) => modelEntry(id, index.offers))
    cachedModels = JSON.stringify({ object: 'list', data })
    cachedEntries = new Map(data.map((entry) => [entry.id as string, JSON.stringify(entry)]))
    cachedVersion = table.version
  }

  return {
    listModels: function listModels(head: RequestHead, reply: Reply): void {
      refresh()
      sendJson(reply, 200, cachedModels, ['x-request-id', head.requestId])
    },

    /**
     * One entry, as the list shows it. The id is the rest of the path, percent-decoded: the openai client sends
     * `/v1/models/org%2Fname`, a hand-written call may send the slash as it is.
     */
    getModel: function getModel(head: RequestHead, reply: Reply): void {
      const headers = ['x-request-id', head.requestId]
      let id = head.path.slice(MODEL_PATH.length)
      try {
        id = decodeURIComponent(id)
      } catch {
        // Not valid percent-encoding: looked up as it came, and so not found.
      }
      refresh()
      const entry = id === '' ? undefined : cachedEntries.get(id)
      if (entry === undefined) {
        sendError(reply, new RouterError('model_not_found', `model ${id} is not in the catalog`), head.requestId, headers)
        return
      }
      sendJson(reply, 200, entry, headers)
    },

    listProviders: function listProviders(head: RequestHead, reply: Reply): void {
      const headers = ['x-request-id', head.requestId]
      const model = new URLSearchParams(head.query).get('model')
      if (model === null || model === '') {
        sendError(reply, new RouterError('invalid_request', 'the model query parameter is required: /v1/providers?model=<model_id>'), head.requestId, headers)
        return
      }
      const index = table.model(model)
      const left = unrouted?.unrouted(model) ?? []
      if (index === undefined && left.length > 0) {
        sendJson(reply, 200, JSON.stringify({ object: 'list', data: left.map(unroutedEntry) }), headers)
        return
      }
      if (index === undefined) {
        sendError(reply, new RouterError('model_not_found', `model ${model} is not in the catalog`), head.requestId, headers)
        return
      }
      const now = performance.now()
      const data: Record<string, unknown>[] = index.offers.map((o) => providerEntry(o, now))
      for (const u of left) data.push(unroutedEntry(u))
      sendJson(reply, 200, JSON.stringify({ object: 'list', data }), headers)
    },
  }
}
